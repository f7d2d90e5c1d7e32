package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// probePollInterval is how often register --wait reads a member recorded
// Ready again, for a probe with the registration it wrote.
const probePollInterval = 250 * time.Millisecond

// waitProbed waits up to timeout until the MemberCluster name of the fleet
// of namespace ns is Ready by a probe with the credentials of the
// registration Secret ns/name as register wrote it, at resourceVersion
// written (or as it is now, when the manager rewrote it since): a Ready
// recorded before may be one no manager probes any more, or one of the
// credentials it replaced. progress is called with its state each time
// that changes.
func waitProbed(ctx context.Context, hub client.Client, ns, name, written string, timeout time.Duration, progress func(state string)) (*fleetv1alpha1.MemberCluster, error) {
	const recorded = "Ready as recorded, but not probed with this registration yet"
	deadline := time.Now().Add(timeout)
	shown := ""
	show := func(state string) {
		// Still recorded Ready: say so once, not at each read.
		if state != shown && (shown != recorded || state != string(fleetv1alpha1.MemberStateReady)) {
			shown = state
			progress(state)
		}
	}
	// checked is the last version observed other than written, and seen
	// whether the Secret has it now: read once, not at each poll.
	checked, seen := "", false
	for {
		mc, err := enroll.WaitReady(ctx, hub, ns, name, time.Until(deadline), show)
		if err != nil {
			return nil, notReady(ctx, hub, err)
		}
		version := mc.Status.ObservedSecretVersion
		if version != "" && version != written && version != checked {
			checked, seen = version, current(ctx, hub, ns, name, version)
		}
		if version != "" && (version == written || seen && version == checked) {
			return mc, nil
		}
		show(recorded)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(probePollInterval):
		}
		if time.Until(deadline) < probePollInterval {
			return nil, notReady(ctx, hub, &enroll.NotReadyError{Name: name, Member: mc, Err: fmt.Errorf("not probed with this registration within %s (is a manager running for this fleet?)", timeout)})
		}
	}
}

// current reports whether the registration Secret ns/name is at
// version: the manager rewrote it (it renews its token in it) since
// register wrote it.
func current(ctx context.Context, hub client.Client, ns, name, version string) bool {
	var s corev1.Secret
	return hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s) == nil && s.ResourceVersion == version
}

// notReady returns err, a failed wait, saying the state `get members`
// shows: Unknown, and why, when no manager probes the member.
func notReady(ctx context.Context, hub client.Client, err error) error {
	if nr, ok := errors.AsType[*enroll.NotReadyError](err); ok && nr.Member != nil {
		nr.Stale = newFreshness(hub, defaultStaleAfter).stale(ctx, nr.Member, time.Now())
	}
	return err
}
