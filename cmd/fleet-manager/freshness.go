package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// staleProbeIntervals is how many probe intervals old a member's
// lastProbeTime may be while a manager probes it: the manager rewrites it
// once it lags membercluster.ProbeTimeRefreshIntervals, checking on that
// period, so a write can fall short once; two intervals more are margin.
const staleProbeIntervals = 2*membercluster.ProbeTimeRefreshIntervals + 2

// defaultStaleAfter is how old a last probe is stale at the manager's
// default --probe-interval: 72s.
var defaultStaleAfter = staleProbeIntervals * member.DefaultHealthOptions().Interval

// stateUnknown is the state shown for a member no manager is probing.
const stateUnknown = "Unknown"

// freshness judges whether the state a MemberCluster records is current:
// a manager probes the member only while its last probe is recent and,
// under leader election, while a manager holds its fleet's Lease. When
// replicas share the fleet, the status names its replica, which writes it
// only on change: it is current while that replica holds its Lease.
type freshness struct {
	c          client.Client
	staleAfter time.Duration
	// leases are the Leases read, by namespace/name, nil where there is
	// none or it cannot be read: the last probe alone judges then.
	leases map[string]*coordinationv1.Lease
}

func newFreshness(c client.Client, staleAfter time.Duration) *freshness {
	return &freshness{c: c, staleAfter: staleAfter, leases: map[string]*coordinationv1.Lease{}}
}

// refresh forgets the Leases read, for the next judgement to read them
// again.
func (f *freshness) refresh() { clear(f.leases) }

// lease returns the Lease name of namespace ns, or nil.
func (f *freshness) lease(ctx context.Context, ns, name string) *coordinationv1.Lease {
	key := ns + "/" + name
	if l, read := f.leases[key]; read {
		return l
	}
	l := &coordinationv1.Lease{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		l = nil // none (no leader election, a replica gone), or not ours to read
	}
	f.leases[key] = l
	return l
}

// stale says why mc's recorded state is not current at now, or "" when it
// is.
func (f *freshness) stale(ctx context.Context, mc *fleetv1alpha1.MemberCluster, now time.Time) string {
	st := mc.Status
	probe := "never probed"
	if st.LastProbeTime != nil {
		probe = "last probed " + when(st.LastProbeTime, now)
	}
	ns := mc.Labels[fleetv1alpha1.FleetLabel]
	if st.Replica != "" {
		// Replicas share the fleet: the status is written on change only,
		// and is current while its replica's Lease is held.
		if l := f.lease(ctx, ns, st.Replica); l == nil || !leaseHeld(l, now) {
			renewal := ""
			if l != nil {
				renewal = renewed(l, now)
			}
			return fmt.Sprintf("replica %s, which owns the member, no longer holds its Lease %s/%s%s; %s", st.Replica, ns, st.Replica, renewal, probe)
		}
		return ""
	}
	if ns != "" {
		if l := f.lease(ctx, ns, leaderElectionID); l != nil && !leaseHeld(l, now) {
			return fmt.Sprintf("no manager holds the Lease %s/%s%s; %s", ns, l.Name, renewed(l, now), probe)
		}
	}
	switch st.State {
	case fleetv1alpha1.MemberStateReady, fleetv1alpha1.MemberStateUnhealthy, fleetv1alpha1.MemberStateDisconnected:
		// probed all along
	default:
		return ""
	}
	if st.LastProbeTime != nil && now.Sub(st.LastProbeTime.Time) > f.staleAfter {
		return fmt.Sprintf("no manager has probed the member for over %s; %s", duration.HumanDuration(f.staleAfter), probe)
	}
	return ""
}

// leaseHeld reports whether a manager holds l at now.
func leaseHeld(l *coordinationv1.Lease, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// renewed says when l was last renewed, or "".
func renewed(l *coordinationv1.Lease, now time.Time) string {
	if l.Spec.RenewTime == nil {
		return ""
	}
	t := metav1.NewTime(l.Spec.RenewTime.Time)
	return ", last renewed " + when(&t, now)
}
