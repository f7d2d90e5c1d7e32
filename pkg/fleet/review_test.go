package fleet_test

// Outside review (wt-review42): attacks on EngageMembers' promises
// (pkg/fleet doc.go, members.go; docs/library.md).

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// slowAware's Engage takes hold, heedless of its context, and remembers
// whether a call is in flight.
type slowAware struct {
	hold     time.Duration
	fail     bool
	inFlight atomic.Int32
	calls    atomic.Int32
	mu       sync.Mutex
	returned time.Time
}

func (s *slowAware) Engage(ctx context.Context, _ string, _ cluster.Cluster) error {
	s.inFlight.Add(1)
	s.calls.Add(1)
	defer func() {
		s.mu.Lock()
		s.returned = time.Now()
		s.mu.Unlock()
		s.inFlight.Add(-1)
	}()
	time.Sleep(s.hold)
	if s.fail {
		return errors.New("review: refusing to engage")
	}
	return nil
}

func (s *slowAware) String() string { return "review-slow" }

// TestReviewEngageMembersWaitsForSlowEngage: EngageMembers cancelled
// while Engage calls are in flight returns only once they have returned;
// one whose Engage keeps failing returns promptly once cancelled.
func TestEngageMembersWaitsForSlowEngage(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{})
	names := []string{suite.Name("rv-slow"), suite.Name("rv-slow")}
	f.Register(t, names[0], suite.Kubeconfigs[0])
	f.Register(t, names[1], suite.Kubeconfigs[1])
	f.WaitEngaged(t, names...)

	for _, tc := range []struct {
		name string
		a    *slowAware
	}{
		{"slow", &slowAware{hold: 3 * time.Second}},
		{"failing", &slowAware{hold: 100 * time.Millisecond, fail: true}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := f.Manager.EngageMembers(ctx, tc.a, nil); err != nil {
				t.Errorf("%s: EngageMembers: %v", tc.name, err)
			}
		}()
		poll.Until(t, tc.name+": Engage called for both", func() bool { return tc.a.calls.Load() >= 2 })
		if tc.name == "failing" {
			time.Sleep(1500 * time.Millisecond) // into its backoff
		}
		cancel()
		start := time.Now()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: EngageMembers did not return within 30 s of its context's end", tc.name)
		}
		took := time.Since(start)
		if n := tc.a.inFlight.Load(); n != 0 {
			t.Errorf("%s: EngageMembers returned with %d Engage calls in flight", tc.name, n)
		}
		calls := tc.a.calls.Load()
		time.Sleep(2 * time.Second)
		if later := tc.a.calls.Load(); later != calls {
			t.Errorf("%s: Engage called %d more times after EngageMembers returned", tc.name, later-calls)
		}
		t.Logf("%s: returned %s after cancel, %d calls", tc.name, took.Round(time.Millisecond), calls)
	}
}

// TestReviewEngageMembersLateAfterDisconnect: a subscriber that comes
// while a member is Disconnected is not handed it, and is once it is
// back; one that comes after is handed the member engaged now.
func TestEngageMembersLateAfterDisconnect(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Configure: fleettest.QuickHealth})
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	name := suite.Name("rv-late-disc")
	f.Register(t, name, kc)
	f.WaitEngaged(t, name)
	proxy.Down()
	f.WaitState(t, name, "Disconnected")
	s := newSubscriber()
	subscribe(t, f.Manager, s, nil)
	time.Sleep(500 * time.Millisecond)
	if live := s.live(); len(live) != 0 {
		t.Errorf("a subscriber that came while the member was Disconnected is engaged with %v", live)
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	waitLive(t, s, name)
	late := newSubscriber()
	subscribe(t, f.Manager, late, nil)
	waitLive(t, late, name)
	cl, err := f.Manager.GetCluster(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if es := late.of(name); len(es) != 1 || es[0].cl != cl {
		t.Errorf("the late subscriber got %d engagements, want one with the member's current cluster", len(es))
	}
}
