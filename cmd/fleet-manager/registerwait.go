package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// probePollInterval is how often register --wait reads a member recorded
// Ready again, for a probe newer than its start.
const probePollInterval = 250 * time.Millisecond

// lastProbe is when the MemberCluster name of the fleet of namespace ns
// was last probed, as it records it; nil if it records none.
func lastProbe(ctx context.Context, hub client.Client, ns, name string) *metav1.Time {
	var mc fleetv1alpha1.MemberCluster
	if hub.Get(ctx, client.ObjectKey{Name: name}, &mc) != nil || mc.Labels[fleetv1alpha1.FleetLabel] != ns {
		return nil
	}
	return mc.Status.LastProbeTime
}

// waitProbed waits up to timeout until the MemberCluster name of the fleet
// of namespace ns is Ready by a probe newer than before, the last probe it
// recorded when register started (nil if none): a Ready recorded earlier
// may be one no manager probes any more. progress is called with its
// state each time that changes.
func waitProbed(ctx context.Context, hub client.Client, ns, name string, before *metav1.Time, timeout time.Duration, progress func(state string)) (*fleetv1alpha1.MemberCluster, error) {
	const recorded = "Ready as recorded, but not probed since register started"
	deadline := time.Now().Add(timeout)
	shown := ""
	show := func(state string) {
		// Still recorded Ready: say so once, not at each read.
		if state != shown && (shown != recorded || state != string(fleetv1alpha1.MemberStateReady)) {
			shown = state
			progress(state)
		}
	}
	for {
		mc, err := enroll.WaitReady(ctx, hub, ns, name, time.Until(deadline), show)
		if err != nil {
			return nil, notReady(ctx, hub, err)
		}
		if p := mc.Status.LastProbeTime; p != nil && (before == nil || p.After(before.Time)) {
			return mc, nil
		}
		show(recorded)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(probePollInterval):
		}
		if time.Until(deadline) < probePollInterval {
			return nil, notReady(ctx, hub, &enroll.NotReadyError{Name: name, Member: mc, Err: fmt.Errorf("not probed since register started, within %s (is a manager running for this fleet?)", timeout)})
		}
	}
}

// notReady returns err, a failed wait, saying the state `get members`
// shows: Unknown, and why, when no manager probes the member.
func notReady(ctx context.Context, hub client.Client, err error) error {
	if nr, ok := errors.AsType[*enroll.NotReadyError](err); ok && nr.Member != nil {
		nr.Stale = newFreshness(hub, defaultStaleAfter).stale(ctx, nr.Member, time.Now())
	}
	return err
}
