package propagation

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// maintenance returns member's maintenance, from its MemberCluster: ""
// when it has none, or no MemberCluster.
func (r *reconciler) maintenance(ctx context.Context, member string) (fleetv1alpha1.MaintenanceMode, error) {
	var mc fleetv1alpha1.MemberCluster
	if err := r.hub.Get(ctx, client.ObjectKey{Name: member}, &mc); apierrors.IsNotFound(err) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	return mc.Spec.Maintenance, nil
}

// deletingRetry is when a run that waits for a copy's deletion looks
// again, if no event of the copy asked first.
const deletingRetry = 10 * time.Second

// maintenanceChanged passes the events of a MemberCluster whose
// maintenance changed.
var maintenanceChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return maintenanceOf(e.Object) != "" },
	DeleteFunc:  func(e event.DeleteEvent) bool { return maintenanceOf(e.Object) != "" },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc:  func(e event.UpdateEvent) bool { return maintenanceOf(e.ObjectOld) != maintenanceOf(e.ObjectNew) },
}

func maintenanceOf(obj client.Object) fleetv1alpha1.MaintenanceMode {
	if mc, ok := obj.(*fleetv1alpha1.MemberCluster); ok {
		return mc.Spec.Maintenance
	}
	return ""
}

// memberMaintained asks every Propagation again, on the hub and in the
// member, about a member whose maintenance changed, and publishes where
// its drain stands: a member with no Propagation is drained at once.
func (r *reconciler) memberMaintained(ctx context.Context, _ string, obj client.Object) []fleet.Request {
	member := obj.GetName()
	r.publishDrain(member, maintenanceOf(obj))
	props, err := r.propagations(ctx)
	if err != nil {
		return nil
	}
	reqs := make([]fleet.Request, 0, 2*len(props))
	for i := range props {
		key := client.ObjectKeyFromObject(&props[i])
		reqs = append(reqs, fleet.Request{NamespacedName: key}, fleet.Request{ClusterName: member, NamespacedName: key})
	}
	return reqs
}

// publishDrain tells Options.Drains where member's drain stands: how
// many Propagations still hold copies there, as the journal records them
// (it outlives a restart, when no member run has reported yet), and what
// the first waits for, as the runs report. A member not drained has no
// drain.
func (r *reconciler) publishDrain(member string, maintenance fleetv1alpha1.MaintenanceMode) {
	if r.drains == nil {
		return
	}
	if maintenance != fleetv1alpha1.MaintenanceDrain {
		r.drains.Forget(member)
		return
	}
	copies, err := r.journal.Copies(member)
	if err != nil {
		return
	}
	holding := map[propagationKey]bool{}
	for _, c := range copies {
		holding[propagationKey{Namespace: c.Namespace, Name: c.Propagation}] = true
	}
	st := fleetv1alpha1.DrainStatus{Remaining: int32(len(holding))}
	results := r.results.ofMember(member)
	keys := slices.SortedFunc(maps.Keys(holding), func(a, b propagationKey) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range keys {
		if res := results[key]; res.reason == fleetv1alpha1.ReasonWaitingForDisruptionBudget {
			st.Message = "waiting for the disruption budget of " + describeKey(key)
			if _, holders, ok := strings.Cut(res.message, budgetPrefix); ok {
				st.Message += ": " + holders
			}
			break
		}
	}
	for _, key := range keys {
		if res := results[key]; st.Message == "" && res.reason == apply.ReasonWaitingForDeletion {
			st.Message = describeKey(key) + ": " + res.message
		}
	}
	switch {
	case st.Message != "":
	case st.Remaining == 1:
		st.Message = "removing the copies of 1 Propagation"
	case st.Remaining > 1:
		st.Message = fmt.Sprintf("removing the copies of %d Propagations", st.Remaining)
	}
	r.drains.Publish(member, st)
}

// budgetPrefix begins what budgetHolders says.
const budgetPrefix = "the disruption budget allows: "

// budgetHolders says, for a drained member of p waiting for p's
// disruption budget, who uses the budget up, as p's status tells: the
// members given a revision whose copies are not Available, with their
// reason, and the drained members whose copies are being removed, as
// kubectl drain names the PodDisruptionBudget and the pod. The planner
// counts the same members (see planDrain).
func budgetHolders(p *fleetv1alpha1.Propagation, member string) string {
	maxUnavailable := int32(1)
	if p.Spec.DisruptionBudget.MaxUnavailable != nil {
		maxUnavailable = *p.Spec.DisruptionBudget.MaxUnavailable
	}
	var holders []string
	for _, e := range p.Status.Members {
		switch {
		case e.Name == member || e.Available == metav1.ConditionTrue || assignedRevision(p, e.Name) == 0:
		case e.Reason == fleetv1alpha1.ReasonDraining || e.Reason == fleetv1alpha1.ReasonWaitingForDisruptionBudget || e.Reason == fleetv1alpha1.ReasonCordoned:
		default:
			holders = append(holders, fmt.Sprintf("%s is not available (%s)", e.Name, cmp.Or(e.Reason, string(e.Result))))
		}
	}
	if p.Status.Rollout != nil {
		for _, name := range p.Status.Rollout.Draining {
			if name != member {
				holders = append(holders, name+" is draining")
			}
		}
	}
	what := "the members using it are not known yet"
	if len(holders) > 0 {
		what = words.NameList(holders)
	}
	return fmt.Sprintf("%smaxUnavailable %d; %s", budgetPrefix, maxUnavailable, what)
}

// NewDrains returns an empty store of drains for Options.Drains and
// their readers.
func NewDrains() *registry.Facts[fleetv1alpha1.DrainStatus] {
	return registry.NewFacts(func(a, b fleetv1alpha1.DrainStatus) bool { return a == b })
}

// describeKey names a Propagation in messages: "Propagation ns/name" or
// "ClusterPropagation name".
func describeKey(key propagationKey) string {
	if isCluster(key) {
		return "ClusterPropagation " + key.Name
	}
	return "Propagation " + key.Namespace + "/" + key.Name
}
