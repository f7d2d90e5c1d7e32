package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and annotations of a replica's Lease.
const (
	// ReplicaLabel marks the Lease of each replica that shares the fleet.
	ReplicaLabel = "fleet.fleetkube.io/replica"
	// LeavingAnnotation is set by a replica that is shutting down: the
	// others take its members over, and it hands them on.
	LeavingAnnotation = "fleet.fleetkube.io/leaving"
	// PreparedAnnotation names the last view (a set of replicas) for
	// which the replica has warmed every member it takes over.
	PreparedAnnotation = "fleet.fleetkube.io/prepared"
	// ReleasedAnnotation names the last view for which the replica has
	// stopped every member it does not own.
	ReleasedAnnotation = "fleet.fleetkube.io/released"
	// TenancyAnnotation is the tenancy mode the replica resolved
	// (Enforce or Off), so that the replicas of a fleet agree on it.
	TenancyAnnotation = "fleet.fleetkube.io/tenancy"
)

// marks are what a replica says of itself on its Lease.
type marks struct {
	leaving            bool
	prepared, released string
	// tenancy is set by the replica's owner (SetTenancy), not its loop.
	tenancy string
}

func marksOf(l *coordinationv1.Lease) marks {
	return marks{
		leaving:  l.Annotations[LeavingAnnotation] == "true",
		prepared: l.Annotations[PreparedAnnotation],
		released: l.Annotations[ReleasedAnnotation],
		tenancy:  l.Annotations[TenancyAnnotation],
	}
}

// errHeldElsewhere: the Lease of this replica's name is held by another
// process, not expired: an earlier incarnation, or a second replica of
// the same name.
var errHeldElsewhere = errors.New("the replica's Lease is held by another process")

// ownLease writes this replica's Lease: created or renewed with the marks
// the loop wants, by one goroutine (renew), so that the loop never waits
// on the hub. It also tells when this replica last proved that it holds
// the Lease: the send time of the latest write of this process that its
// Lease cache has shown (confirm). The cache shows the Leases' changes in
// the order the hub made them, so a cache that shows a write sent at t
// shows every Lease as it was at t or later.
type ownLease struct {
	client    client.Client // uncached: a Get is a quorum read
	clock     clock.PassiveClock
	key       client.ObjectKey
	holder    string
	duration  time.Duration
	deadline  time.Duration // RenewDeadline: a write sent longer ago proves nothing
	observing *observations
	// kick asks the writer to write the marks wanted now.
	kick chan struct{}

	// writing serializes writes and guards lease.
	writing sync.Mutex
	lease   *coordinationv1.Lease // as last read or written; nil: read it

	// mu guards what follows; never held while the hub is waited for.
	mu      sync.Mutex
	want    marks
	written marks
	// unshown holds when each write that succeeded and that the cache
	// has not shown yet was sent, oldest first.
	unshown []time.Time
	// sent holds when each recent write was sent (by this process's
	// clock, monotonic), keyed by the renewTime it wrote, in microseconds.
	sent      map[int64]time.Time
	shown     int64     // the latest renewTime of this process the cache showed
	confirmed time.Time // when the latest write the cache has shown was sent
}

// mark asks for m on the Lease, but for its tenancy (see setTenancy);
// the writer writes it at once.
func (o *ownLease) mark(m marks) {
	o.edit(func(want *marks) {
		m.tenancy = want.tenancy
		*want = m
	})
}

// setTenancy asks for the tenancy mode on the Lease; the writer writes
// it at once.
func (o *ownLease) setTenancy(mode string) {
	o.edit(func(want *marks) { want.tenancy = mode })
}

// edit changes the marks wanted, and kicks the writer if they changed.
func (o *ownLease) edit(change func(*marks)) {
	o.mu.Lock()
	before := o.want
	change(&o.want)
	changed := o.want != before
	o.mu.Unlock()
	if changed {
		select {
		case o.kick <- struct{}{}:
		default:
		}
	}
}

// write renews the Lease with the marks wanted. It waits for the hub at
// most RenewDeadline: a slow answer is no failure while it may still
// count.
func (o *ownLease) write(ctx context.Context) error {
	o.writing.Lock()
	defer o.writing.Unlock()
	o.mu.Lock()
	m := o.want
	o.mu.Unlock()
	sent := o.clock.Now()
	o.mu.Lock()
	o.sent[sent.UnixMicro()] = sent // a write that fails may still land
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	if o.lease == nil {
		l := &coordinationv1.Lease{}
		switch err := o.client.Get(ctx, o.key, l); {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: o.key.Namespace, Name: o.key.Name}}
			o.fill(l, m, sent)
			if err := o.client.Create(ctx, l); err != nil {
				return fmt.Errorf("creating the replica's Lease: %w", err)
			}
			o.wrote(l, m, sent)
			return nil
		case err != nil:
			return fmt.Errorf("reading the replica's Lease: %w", err)
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder != "" && holder != o.holder && !o.observing.expired(l, sent) {
			return errHeldElsewhere
		}
		o.lease = l
	}
	l := o.lease.DeepCopy()
	o.fill(l, m, sent)
	if err := o.client.Update(ctx, l); err != nil {
		o.lease = nil // read it again: it changed, or is gone
		return fmt.Errorf("renewing the replica's Lease: %w", err)
	}
	o.wrote(l, m, sent)
	return nil
}

func (o *ownLease) fill(l *coordinationv1.Lease, m marks, now time.Time) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[ReplicaLabel] = "true"
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	set := func(key, value string) {
		if value == "" {
			delete(l.Annotations, key)
		} else {
			l.Annotations[key] = value
		}
	}
	set(LeavingAnnotation, map[bool]string{true: "true"}[m.leaving])
	set(PreparedAnnotation, m.prepared)
	set(ReleasedAnnotation, m.released)
	set(TenancyAnnotation, m.tenancy)
	if ptr.Deref(l.Spec.HolderIdentity, "") != o.holder {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		l.Spec.HolderIdentity = ptr.To(o.holder)
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(o.duration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

func (o *ownLease) wrote(l *coordinationv1.Lease, m marks, sent time.Time) {
	o.lease = l
	o.mu.Lock()
	defer o.mu.Unlock()
	o.written = m
	o.unshown = append(o.unshown, sent)
}

// confirm takes in this replica's Lease as its cache shows it at now: a
// write of this process that it shows is proved.
func (o *ownLease) confirm(cached *coordinationv1.Lease, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ptr.Deref(cached.Spec.HolderIdentity, "") != o.holder || cached.Spec.RenewTime == nil {
		return
	}
	key := cached.Spec.RenewTime.UnixMicro()
	o.shown = max(o.shown, key)
	o.unshown = slices.DeleteFunc(o.unshown, func(sent time.Time) bool { return sent.UnixMicro() <= o.shown })
	if sent, ok := o.sent[key]; ok && sent.After(o.confirmed) {
		o.confirmed = sent
	}
	// A write sent RenewDeadline ago proves nothing any more.
	for key, sent := range o.sent {
		if !sent.After(o.confirmed) || now.Sub(sent) >= o.deadline {
			delete(o.sent, key)
		}
	}
}

// state returns the marks wanted and last written, and when the latest
// write the cache has shown was sent (zero: none yet).
func (o *ownLease) state() (want, written marks, confirmed time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.want, o.written, o.confirmed
}

// lagging reports whether the cache has not shown, within RenewDeadline,
// a write that succeeded: the watch stalled or the hub is far behind.
// This replica cannot see the others, so it renews no more until its
// cache catches up: the others then take its members over.
func (o *ownLease) lagging(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.unshown) > 0 && now.Sub(o.unshown[0]) >= o.deadline
}

// release deletes the Lease, if this process holds it, so that the
// others need not wait for it to expire.
func (o *ownLease) release(ctx context.Context) error {
	o.writing.Lock()
	defer o.writing.Unlock()
	if o.lease == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	err := o.client.Delete(ctx, o.lease, client.Preconditions{UID: &o.lease.UID, ResourceVersion: &o.lease.ResourceVersion})
	o.lease = nil
	o.mu.Lock()
	o.confirmed, o.unshown = time.Time{}, nil
	o.mu.Unlock()
	return client.IgnoreNotFound(err)
}

// observations remember when this process last saw each Lease change, by
// its own clock: a Lease is expired once it has not changed for its
// duration since. Like client-go's leader election, it never compares
// another replica's clock with this one's, so clock skew between replicas
// does not matter; only their clocks' rates must agree.
type observations struct {
	clock clock.PassiveClock

	mu   sync.Mutex
	seen map[string]observation
}

type observation struct {
	version string
	at      time.Time
}

// expired reports whether l has not changed for its duration, as this
// process saw it. A Lease seen for the first time counts as just renewed.
func (o *observations) expired(l *coordinationv1.Lease, now time.Time) bool {
	if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	seen, ok := o.seen[l.Name]
	if !ok || seen.version != l.ResourceVersion {
		seen = observation{version: l.ResourceVersion, at: now}
		o.seen[l.Name] = seen
	}
	duration := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	return now.Sub(seen.at) > duration
}

// nextExpiry returns when the first Lease observed and not yet expired
// expires, as this process sees it; zero if none.
func (o *observations) nextExpiry(leases []coordinationv1.Lease, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var next time.Time
	for i := range leases {
		seen, ok := o.seen[leases[i].Name]
		if !ok {
			continue
		}
		at := seen.at.Add(time.Duration(ptr.Deref(leases[i].Spec.LeaseDurationSeconds, 0))*time.Second + time.Millisecond)
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// forget drops the observations of Leases not in names.
func (o *observations) forget(names map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.seen {
		if !names[name] {
			delete(o.seen, name)
		}
	}
}
