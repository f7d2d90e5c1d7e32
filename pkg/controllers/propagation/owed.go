package propagation

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// memberEngaged records in the journal the copies of this fleet the
// member's cache found, so that a journal that was lost, or kept by
// another replica, learns them again, and tells the member of a lost
// journal. Only copies that carry the fleet's identity are recorded: the
// journal proves the copies stamped without one.
func (r *reconciler) memberEngaged(ctx context.Context, mc *memberCopies) {
	id, err := r.m.FleetID(ctx)
	if err != nil {
		return // the member left, or the manager stops
	}
	var found []journal.Copy
	for _, gvk := range mc.watched() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := mc.cache.List(ctx, list, client.MatchingLabels{fleetv1alpha1.FleetIDLabel: id}); err != nil {
			continue
		}
		for i := range list.Items {
			if c := journalCopy(&list.Items[i]); c.Propagation != "" {
				found = append(found, c)
			}
		}
	}
	if err := r.journal.Record(mc.name, found); err != nil && ctx.Err() == nil {
		r.log.Error(err, "Recording the copies found in a member in the journal", "cluster", mc.name)
	}
	r.countOwed(mc.name)
	if rec := r.journal.Recovered(); rec != nil && rec.MovedTo != "" {
		obj := &fleetv1alpha1.MemberCluster{}
		if _, told := r.recoveryTold.LoadOrStore(mc.name, true); !told && r.hub.Get(ctx, types.NamespacedName{Name: mc.name}, obj) == nil {
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonJournalLost, "Recover",
				"the manager's journal could not be used (%v) and was moved to %s: the copies found in this member are recorded again; removals it owed for deleted Propagations are forgotten unless their copies are found", rec.Err, rec.MovedTo)
		}
	}
}

// journalCopy is the journal's entry of a copy.
func journalCopy(obj *unstructured.Unstructured) journal.Copy {
	return journal.Copy{
		Object:      journal.Object{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Propagation: obj.GetLabels()[fleetv1alpha1.PropagationLabel],
		Hash:        obj.GetAnnotations()[fleetv1alpha1.ContentHashAnnotation],
	}
}

// replayOwed carries out the removals mc's member owes before any other
// request of the member: once after it is engaged, and once after each
// time it is Ready again.
func (r *reconciler) replayOwed(ctx context.Context, mc *memberCopies, id string) error {
	mc.replayMu.Lock()
	defer mc.replayMu.Unlock()
	if mc.replayed {
		return nil
	}
	owed, err := r.journal.Owed(mc.name)
	if err != nil {
		return fmt.Errorf("reading the removals the member owes: %w", err)
	}
	for _, o := range owed {
		key := propagationKey{Namespace: o.Namespace, Name: o.Propagation}
		if _, err := r.reconcileCopies(ctx, mc, key, id); err != nil {
			return fmt.Errorf("removing the copies of Propagation %s the member owes: %w", key, err)
		}
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Owed removals carried out", "propagations", len(owed))
		r.countOwed(mc.name)
	}
	mc.replayed = true
	return nil
}

// owe records that member owes the removal of p's copies: in the journal
// first, so that nothing on the hub is released before it is on disk.
func (r *reconciler) owe(ctx context.Context, p *fleetv1alpha1.Propagation, member, message string) error {
	key := client.ObjectKeyFromObject(p)
	if err := r.journal.Owe(member, journal.Owed{Namespace: key.Namespace, Propagation: key.Name, Kinds: kindsOf(p), Reason: message}); err != nil {
		return fmt.Errorf("recording in the journal that member %s owes the removal of copies: %w", member, err)
	}
	if r.results.owe(key, member, message, kindsOf(p)) {
		logf.FromContext(ctx).V(1).Info("Removal of copies owed", "member", member)
	}
	r.countOwed(member)
	return nil
}

// countOwed tells fleet_propagation_owed_deletions and the registry, and
// so the member's MemberCluster, of the removals member owes.
func (r *reconciler) countOwed(member string) {
	owed, err := r.journal.Owed(member)
	if err != nil {
		return
	}
	r.metrics.owedDeletions.WithLabelValues(member).Set(float64(len(owed)))
	var removals []registry.OwedRemoval
	for _, o := range owed {
		removals = append(removals, registry.OwedRemoval{Namespace: o.Namespace, Propagation: o.Propagation, Reason: o.Reason, Since: o.Decided})
	}
	r.m.Registry().ObserveOwed(member, removals)
}

// forgetMember forgets what the journal holds of a member that left the
// fleet, and compacts it when that left it well past its live size.
func (r *reconciler) forgetMember(member string) {
	if err := r.journal.ForgetMember(member); err != nil {
		r.log.Error(err, "Forgetting a member that left in the journal", "cluster", member)
		return
	}
	if _, err := r.journal.Compact(); err != nil {
		r.log.Error(err, "Compacting the journal")
	}
}

// forgetMembersThatLeft forgets, once the registry has read every
// registration, the members of the journal that left the fleet while no
// manager led it, and counts what the others owe.
func (r *reconciler) forgetMembersThatLeft(ctx context.Context) {
	select {
	case <-r.m.Registry().Synced():
	case <-ctx.Done():
		return
	}
	members, err := r.journal.Members()
	if err != nil {
		r.log.Error(err, "Reading the journal's members")
		return
	}
	for _, member := range members {
		if _, registered := r.m.Registry().Get(member); registered {
			r.countOwed(member)
			continue
		}
		r.log.Info("Forgetting what the journal holds of a member that left the fleet", "cluster", member)
		r.forgetMember(member)
	}
}
