package shard

import (
	"context"
	"errors"
	"fmt"
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
)

// marks are what a replica says of itself on its Lease.
type marks struct {
	leaving            bool
	prepared, released string
}

func marksOf(l *coordinationv1.Lease) marks {
	return marks{
		leaving:  l.Annotations[LeavingAnnotation] == "true",
		prepared: l.Annotations[PreparedAnnotation],
		released: l.Annotations[ReleasedAnnotation],
	}
}

// errHeldElsewhere: the Lease of this replica's name is held by another
// process, not expired: an earlier incarnation, or a second replica of
// the same name.
var errHeldElsewhere = errors.New("the replica's Lease is held by another process")

// ownLease writes this replica's Lease: created or renewed with the marks
// it is given. Writes are serialized; renewedAt is when the last one that
// succeeded was sent.
type ownLease struct {
	client    client.Client
	clock     clock.PassiveClock
	key       client.ObjectKey
	holder    string
	duration  time.Duration
	timeout   time.Duration
	observing *observations

	// mu serializes writes and guards what follows.
	mu        sync.Mutex
	lease     *coordinationv1.Lease // as last read or written; nil: read it
	written   marks
	renewedAt time.Time
}

// write renews the Lease with m.
func (o *ownLease) write(ctx context.Context, m marks) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	sent := o.clock.Now()
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
	if ptr.Deref(l.Spec.HolderIdentity, "") != o.holder {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		l.Spec.HolderIdentity = ptr.To(o.holder)
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(o.duration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

func (o *ownLease) wrote(l *coordinationv1.Lease, m marks, sent time.Time) {
	o.lease, o.written, o.renewedAt = l, m, sent
}

// state returns the marks last written and when that write was sent.
func (o *ownLease) state() (marks, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.written, o.renewedAt
}

// release deletes the Lease, if this process holds it, so that the
// others need not wait for it to expire.
func (o *ownLease) release(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lease == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err := o.client.Delete(ctx, o.lease, client.Preconditions{UID: &o.lease.UID, ResourceVersion: &o.lease.ResourceVersion})
	o.lease, o.renewedAt = nil, time.Time{}
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
