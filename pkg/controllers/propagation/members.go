package propagation

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// memberChanged asks every Propagation again about a member whose
// registration, acceptance, labels or state changed, and the Propagations
// that failed there about one whose kubeconfig changed; it records in the
// journal when a member left and that it is back: what a member owes is
// kept until it has been gone longer than forgetAfter (keepOwed forgets
// it), so a registration deleted and created again keeps it.
func (r *reconciler) memberChanged(ctx context.Context, e registry.Event) {
	if !e.Registered() && !e.Removed() && !e.LabelsChanged() && !e.StateChanged() && e.Old.Accepted() == e.New.Accepted() {
		if newKubeconfig(e) {
			// A new credential may have the rights a failure lacked.
			for _, key := range r.results.retryFailed(e.Name) {
				r.enqueue(fleet.Request{ClusterName: e.Name, NamespacedName: key})
			}
		}
		return // a probe, or a new credential: nothing else a Propagation reads
	}
	if e.Removed() || !e.New.Accepted() {
		r.results.forgetMember(e.Name)
		r.metrics.forget(e.Name)
	}
	var err error
	switch {
	case e.Removed():
		err = r.journal.Depart(e.Name, time.Now())
	case e.Registered():
		err = r.journal.Return(e.Name)
	}
	if err != nil {
		r.log.Error(err, "Recording in the journal whether a member left", "cluster", e.Name)
	}
	if e.StateChanged() && e.New.State == member.StateReady {
		if mc := r.copies.get(e.Name); mc != nil {
			r.owed.again(mc)
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

// newKubeconfig reports whether e is an accepted member's new kubeconfig,
// as a rotated credential.
func newKubeconfig(e registry.Event) bool {
	_, old, ok := e.Old.Registration()
	_, now, accepted := e.New.Registration()
	return ok && accepted && old != now
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
