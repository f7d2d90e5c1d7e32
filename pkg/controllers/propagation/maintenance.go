package propagation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
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

// publishDrain tells Options.Drains where member's drain stands, from the
// results of the Propagations in it: how many still hold copies there,
// and what the first waits for. A member not drained has no drain.
func (r *reconciler) publishDrain(member string, maintenance fleetv1alpha1.MaintenanceMode) {
	if r.drains == nil {
		return
	}
	if maintenance != fleetv1alpha1.MaintenanceDrain {
		r.drains.Forget(member)
		return
	}
	held := r.results.ofMember(member)
	keys := slices.SortedFunc(maps.Keys(held), func(a, b propagationKey) int { return strings.Compare(a.String(), b.String()) })
	var st fleetv1alpha1.DrainStatus
	for _, key := range keys {
		res := held[key]
		if res.copies == 0 {
			continue
		}
		st.Remaining++
		if st.Message == "" && res.reason == fleetv1alpha1.ReasonWaitingForDisruptionBudget {
			st.Message = "waiting for the disruption budget of " + describeKey(key)
		}
	}
	if st.Message == "" && st.Remaining > 0 {
		st.Message = fmt.Sprintf("removing the copies of %d Propagations", st.Remaining)
	}
	r.drains.Publish(member, st)
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
