package member

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
)

// scriptedProbes drives a prober on a fake clock: each probe returns the
// error the test set, and every report is recorded.
type scriptedProbes struct {
	mu      sync.Mutex
	err     error
	hang    bool // probes wait for their timeout
	heard   bool // the member sends on its connections
	states  []fleetv1alpha1.MemberState
	results []registry.ProbeResult
	probed  chan struct{}
	// reviews counts the calls of probe.
	reviews int
}

func (s *scriptedProbes) probe(ctx context.Context) error {
	s.mu.Lock()
	s.reviews++
	hang, err := s.hang, s.err
	s.mu.Unlock()
	return answer(ctx, hang, err)
}

// answer returns err, or waits for ctx and returns its error if hang.
func answer(ctx context.Context, hang bool, err error) error {
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (s *scriptedProbes) heardSince(time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heard
}

// set changes what the member does: whether probes hang, and whether it
// sends anything.
func (s *scriptedProbes) set(hang, heard bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang, s.heard = hang, heard
}

func (s *scriptedProbes) report(r registry.ProbeResult, st fleetv1alpha1.MemberState) {
	s.mu.Lock()
	s.states = append(s.states, st)
	s.results = append(s.results, r)
	s.mu.Unlock()
	s.probed <- struct{}{}
}

func (s *scriptedProbes) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *scriptedProbes) last() fleetv1alpha1.MemberState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[len(s.states)-1]
}

// after advances clock by d, once the prober waits on it, and reports
// whether a probe came within wait.
func (s *scriptedProbes) after(clock *clocktesting.FakeClock, d, wait time.Duration) bool {
	for !clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clock.Step(d)
	select {
	case <-s.probed:
		return true
	case <-time.After(wait):
		return false
	}
}

// runProber runs a prober with opts on a fake clock until the test ends.
func runProber(t *testing.T, opts HealthOptions) (*scriptedProbes, *clocktesting.FakeClock) {
	t.Helper()
	probes, clock, _ := runWakeableProber(t, opts)
	return probes, clock
}

// runWakeableProber runs a prober with opts on a fake clock until the
// test ends, and returns it too, for the test to wake.
func runWakeableProber(t *testing.T, opts HealthOptions) (*scriptedProbes, *clocktesting.FakeClock, *prober) {
	t.Helper()
	return runPingingProber(t, opts, nil)
}

// runPingingProber is runWakeableProber with ping as the prober's PING.
func runPingingProber(t *testing.T, opts HealthOptions, ping probeFunc) (*scriptedProbes, *clocktesting.FakeClock, *prober) {
	t.Helper()
	probes := &scriptedProbes{probed: make(chan struct{})}
	clock, p := startProber(t, opts, probes, ping)
	return probes, clock, p
}

// startProber runs a prober of probes and ping with opts on a fake clock
// until the test ends.
func startProber(t *testing.T, opts HealthOptions, probes *scriptedProbes, ping probeFunc) (*clocktesting.FakeClock, *prober) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Now())
	p := &prober{
		clock:         clock,
		health:        &health{opts: opts, state: fleetv1alpha1.MemberStateConnecting},
		review:        probes.probe,
		ping:          ping,
		connected:     func() bool { return true },
		heardSince:    func(_, since time.Time) bool { return probes.heardSince(since) },
		establishedAt: func(time.Time) bool { return true },
		report:        probes.report,
	}
	ctx, cancel := context.WithCancel(t.Context())
	p.start(ctx)
	t.Cleanup(func() { cancel(); p.stop() })
	return clock, p
}

func TestProberTurnsUnhealthyThenDisconnected(t *testing.T) {
	opts := HealthOptions{Interval: 5 * time.Second, RetryInterval: 5 * time.Second, Timeout: time.Second, FailureThreshold: 3, DisconnectAfter: 30 * time.Second}
	probes, clock := runProber(t, opts)

	tick := func() fleetv1alpha1.MemberState {
		t.Helper()
		for !clock.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clock.Step(opts.Interval)
		<-probes.probed
		return probes.last()
	}

	<-probes.probed // the first probe runs at once
	if got := probes.last(); got != fleetv1alpha1.MemberStateReady {
		t.Fatalf("after a good probe: %s, want Ready", got)
	}
	probes.fail(errors.New("connection refused"))
	for i := 1; i < opts.FailureThreshold; i++ {
		if got := tick(); got != fleetv1alpha1.MemberStateReady {
			t.Fatalf("after %d failed probes: %s, want Ready until %d", i, got, opts.FailureThreshold)
		}
	}
	if got := tick(); got != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("after %d failed probes: %s, want Unhealthy", opts.FailureThreshold, got)
	}
	// The first failure was at 5s; Disconnected once failing for 30s.
	failures := opts.FailureThreshold
	for ; time.Duration(failures)*opts.Interval < opts.DisconnectAfter; failures++ {
		if got := tick(); got != fleetv1alpha1.MemberStateUnhealthy {
			t.Fatalf("after %d failed probes: %s, want Unhealthy", failures+1, got)
		}
	}
	if got := tick(); got != fleetv1alpha1.MemberStateDisconnected {
		t.Fatalf("after failing for %s: %s, want Disconnected", opts.DisconnectAfter, got)
	}
	probes.fail(nil)
	if got := tick(); got != fleetv1alpha1.MemberStateReady {
		t.Fatalf("after a good probe: %s, want Ready", got)
	}
}

func TestProberRetriesSoonAfterAFailure(t *testing.T) {
	opts := HealthOptions{Interval: 5 * time.Second, RetryInterval: 500 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, DisconnectAfter: time.Minute}
	probes, clock := runProber(t, opts)

	// step advances the clock by d and returns the state of the probe it
	// caused, failing if none comes.
	step := func(d time.Duration) fleetv1alpha1.MemberState {
		t.Helper()
		if !probes.after(clock, d, 10*time.Second) {
			t.Fatalf("no probe %s later", d)
		}
		return probes.last()
	}

	<-probes.probed
	probes.fail(errors.New("connection refused"))
	if got := step(opts.Interval); got != fleetv1alpha1.MemberStateReady {
		t.Fatalf("after one failed probe: %s, want Ready", got)
	}
	if got := step(opts.RetryInterval); got != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("a retry interval after the first failure: %s, want Unhealthy", got)
	}
	probes.fail(nil)
	if got := step(opts.RetryInterval); got != fleetv1alpha1.MemberStateReady {
		t.Fatalf("a retry interval after a failure, back: %s, want Ready", got)
	}
	for !clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clock.Step(opts.RetryInterval)
	select {
	case <-probes.probed:
		t.Fatal("probed a retry interval after a success; want the full interval")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestHealthRecord(t *testing.T) {
	opts := HealthOptions{FailureThreshold: 2, DisconnectAfter: time.Minute}
	now := time.Now()
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		start     fleetv1alpha1.MemberState
		steps     []error
		connected bool
		want      fleetv1alpha1.MemberState
	}{
		"success while connected is Ready":         {fleetv1alpha1.MemberStateConnecting, []error{nil}, true, fleetv1alpha1.MemberStateReady},
		"success while disconnected is Connecting": {fleetv1alpha1.MemberStateDisconnected, []error{nil}, false, fleetv1alpha1.MemberStateConnecting},
		"one failure keeps Ready":                  {fleetv1alpha1.MemberStateReady, []error{boom}, true, fleetv1alpha1.MemberStateReady},
		"threshold failures are Unhealthy":         {fleetv1alpha1.MemberStateReady, []error{boom, boom}, true, fleetv1alpha1.MemberStateUnhealthy},
		"a success in between resets the count":    {fleetv1alpha1.MemberStateReady, []error{boom, nil, boom}, true, fleetv1alpha1.MemberStateReady},
		"Disconnected stays until a success":       {fleetv1alpha1.MemberStateDisconnected, []error{boom, boom, boom}, false, fleetv1alpha1.MemberStateDisconnected},
	} {
		t.Run(name, func(t *testing.T) {
			h := &health{opts: opts, state: tc.start}
			var got fleetv1alpha1.MemberState
			for i, err := range tc.steps {
				got = h.record(now.Add(time.Duration(i)*time.Second), err, tc.connected, false)
			}
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestUnansweredMemberIsProbedAsSoonAsItAnswers: an Unhealthy member whose
// probes went unanswered is probed a wakeGap after a wake, not a retry
// interval; one whose API server answered with an error is not.
func TestUnansweredMemberIsProbedAsSoonAsItAnswers(t *testing.T) {
	opts := HealthOptions{Interval: time.Minute, RetryInterval: time.Minute, Timeout: time.Second, FailureThreshold: 1, DisconnectAfter: time.Hour}
	probes, clock, p := runWakeableProber(t, opts)
	stepUntilProbe := func(d time.Duration) bool { return probes.after(clock, d, 100*time.Millisecond) }

	<-probes.probed
	probes.fail(context.DeadlineExceeded)
	if !stepUntilProbe(opts.Interval) || probes.last() != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("after an unanswered probe: %s, want Unhealthy", probes.last())
	}
	probes.fail(nil)
	p.wake()
	if !stepUntilProbe(wakeGap) || probes.last() != fleetv1alpha1.MemberStateReady {
		t.Fatalf("a wake after an unanswered probe did not probe within %s", wakeGap)
	}

	probes.fail(apierrors.NewServiceUnavailable("etcd is down"))
	if !stepUntilProbe(opts.Interval) || probes.last() != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("after a probe answered with 503: %s, want Unhealthy", probes.last())
	}
	p.wake()
	if stepUntilProbe(wakeGap) {
		t.Fatal("a wake after an answered probe probed at once: a member that answers errors would be probed in a loop")
	}
}

// TestTimedOutProbe: a probe that times out while the member keeps
// sending is a success, the member is merely busy; one that times out in
// silence makes the member Unhealthy at once, whatever the threshold.
func TestTimedOutProbe(t *testing.T) {
	opts := HealthOptions{Interval: time.Minute, RetryInterval: time.Minute, Timeout: 20 * time.Millisecond, FailureThreshold: 3, DisconnectAfter: time.Hour}
	probes, clock := runProber(t, opts)
	<-probes.probed

	probes.set(true, true)
	if !probes.after(clock, opts.Interval, 5*time.Second) {
		t.Fatal("no probe")
	}
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateReady || !r.Busy || r.Err != nil {
		t.Fatalf("a timed-out probe of a member that kept sending: %s, busy %t, error %v; want Ready, busy, no error", probes.last(), r.Busy, r.Err)
	}

	probes.set(true, false)
	if !probes.after(clock, opts.Interval, 5*time.Second) {
		t.Fatal("no probe")
	}
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateUnhealthy || r.Busy || r.Err == nil {
		t.Fatalf("a probe that timed out in silence: %s, busy %t, error %v; want Unhealthy at the first, with its error", probes.last(), r.Busy, r.Err)
	}
}

// TestTimedOutProbeWithoutEstablishedConnection: a probe that times out
// in silence while the member has no established connection, only new
// ones whose handshakes may be slow, is a failure like any other.
func TestTimedOutProbeWithoutEstablishedConnection(t *testing.T) {
	opts := HealthOptions{Interval: time.Minute, RetryInterval: time.Minute, Timeout: 20 * time.Millisecond, FailureThreshold: 3, DisconnectAfter: time.Hour}
	probes, clock, p := runWakeableProber(t, opts)
	<-probes.probed
	p.mu.Lock()
	p.establishedAt = func(time.Time) bool { return false }
	p.mu.Unlock()

	probes.set(true, false)
	if !probes.after(clock, opts.Interval, 5*time.Second) {
		t.Fatal("no probe")
	}
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateReady || r.Err == nil {
		t.Fatalf("a probe that timed out in silence without an established connection: %s, error %v; want Ready until the threshold, with its error", probes.last(), r.Err)
	}
}

// scriptedPings is a prober's PING, which counts its calls and returns
// the error the test set.
type scriptedPings struct {
	mu    sync.Mutex
	calls int
	err   error
	hang  bool
}

func (s *scriptedPings) ping(ctx context.Context) error {
	s.mu.Lock()
	s.calls++
	hang, err := s.hang, s.err
	s.mu.Unlock()
	return answer(ctx, hang, err)
}

func (s *scriptedPings) set(hang bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang, s.err = hang, err
}

func (s *scriptedPings) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestProberPingsBetweenReviews: a Ready member is reviewed every
// ReviewInterval and PINGed at the probes in between; a PING that fails
// at once is followed by a review in the same probe, one that times out
// in silence makes the member Unhealthy, and a member that is not Ready
// is reviewed.
func TestProberPingsBetweenReviews(t *testing.T) {
	opts := HealthOptions{Interval: time.Second, ReviewInterval: 3 * time.Second, RetryInterval: time.Second, Timeout: 20 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
	pings := &scriptedPings{}
	probes, clock, _ := runPingingProber(t, opts, pings.ping)
	reviews := func() int {
		probes.mu.Lock()
		defer probes.mu.Unlock()
		return probes.reviews
	}
	// probe advances the clock to the next probe, and checks whether it
	// PINGed and whether it reviewed.
	probe := func(wantPing, wantReview bool) {
		t.Helper()
		pinged, reviewed := pings.count(), reviews()
		if !probes.after(clock, opts.Interval, 5*time.Second) {
			t.Fatal("no probe")
		}
		if got := [2]bool{pings.count() > pinged, reviews() > reviewed}; got != [2]bool{wantPing, wantReview} {
			t.Fatalf("probe %d: pinged, reviewed = %v, want %v", len(probes.results), got, [2]bool{wantPing, wantReview})
		}
	}

	<-probes.probed
	if pings.count() != 0 || reviews() != 1 {
		t.Fatal("a Connecting member was PINGed; want a review")
	}
	probe(true, false) // 1 s after the review
	probe(true, false) // 2 s
	probe(false, true) // 3 s: a review is due
	probe(true, false)
	if probes.last() != fleetv1alpha1.MemberStateReady {
		t.Fatalf("after PINGs: %s, want Ready", probes.last())
	}

	pings.set(false, errors.New("connection lost"))
	probe(true, true)
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateReady || r.Err != nil {
		t.Fatalf("a PING that failed at once, then a review that succeeded: %s, error %v; want Ready, no error", probes.last(), r.Err)
	}

	pings.set(true, nil)
	probe(true, false)
	if probes.last() != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("a PING that timed out in silence: %s, want Unhealthy", probes.last())
	}
	pings.set(false, nil)
	probe(false, true)
	if probes.last() != fleetv1alpha1.MemberStateReady {
		t.Fatalf("an Unhealthy member reviewed: %s, want Ready", probes.last())
	}
}

// TestProbesFallOnAGrid: the scheduled probes of members started at
// different times fall on the same instants, up to a sixteenth of the
// interval early and never late.
func TestProbesFallOnAGrid(t *testing.T) {
	opts := HealthOptions{Interval: 4 * time.Second}
	grid := opts.Interval / 16
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	due := map[time.Time]bool{}
	for i := range 100 {
		clock.Step(37 * time.Millisecond)
		p := &prober{clock: clock, health: &health{opts: opts}}
		d := p.onGrid(opts.Interval)
		if d > opts.Interval || d <= opts.Interval-grid {
			t.Fatalf("member %d: next probe in %s, want within (%s, %s]", i, d, opts.Interval-grid, opts.Interval)
		}
		due[clock.Now().Add(d)] = true
	}
	// 100 members started over 3.7 s fall on 3.7 s / 250 ms instants.
	if len(due) > 16 {
		t.Fatalf("the probes of 100 members fall on %d instants, want at most 16", len(due))
	}
}

// TestTimedOutProbeOfConnectingMember: a member still connecting whose
// probe times out in silence stays Connecting until the threshold: its
// server may be busy with its first lists.
func TestTimedOutProbeOfConnectingMember(t *testing.T) {
	opts := HealthOptions{Interval: time.Minute, RetryInterval: time.Minute, Timeout: 20 * time.Millisecond, FailureThreshold: 3, DisconnectAfter: time.Hour}
	probes := &scriptedProbes{probed: make(chan struct{}), hang: true}
	startProber(t, opts, probes, nil)
	<-probes.probed
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateConnecting || r.Err == nil {
		t.Fatalf("a connecting member's probe that timed out in silence: %s, error %v; want Connecting until the threshold, with its error", probes.last(), r.Err)
	}
}

// heardAt is a member's heardSince for a prober on a fake clock: the
// member last sent something at the time set, on a connection it has had
// all along.
type heardAt struct {
	mu sync.Mutex
	at time.Time // zero: never
}

func (h *heardAt) set(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at = t
}

func (h *heardAt) heardSince(_, since time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.at.IsZero() && !h.at.Before(since)
}

// TestConnectingMemberSendingItsListsIsNotUnhealthy: the probes of a
// member whose cluster is starting, and whose server sent something
// within an Interval (its first lists), may time out without counting
// against it; once it has sent nothing for an Interval they count, and a
// member that never sent anything gets no grace.
func TestConnectingMemberSendingItsListsIsNotUnhealthy(t *testing.T) {
	opts := HealthOptions{Interval: 4 * time.Second, RetryInterval: 100 * time.Millisecond, Timeout: 20 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
	probes := &scriptedProbes{probed: make(chan struct{}), hang: true}
	heard := &heardAt{}
	clock, p := startProber(t, opts, probes, nil)
	p.mu.Lock()
	p.heardSince = heard.heardSince
	p.mu.Unlock()
	<-probes.probed // at once, heard nothing yet: a failure, the first

	// The member answers its lists: its timed-out probes are excused.
	for i := range 5 {
		heard.set(clock.Now())
		if !probes.after(clock, opts.Interval, 5*time.Second) {
			t.Fatal("no probe")
		}
		if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateConnecting || !r.Excused || r.Err == nil {
			t.Fatalf("probe %d of a connecting member that sent its lists an interval ago: %s, excused %t, error %v; want Connecting, excused, with its error", i+2, probes.last(), r.Excused, r.Err)
		}
	}
	// It stops sending: after an Interval of silence, timeouts count.
	if !probes.after(clock, opts.Interval+time.Millisecond, 5*time.Second) {
		t.Fatal("no probe")
	}
	if r := probes.results[len(probes.results)-1]; r.Excused {
		t.Fatal("a probe of a member silent for an interval was excused")
	}
	for probes.last() != fleetv1alpha1.MemberStateUnhealthy {
		if len(probes.results) > 20 {
			t.Fatalf("a connecting member silent for an interval is %s after %d probes, want Unhealthy", probes.last(), len(probes.results))
		}
		if !probes.after(clock, opts.Interval, 5*time.Second) {
			t.Fatal("no probe")
		}
	}
}

// TestHungConnectingMemberIsUnhealthy: a member that never sent anything
// gets no grace while connecting: FailureThreshold timeouts make it
// Unhealthy.
func TestHungConnectingMemberIsUnhealthy(t *testing.T) {
	opts := HealthOptions{Interval: 4 * time.Second, RetryInterval: 100 * time.Millisecond, Timeout: 20 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
	probes := &scriptedProbes{probed: make(chan struct{}), hang: true}
	clock, p := startProber(t, opts, probes, nil)
	p.mu.Lock()
	p.heardSince = (&heardAt{}).heardSince
	p.mu.Unlock()
	<-probes.probed
	if !probes.after(clock, opts.RetryInterval, 5*time.Second) {
		t.Fatal("no retry")
	}
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateUnhealthy || r.Excused {
		t.Fatalf("a member that never answered, after %d timed-out probes: %s, excused %t; want Unhealthy", len(probes.results), probes.last(), r.Excused)
	}
}

// TestProbeNoticedLateProvesNothing: a probe whose timeout this process
// noticed well after it was due (it was starved of CPU) is retried
// without counting, FailureThreshold times in a row at most; then it
// counts, so that a frozen member is found on a process that stays
// starved.
func TestProbeNoticedLateProvesNothing(t *testing.T) {
	opts := HealthOptions{Interval: 4 * time.Second, RetryInterval: 100 * time.Millisecond, Timeout: 20 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
	probes := &scriptedProbes{probed: make(chan struct{})}
	var clock *clocktesting.FakeClock
	var starved bool
	var mu sync.Mutex
	review := func(ctx context.Context) error {
		err := probes.probe(ctx)
		mu.Lock()
		defer mu.Unlock()
		if starved && err != nil {
			clock.Step(2 * opts.Timeout) // noticed a timeout late
		}
		return err
	}
	clock = clocktesting.NewFakeClock(time.Now())
	p := &prober{
		clock:         clock,
		health:        &health{opts: opts, state: fleetv1alpha1.MemberStateConnecting},
		review:        review,
		connected:     func() bool { return true },
		heardSince:    func(_, _ time.Time) bool { return false },
		establishedAt: func(time.Time) bool { return true },
		report:        probes.report,
	}
	ctx, cancel := context.WithCancel(t.Context())
	p.start(ctx)
	t.Cleanup(func() { cancel(); p.stop() })
	<-probes.probed
	if probes.last() != fleetv1alpha1.MemberStateReady {
		t.Fatalf("first probe: %s, want Ready", probes.last())
	}

	mu.Lock()
	starved = true
	mu.Unlock()
	probes.set(true, false)
	if !probes.after(clock, opts.Interval, 5*time.Second) {
		t.Fatal("no probe")
	}
	for i := range opts.FailureThreshold {
		if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateReady || !r.Excused || r.ConsecutiveFailures != 0 {
			t.Fatalf("late timeout %d: %s, excused %t, %d failures; want Ready, excused, none", i+1, probes.last(), r.Excused, r.ConsecutiveFailures)
		}
		if !probes.after(clock, opts.RetryInterval, 5*time.Second) {
			t.Fatalf("late timeout %d was not retried after %s", i+1, opts.RetryInterval)
		}
	}
	if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateUnhealthy || r.Excused {
		t.Fatalf("late timeout %d in a row: %s, excused %t; want Unhealthy", opts.FailureThreshold+1, probes.last(), r.Excused)
	}
}

// TestJustStartedMemberIsNotUnhealthy: the timed-out probes of a member
// whose cluster started less than half of DisconnectAfter ago do not
// count, though it sent nothing yet: its first handshakes may wait behind
// those of a thousand members started with it. Then they count.
func TestJustStartedMemberIsNotUnhealthy(t *testing.T) {
	opts := HealthOptions{Interval: 4 * time.Second, RetryInterval: 100 * time.Millisecond, Timeout: 20 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Minute}
	probes := &scriptedProbes{probed: make(chan struct{}), hang: true}
	clock := clocktesting.NewFakeClock(time.Now())
	started := clock.Now()
	p := &prober{
		clock:         clock,
		health:        &health{opts: opts, state: fleetv1alpha1.MemberStateConnecting},
		review:        probes.probe,
		connected:     func() bool { return true },
		startedAt:     func() time.Time { return started },
		heardSince:    func(_, _ time.Time) bool { return false },
		establishedAt: func(time.Time) bool { return false },
		report:        probes.report,
	}
	ctx, cancel := context.WithCancel(t.Context())
	p.start(ctx)
	t.Cleanup(func() { cancel(); p.stop() })
	<-probes.probed
	for clock.Since(started) < opts.startGrace() {
		if r := probes.results[len(probes.results)-1]; probes.last() != fleetv1alpha1.MemberStateConnecting || !r.Excused {
			t.Fatalf("%s after its start: %s, excused %t; want Connecting, excused", clock.Since(started), probes.last(), r.Excused)
		}
		if !probes.after(clock, opts.Interval, 5*time.Second) {
			t.Fatal("no probe")
		}
	}
	for probes.last() != fleetv1alpha1.MemberStateUnhealthy {
		if clock.Since(started) > opts.DisconnectAfter {
			t.Fatalf("a member that never answered is %s %s after its start, want Unhealthy", probes.last(), clock.Since(started))
		}
		if !probes.after(clock, opts.RetryInterval, 5*time.Second) {
			t.Fatal("no probe")
		}
	}
}

// TestDisconnectedMemberProbeWaitsAnInterval: a Disconnected member's
// probe waits up to an Interval for its answer, so that one is always
// waiting for a frozen server to resume; other probes wait a Timeout.
func TestDisconnectedMemberProbeWaitsAnInterval(t *testing.T) {
	opts := DefaultHealthOptions()
	for _, tc := range []struct {
		state fleetv1alpha1.MemberState
		want  time.Duration
	}{
		{fleetv1alpha1.MemberStateReady, opts.Timeout},
		{fleetv1alpha1.MemberStateUnhealthy, opts.Timeout},
		{fleetv1alpha1.MemberStateDisconnected, opts.Interval},
	} {
		var waited time.Duration
		clk := clocktesting.NewFakeClock(time.Now())
		p := &prober{
			clock:  clk,
			health: &health{opts: opts, state: tc.state},
			review: func(ctx context.Context) error {
				deadline, _ := ctx.Deadline()
				waited = time.Until(deadline)
				return errors.New("refused")
			},
			connected:     func() bool { return false },
			heardSince:    func(time.Time, time.Time) bool { return false },
			establishedAt: func(time.Time) bool { return false },
		}
		if _, _, _, ok := p.probeOnce(t.Context(), clk.Now()); !ok {
			t.Fatal("probeOnce: not ok")
		}
		if waited > tc.want || waited < tc.want-time.Second/2 {
			t.Errorf("%s member: the probe waits %s, want %s", tc.state, waited, tc.want)
		}
	}
}

// TestProbeRefusedByTeardownIsExcused: a probe that failed because the
// member's own connection was being torn down proves nothing of the
// member: it is excused, counts no failure, and is retried soon.
func TestProbeRefusedByTeardownIsExcused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	p := &prober{
		clock:         clk,
		health:        &health{opts: DefaultHealthOptions(), state: fleetv1alpha1.MemberStateDisconnected, failures: 3},
		review:        func(context.Context) error { return fmt.Errorf("dial: %w", errClosing) },
		connected:     func() bool { return false },
		heardSince:    func(time.Time, time.Time) bool { return false },
		establishedAt: func(time.Time) bool { return false },
	}
	result, state, retry, ok := p.probeOnce(t.Context(), clk.Now())
	if !ok || !result.Excused || !retry || state != fleetv1alpha1.MemberStateDisconnected || p.health.failures != 3 {
		t.Errorf("probe refused by the teardown: excused %t, retry %t, state %s, failures %d; want excused, retried soon, Disconnected, 3",
			result.Excused, retry, state, p.health.failures)
	}
}
