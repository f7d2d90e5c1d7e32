package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestGetMembersWatch: --watch prints the members, a row per change, and
// a row when a member's last probe grows stale, with no change to it.
func TestGetMembersWatch(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	mc := newMember("watch-east", "watch", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "watch-east", Format: fleetv1alpha1.FormatNative})
	createMember(t, c, mc)
	now := mc.CreationTimestamp.Add(time.Hour)
	clk := clocktesting.NewFakeClock(now)

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runCLIContext(ctx, nil, clk, &stdout, &stderr, "get", "members", "--watch", "-l", getTestLabel+"=watch", hubFlag)
	}()
	lines := func(n int) func() bool {
		return func() bool { return strings.Count(stdout.String(), "\n") >= n }
	}
	poll.Until(t, "the header and the member", lines(2))

	setStatus(t, c, mc, fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Minute)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Minute)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-time.Minute)),
		},
		ServerVersion:   "v1.37.1",
		LastProbeTime:   ptrTime(now.Add(-5 * time.Second)),
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	})
	poll.Until(t, "the member Ready", lines(3))

	// No manager probes it any more: 80 s on, it is Unknown.
	poll.Until(t, "the watch's ticker", clk.HasWaiters)
	clk.Step(75 * time.Second)
	poll.Until(t, "the member Unknown", lines(4))

	cancel()
	if code := <-done; code != 0 || stderr.String() != "" {
		t.Fatalf("get members --watch: exit %d, stderr %q", code, stderr.String())
	}
	checkGolden(t, "members-watch.golden", stdout.String())
}
