package shard

import (
	"context"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// pass looks at the Leases and the registry once and takes the handoff
// as far as it can go now:
//
//  1. the view is the set of live replicas that are not leaving; each
//     cluster's owner is picked among them;
//  2. the clusters this replica owns and did not run become Incoming:
//     their members start, their work held; once each is warm (or
//     HandoffTimeout passed) the replica marks the view prepared;
//  3. once every replica of the view is prepared, each stops the members
//     it no longer owns (NotOwned), and once they have stopped marks the
//     view released;
//  4. once every live replica has released the view, each replica's
//     Incoming clusters become Owned: their work starts.
//
// A replica whose Lease was not renewed for RenewDeadline is fenced: it
// stops every member at once and takes none until it renews again. A
// replica counts itself among the view only from one RetryPeriod after
// its Lease was first written.
// done says a leaving replica has released everything and said so; busy,
// that the pass waits on this replica's own members.
func (r *Replica) pass(ctx context.Context, leaving bool) (done, busy bool) {
	now := r.opts.Clock.Now()
	written, renewedAt := r.lease.state()
	fenced := renewedAt.IsZero() || now.Sub(renewedAt) >= r.opts.RenewDeadline
	if fenced != r.metrics.fenced() && !renewedAt.IsZero() {
		if fenced {
			r.log.Info("Fenced: the replica's Lease was not renewed in time; stopping every member until it is")
		} else {
			r.log.Info("The replica's Lease is renewed again")
		}
	}
	r.metrics.setFenced(fenced)

	var leases coordinationv1.LeaseList
	if err := r.cache.List(ctx, &leases); err != nil {
		return false, false // the cache stopped
	}
	present := map[string]bool{}
	others := map[string]marks{} // the live replicas but this one
	var view []string
	for i := range leases.Items {
		l := &leases.Items[i]
		present[l.Name] = true
		if l.Name == r.opts.Name || r.seen.expired(l, now) {
			continue
		}
		m := marksOf(l)
		others[l.Name] = m
		if !m.leaving {
			view = append(view, l.Name)
		}
	}
	r.seen.forget(present)
	// A replica that just came waits one RetryPeriod before it counts
	// itself: replicas that start together see each other's Leases by
	// then, so that none takes every member for a moment.
	if r.joined.IsZero() && !renewedAt.IsZero() {
		r.joined = now
	}
	in := !fenced && !leaving && now.Sub(r.joined) >= r.opts.RetryPeriod
	if in {
		view = append(view, r.opts.Name)
	}
	slices.Sort(view)
	if id := viewID(view); id != r.id {
		r.view, r.id, r.viewSince = view, id, now
		r.log.Info("Replicas changed", "replicas", view, "view", id)
		r.metrics.replicas.Set(float64(len(view)))
	}
	r.mu.Lock()
	r.working = nil
	if in {
		r.working = r.view
	}
	r.mu.Unlock()

	clusters := r.opts.Registry.List()
	owners := make([]string, len(clusters))
	warming := false
	var outgoing []int
	for i, c := range clusters {
		owner := ownerOf(c.Name, r.view)
		owners[i] = owner
		switch {
		case owner == r.opts.Name:
			ownership := c.Ownership
			if ownership == registry.NotOwned {
				ownership = registry.Incoming
			}
			r.opts.Registry.Assign(c.Name, owner, ownership)
			if ownership == registry.Incoming && !r.opts.Warm(c.Name) {
				warming = true
			}
		case c.Ownership == registry.Owned:
			outgoing = append(outgoing, i)
		default:
			r.opts.Registry.Assign(c.Name, owner, registry.NotOwned)
		}
	}

	want := written
	want.leaving = leaving
	if !warming || now.Sub(r.viewSince) >= r.opts.HandoffTimeout {
		want.prepared = r.id
	}
	allPrepared := want.prepared == r.id
	for _, name := range r.view {
		if name != r.opts.Name && others[name].prepared != r.id {
			allPrepared = false
		}
	}
	stopping := false
	if allPrepared || fenced {
		for _, i := range outgoing {
			r.opts.Registry.Assign(clusters[i].Name, owners[i], registry.NotOwned)
			r.metrics.moves.WithLabelValues(directionOut).Inc()
		}
		for i, c := range clusters {
			if owners[i] != r.opts.Name && r.opts.Running(c.Name) {
				stopping = true
			}
		}
		if !stopping {
			want.released = r.id
		}
	}
	if want != written && !fenced {
		if err := r.lease.write(ctx, want); err != nil {
			r.log.V(1).Info("Could not mark the replica's Lease", "err", err.Error())
			return false, true
		}
	}

	allReleased := want.released == r.id
	for _, m := range others {
		if m.released != r.id {
			allReleased = false
		}
	}
	owned := 0
	for i, c := range clusters {
		if owners[i] != r.opts.Name {
			continue
		}
		owned++
		if allReleased && in && r.ownership(c.Name) == registry.Incoming {
			r.opts.Registry.Assign(c.Name, r.opts.Name, registry.Owned)
			r.metrics.moves.WithLabelValues(directionIn).Inc()
		}
	}
	r.metrics.owned.Set(float64(owned))
	return leaving && want.released == r.id, warming || stopping
}

// ownership returns what the registry says this replica does for the
// cluster now.
func (r *Replica) ownership(name string) registry.Ownership {
	if c, ok := r.opts.Registry.Get(name); ok {
		return c.Ownership
	}
	return registry.NotOwned
}

// releaseAll stops every member here: the end of a leaving replica's
// handoff, whether the others took over or HandoffTimeout passed.
func (r *Replica) releaseAll() {
	others := slices.DeleteFunc(slices.Clone(r.view), func(name string) bool { return name == r.opts.Name })
	for _, c := range r.opts.Registry.List() {
		r.opts.Registry.Assign(c.Name, ownerOf(c.Name, others), registry.NotOwned)
	}
	r.metrics.owned.Set(0)
}
