package propagation

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/pkg/cluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// memberChanged asks every Propagation again about a member whose
// registration, acceptance, labels or state changed, and forgets a member
// that left.
func (r *reconciler) memberChanged(ctx context.Context, e registry.Event) {
	if !e.Registered() && !e.Removed() && !e.LabelsChanged() && !e.StateChanged() && e.Old.Accepted() == e.New.Accepted() {
		return // a probe, or a new credential: nothing a Propagation reads
	}
	if e.Removed() || !e.New.Accepted() {
		r.results.forgetMember(e.Name)
		r.metrics.forget(e.Name)
	}
	if e.Removed() {
		r.forgetMember(e.Name)
	}
	if e.StateChanged() && e.New.State == cluster.StateReady {
		if mc := r.copies.get(e.Name); mc != nil {
			mc.replayAgain()
		}
	}
	props, err := r.propagations(ctx)
	if err != nil {
		return
	}
	for i := range props {
		key := client.ObjectKeyFromObject(&props[i])
		r.enqueue(fleet.Request{NamespacedName: key}, fleet.Request{ClusterName: e.Name, NamespacedName: key})
	}
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
