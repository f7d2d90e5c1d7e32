package engage_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// aware records engagements and fails the first failures calls.
type aware struct {
	mu       sync.Mutex
	failures int
	calls    map[string]int
	engaged  chan string
	ended    chan string
}

func newAware(failures int) *aware {
	return &aware{failures: failures, calls: map[string]int{}, engaged: make(chan string, 10), ended: make(chan string, 10)}
}

func (a *aware) Engage(ctx context.Context, name string, _ cluster.Cluster) error {
	a.mu.Lock()
	a.calls[name]++
	fail := a.calls[name] <= a.failures
	a.mu.Unlock()
	if fail {
		return errors.New("not yet")
	}
	a.engaged <- name
	context.AfterFunc(ctx, func() { a.ended <- name })
	return nil
}

func (a *aware) callsFor(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[name]
}

func receive(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return ""
	}
}

// serve runs Serve in the background; the returned stop cancels it and
// waits for it to return.
func serve(e *engage.Engager, name string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Serve(ctx, name, nil)
	}()
	return func() { cancel(); <-done }
}

func TestEngagerHandsEveryClusterToEveryAware(t *testing.T) {
	e := engage.NewEngager(engage.Options{})
	early := newAware(0)
	e.Add(early)
	stopA := serve(e, "a")
	stopB := serve(e, "b")
	got := []string{receive(t, early.engaged), receive(t, early.engaged)}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("early aware engaged %v, want [a b]", got)
	}

	late := newAware(0)
	e.Add(late)
	got = []string{receive(t, late.engaged), receive(t, late.engaged)}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("late aware engaged %v, want [a b]", got)
	}
	if names := e.Clusters(); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("Clusters() = %v, want [a b]", names)
	}

	stopA()
	// Serve returned, so both awares have seen a's context end.
	ended := []string{receive(t, early.ended), receive(t, late.ended)}
	if ended[0] != "a" || ended[1] != "a" {
		t.Fatalf("ended %v, want a for both awares", ended)
	}
	if names := e.Clusters(); !slices.Equal(names, []string{"b"}) {
		t.Fatalf("Clusters() after a left = %v, want [b]", names)
	}
	stopB()
}

func TestEngagerRetriesWithBackoff(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	e := engage.NewEngager(engage.Options{
		Clock:        clock,
		RetryBackoff: &wait.Backoff{Duration: time.Second, Factor: 2, Steps: 10, Cap: time.Minute},
	})
	flaky := newAware(2)
	e.Add(flaky)
	stop := serve(e, "flaky")
	defer stop()

	// First call fails; the retry waits one second, the next two.
	poll.Until(t, "engagement", func() bool { return flaky.callsFor("flaky") == 1 && clock.HasWaiters() })
	if got := e.Engagements("flaky"); len(got) != 1 || got[0].Engaged || got[0].Err == nil {
		t.Fatalf("after a failed attempt Engagements = %+v, want one, not engaged, with its error", got)
	}
	clock.Step(999 * time.Millisecond)
	if flaky.callsFor("flaky") != 1 {
		t.Fatal("retried before the backoff elapsed")
	}
	clock.Step(time.Millisecond)
	poll.Until(t, "engagement", func() bool { return flaky.callsFor("flaky") == 2 && clock.HasWaiters() })
	clock.Step(2 * time.Second)
	if got := receive(t, flaky.engaged); got != "flaky" {
		t.Fatalf("engaged %q, want flaky", got)
	}
	if n := flaky.callsFor("flaky"); n != 3 {
		t.Fatalf("Engage called %d times, want 3", n)
	}
	poll.Until(t, "engagement", func() bool {
		got := e.Engagements("flaky")
		return len(got) == 1 && got[0].Engaged && got[0].Err == nil
	})
}

func TestEngagerStopsRetryingWhenClusterLeaves(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	e := engage.NewEngager(engage.Options{Clock: clock})
	never := newAware(1 << 30)
	e.Add(never)
	stop := serve(e, "doomed")
	poll.Until(t, "engagement", func() bool { return clock.HasWaiters() })
	stop() // returns only once the retry loop has ended
	if n := never.callsFor("doomed"); n != 1 {
		t.Fatalf("Engage called %d times, want 1", n)
	}
}

// selective is an aware that accepts the clusters in its set and records
// disengagements.
type selective struct {
	*aware
	mu         sync.Mutex
	accepted   map[string]bool
	disengaged chan string
}

func (s *selective) Accepts(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[name]
}

func (s *selective) accept(name string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted[name] = ok
}

func (s *selective) Disengage(name string) { s.disengaged <- name }

func TestRecheckEngagesAndDisengagesAsAcceptanceChanges(t *testing.T) {
	e := engage.NewEngager(engage.Options{})
	s := &selective{aware: newAware(0), accepted: map[string]bool{}, disengaged: make(chan string, 10)}
	e.Add(s)
	stop := serve(e, "a")
	e.Recheck("a")
	select {
	case name := <-s.engaged:
		t.Fatalf("engaged %s, which it does not accept", name)
	case <-time.After(50 * time.Millisecond):
	}
	if got := e.Engagements("a"); len(got) != 0 {
		t.Fatalf("Engagements of a cluster no aware accepts = %+v, want none", got)
	}

	s.accept("a", true)
	e.Recheck("a")
	if got := receive(t, s.engaged); got != "a" {
		t.Fatalf("engaged %q, want a", got)
	}
	e.Recheck("a") // nothing changed: no second engagement
	s.accept("a", false)
	e.Recheck("a")
	if got := receive(t, s.ended); got != "a" {
		t.Fatalf("ended %q, want a", got)
	}
	if got := receive(t, s.disengaged); got != "a" {
		t.Fatalf("disengaged %q, want a", got)
	}
	s.accept("a", true)
	e.Recheck("a")
	if got := receive(t, s.engaged); got != "a" {
		t.Fatalf("engaged again %q, want a", got)
	}
	if n := s.callsFor("a"); n != 2 {
		t.Fatalf("Engage called %d times, want 2", n)
	}
	stop()
	if got := receive(t, s.disengaged); got != "a" {
		t.Fatalf("disengaged %q after the cluster left, want a", got)
	}
}

func TestRemoveEndsEveryEngagementOfTheAware(t *testing.T) {
	e := engage.NewEngager(engage.Options{})
	removed := &selective{aware: newAware(0), accepted: map[string]bool{"a": true, "b": true, "c": true}, disengaged: make(chan string, 10)}
	kept := newAware(0)
	e.Add(removed)
	e.Add(kept)
	stopA, stopB := serve(e, "a"), serve(e, "b")
	defer stopA()
	defer stopB()
	for range 2 {
		receive(t, removed.engaged)
		receive(t, kept.engaged)
	}

	e.Remove(removed) // returns once a and b are disengaged from it
	got := []string{receive(t, removed.ended), receive(t, removed.ended)}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ended %v when the aware was removed, want [a b]", got)
	}
	got = []string{receive(t, removed.disengaged), receive(t, removed.disengaged)}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("disengaged %v when the aware was removed, want [a b]", got)
	}
	for _, name := range []string{"a", "b"} {
		if got := e.Engagements(name); len(got) != 1 || got[0].Aware != "aware" {
			t.Fatalf("Engagements(%s) = %+v, want only the kept aware's", name, got)
		}
	}

	stopC := serve(e, "c")
	defer stopC()
	if got := receive(t, kept.engaged); got != "c" {
		t.Fatalf("kept aware engaged %q, want c", got)
	}
	e.Recheck("c")
	if n := removed.callsFor("c"); n != 0 {
		t.Fatalf("a removed aware was handed a cluster that came after: %d calls", n)
	}
	select {
	case name := <-kept.ended:
		t.Fatalf("removing one aware ended the other's engagement with %s", name)
	default:
	}
}
