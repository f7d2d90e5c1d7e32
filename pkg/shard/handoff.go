package shard

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// A replica that cannot prove it holds its Lease is fenced: it stops
// every member at once and takes none until it can again. The proof is a
// renewal of this process that its Lease cache has shown, sent less than
// RenewDeadline ago, without a gap since the last pass. Another replica's Lease counts as expired only once
// it has not changed for its duration in this replica's cache and the hub
// itself, read with a quorum read, still holds that version (expired). A
// replica counts itself among the view only from one RetryPeriod after
// its Lease was first shown.
// done says a leaving replica has released everything and written so;
// busy, that the pass waits on this replica's own members; wake, when
// the next pass must run at the latest: at this replica's renew deadline
// or at the next expiry of another's Lease.
func (r *Replica) pass(ctx context.Context, leaving bool) (done, busy bool, wake time.Time) {
	now := r.opts.Clock.Now()
	var leases coordinationv1.LeaseList
	if err := r.cache.List(ctx, &leases); err != nil {
		return false, false, time.Time{} // the cache stopped
	}
	for i := range leases.Items {
		if leases.Items[i].Name == r.opts.Name {
			r.lease.confirm(&leases.Items[i], now)
		}
	}
	asked, written, confirmed := r.lease.state()
	deadline := confirmed.Add(r.opts.RenewDeadline)
	// The proof must hold without a gap: a pass that finds the last
	// one's deadline passed fences, whatever a newer renewal shows (it
	// may have been sent before a pause and landed after the others took
	// over), so that the members come back only through a handoff.
	r.mu.Lock()
	lapsed := !r.validUntil.IsZero() && !now.Before(r.validUntil)
	r.mu.Unlock()
	proved := !confirmed.IsZero() && now.Before(deadline)
	fenced := !proved || lapsed
	if proved && lapsed {
		r.poke() // unfence at the next pass, this one having fenced
	}
	if fenced != r.metrics.fenced() && !confirmed.IsZero() {
		if fenced {
			r.log.Info("Fenced: no renewal of the replica's Lease shown by its cache within the renew deadline; stopping every member until one is")
		} else {
			r.log.Info("The replica's Lease is renewed again")
		}
	}
	r.metrics.setFenced(fenced)

	present := map[string]bool{}
	others := map[string]marks{} // the live replicas but this one
	var view []string
	for i := range leases.Items {
		l := &leases.Items[i]
		present[l.Name] = true
		if l.Name == r.opts.Name || r.expired(ctx, l, now, fenced) {
			continue
		}
		m := marksOf(l)
		others[l.Name] = m
		if !m.leaving {
			view = append(view, l.Name)
		}
	}
	r.seen.forget(present)
	for name := range r.expiredOnHub {
		if !present[name] {
			delete(r.expiredOnHub, name)
		}
	}
	// A replica that just came waits one RetryPeriod before it counts
	// itself: replicas that start together see each other's Leases by
	// then, so that none takes every member for a moment.
	if r.joined.IsZero() && !confirmed.IsZero() {
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
	tenancies := map[string]string{r.opts.Name: asked.tenancy}
	for name, m := range others {
		tenancies[name] = m.tenancy
	}
	r.mu.Lock()
	r.working, r.validUntil, r.provedUntil = nil, deadline, deadline
	r.tenancies = tenancies
	if fenced {
		// Before the members lose their ownership below: a renewal
		// that landed after a pause must not let them act meanwhile.
		r.provedUntil = time.Time{}
	}
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

	want := asked
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
	if !fenced {
		r.lease.mark(want) // the writer pokes the loop once it is written
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
	wake = r.seen.nextExpiry(leases.Items, now)
	if !fenced && (wake.IsZero() || deadline.Before(wake)) {
		wake = deadline
	}
	return leaving && want.released == r.id && written == want, warming || stopping, wake
}

// expired reports whether another replica's Lease l, as this replica's
// cache shows it at now, has expired: it has not changed for its
// duration, as this replica saw it, and the hub itself still holds that
// version. The hub is asked with a quorum read (an uncached Get), once
// per version, so that a watch that stalled never makes a live replica
// look dead. A fenced replica asks nothing: it takes no member anyway. A
// read that fails is a doubt, and a doubt keeps the replica live.
func (r *Replica) expired(ctx context.Context, l *coordinationv1.Lease, now time.Time, fenced bool) bool {
	if !r.seen.expired(l, now) {
		return false
	}
	if r.expiredOnHub[l.Name] == l.ResourceVersion {
		return true
	}
	if fenced {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.RetryPeriod)
	defer cancel()
	onHub := &coordinationv1.Lease{}
	switch err := r.lease.client.Get(ctx, client.ObjectKeyFromObject(l), onHub); {
	case apierrors.IsNotFound(err):
	case err != nil:
		r.log.V(1).Info("Could not read a replica's Lease from the hub: it stays live", "other", l.Name, "err", err.Error())
		return false
	case onHub.ResourceVersion != l.ResourceVersion:
		r.log.Info("A replica's Lease looks expired in the cache, but the hub holds a newer one: the cache is behind", "other", l.Name)
		return false
	}
	r.expiredOnHub[l.Name] = l.ResourceVersion
	return true
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
