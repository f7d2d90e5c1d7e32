package member_test

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"k8s.io/client-go/kubernetes"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestReadyMemberIsPingedBetweenReviews probes a Ready member every
// 100 ms with a review due every second: its API server sees a
// SelfSubjectReview a second, not one a probe, and the member stays
// Ready, so the probes in between were answered PINGs.
func TestReadyMemberIsPingedBetweenReviews(t *testing.T) {
	needEnvtest(t)
	const window = 3 * time.Second
	opts := member.HealthOptions{Interval: 100 * time.Millisecond, ReviewInterval: time.Second, RetryInterval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1, DisconnectAfter: time.Hour}
	var probes, failures atomic.Int64
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage: w.engage,
		Health: opts,
		Registry: member.NewObservedRegistry(func(_ string, _ fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
			if probe != nil {
				probes.Add(1)
				if probe.Err != nil {
					failures.Add(1)
				}
			}
		}),
	})
	if err := pool.Set(registry.Registration{ClusterName: "pinged", Kubeconfig: kubeconfig(t, members[0])}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	poll.Until(t, "pinged Ready", func() bool { s, _ := pool.State("pinged"); return s == fleetv1alpha1.MemberStateReady })

	reviewsBefore, probesBefore := selfSubjectReviews(t), probes.Load()
	time.Sleep(window)
	reviews, probed := selfSubjectReviews(t)-reviewsBefore, probes.Load()-probesBefore
	t.Logf("%d probes, %d reviews in %s", probed, reviews, window)
	if probed < 10 {
		t.Fatalf("%d probes in %s, want about %d", probed, window, window/opts.Interval)
	}
	if most := int64(window/opts.ReviewInterval) + 1; reviews > most {
		t.Errorf("%d reviews in %s, want at most %d: the probes in between should be PINGs", reviews, window, most)
	}
	if failures.Load() != 0 {
		t.Errorf("%d probes failed", failures.Load())
	}
	if s, _ := pool.State("pinged"); s != fleetv1alpha1.MemberStateReady {
		t.Errorf("pinged is %s, want Ready", s)
	}
}

// selfSubjectReviews returns how many SelfSubjectReviews members[0]'s
// API server has served, from its metrics.
func selfSubjectReviews(t *testing.T) int64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(members[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for s := bufio.NewScanner(bytes.NewReader(metrics)); s.Scan(); {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="selfsubjectreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int64(v)
	}
	return n
}
