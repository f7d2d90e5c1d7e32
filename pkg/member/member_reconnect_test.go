package member

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// timerClock is a fake clock that tells the test each timer made, once it
// is made: the prober's, of a probe interval, and run's, of the reconnect
// backoff, which the test tells apart by their durations.
type timerClock struct {
	*clocktesting.FakeClock
	made chan time.Duration
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.made <- d
	return t
}

func (c *timerClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.FakeClock.AfterFunc(d, f)
	c.made <- d
	return t
}

func TestMemberReconnectsOnlyAfterAProbeSuccessSinceTheDisconnection(t *testing.T) {
	const (
		interval = 3 * time.Second
		// backoff is longer than interval, so that a probe succeeds during
		// the backoff wait.
		backoff = 5 * time.Second
		// quiet is how many probes fail after a disconnection before one
		// succeeds: long enough for any reconnection scheduled meanwhile to
		// happen.
		quiet = 6
	)
	baseline := goleak.IgnoreCurrent()
	clk := &timerClock{FakeClock: clocktesting.NewFakeClock(time.Now()), made: make(chan time.Duration, 100)}
	// The member's cluster starts nothing that reaches its server.
	m, probes, engaged, probed := scriptedMember(t, clk, interval, backoff)

	// expectTimers waits for the prober's next timer, run's backoff timer
	// if backoffs is 1, and the member's connection if engagements is 1,
	// in any order.
	expectTimers := func(backoffs, engagements int) {
		t.Helper()
		for probers := 1; probers > 0 || backoffs > 0 || engagements > 0; {
			select {
			case d := <-clk.made:
				switch {
				case d == backoff && backoffs > 0:
					backoffs--
				case d == backoff:
					t.Fatal("a reconnection was scheduled without a probe success since the disconnection")
				case probers > 0:
					probers--
				default:
					t.Fatalf("unexpected timer of %s", d)
				}
			case <-engaged:
				if engagements == 0 {
					t.Fatal("the member was connected without a probe success since the disconnection")
				}
				engagements--
			case <-time.After(10 * time.Second):
				t.Fatalf("no timer within 10s; still waiting for %d of the prober, %d of run and %d connections", probers, backoffs, engagements)
			}
		}
	}
	// probeThen lets the prober's interval pass and its probe return err,
	// waits for what expectTimers(backoffs, engagements) does, and returns
	// the state reported.
	probeThen := func(err error, backoffs, engagements int) fleetv1alpha1.MemberState {
		t.Helper()
		probes.fail(err)
		clk.Step(interval)
		s := <-probed
		expectTimers(backoffs, engagements)
		return s
	}
	probe := func(err error, backoffs int) fleetv1alpha1.MemberState {
		t.Helper()
		return probeThen(err, backoffs, 0)
	}
	waitEngaged := func() {
		t.Helper()
		select {
		case <-engaged:
		case <-time.After(10 * time.Second):
			t.Fatal("the member was not connected within 10s")
		}
	}
	boom := errors.New("connection refused")
	// disconnect fails probes until the member is torn down, then a few
	// more.
	disconnect := func() {
		t.Helper()
		for range 3 {
			probe(boom, 0)
		}
		deadline := time.Now().Add(10 * time.Second)
		for m.conn.Load() != nil || m.State() != fleetv1alpha1.MemberStateDisconnected {
			if time.Now().After(deadline) {
				t.Fatalf("not torn down within 10s: %s", m.State())
			}
			time.Sleep(time.Millisecond)
		}
		// The teardown's end asks for a probe at once.
		select {
		case d := <-clk.made:
			if d > wakeGap {
				t.Fatalf("the probe after the teardown is due in %s, want %s at most", d, wakeGap)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no probe asked for at the teardown's end within 10s")
		}
		clk.Step(wakeGap)
		<-probed
		expectTimers(0, 0)
		for range quiet {
			probe(boom, 0)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	m.start(ctx)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			m.stop()
		}
	}
	t.Cleanup(stop)
	waitEngaged()
	<-probed // the first probe runs at once, maybe before the connection
	expectTimers(0, 0)
	if s := probe(nil, 0); s != fleetv1alpha1.MemberStateReady {
		t.Fatalf("connected, probed: %s, want Ready", s)
	}

	disconnect()
	// A probe succeeds: the member, whose connection had worked, is
	// connected again at once.
	if s := probeThen(nil, 0, 1); s != fleetv1alpha1.MemberStateConnecting {
		t.Fatalf("disconnected, probed: %s, want Connecting", s)
	}

	// That connection never works: every probe fails. After it, a probe
	// that succeeds schedules a reconnection after backoff, and another
	// succeeds during the backoff wait.
	disconnect()
	if s := probe(nil, 1); s != fleetv1alpha1.MemberStateConnecting {
		t.Fatalf("disconnected, probed: %s, want Connecting", s)
	}
	probe(nil, 0)
	clk.Step(backoff - interval)
	waitEngaged()
	if s := probe(nil, 0); s != fleetv1alpha1.MemberStateReady {
		t.Fatalf("reconnected, probed: %s, want Ready", s)
	}

	// The success during the backoff wait must not reconnect the member
	// after its next disconnection; the one after it does, at once.
	disconnect()
	if s := probeThen(nil, 0, 1); s != fleetv1alpha1.MemberStateConnecting {
		t.Fatalf("disconnected, probed: %s, want Connecting", s)
	}

	stop()
	var leaked error
	for range 100 {
		if leaked = goleak.Find(baseline); leaked == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(leaked)
}

// TestProbeUnderWayWhenConnectionsDropProvesNothing: a probe that started
// before the member's connections closed, and succeeded, must not clear
// their loss, or the member's return would not list again.
func TestProbeUnderWayWhenConnectionsDropProvesNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	pool, err := NewPool(Options{
		Registry: NewObservedRegistry(nil),
		Engage:   engageNothing,
		Logger:   logr.Discard(),
		Policy:   kubeconfigtest.Permissive,
		Clock:    clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, "https://127.0.0.1:1")
	m.state.Store(fleetv1alpha1.MemberStateReady)
	ctx, end := context.WithCancelCause(t.Context())
	defer end(nil)
	// Its one informer is in no call: it sleeps in backoff.
	informers := pool.initialSyncs.forMember(m.awaitFirstDial, m.away)
	informers.newInformer(&toolscache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	m.conn.Store(&connection{ctx: ctx, informers: informers, end: end, ready: make(chan struct{})})
	probeStart := clk.Now()
	clk.Step(time.Millisecond)
	m.connLostAt.Store(clk.Now().UnixNano()) // as a closing connection does

	m.report(registry.ProbeResult{Time: probeStart}, fleetv1alpha1.MemberStateReady)
	m.report(registry.ProbeResult{Time: clk.Now(), Err: errors.New("refused")}, fleetv1alpha1.MemberStateUnhealthy)
	m.report(registry.ProbeResult{Time: clk.Now()}, fleetv1alpha1.MemberStateReady)
	if context.Cause(ctx) != errRefreshed {
		t.Fatal("the member came back from Unhealthy without reconnecting: a probe under way when its connections dropped cleared their loss")
	}

	m.state.Store(fleetv1alpha1.MemberStateReady) // as its new connection makes it
	clk.Step(time.Millisecond)
	m.report(registry.ProbeResult{Time: clk.Now()}, fleetv1alpha1.MemberStateReady)
	if m.connLostAt.Load() != 0 {
		t.Error("a probe that started after the loss and succeeded while Ready did not clear it")
	}
}

// TestReconnectedMemberIsReadyAtOnce: a Disconnected member whose probe
// succeeded is connected again at once, and Ready as soon as its cluster
// starts, not at its next probe, up to an Interval later.
func TestReconnectedMemberIsReadyAtOnce(t *testing.T) {
	const interval = 3 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	m, probes, engaged, _ := scriptedMember(t, clk, interval, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	m.start(ctx)
	t.Cleanup(func() { cancel(); m.stop() })

	// until steps the clock by d until cond holds, within 10 s.
	until := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 10s: %s", what, m.State())
			}
			clk.Step(d)
			time.Sleep(10 * time.Millisecond)
		}
	}
	<-engaged
	until("Ready", interval, func() bool { return m.State() == fleetv1alpha1.MemberStateReady })
	probes.fail(errors.New("connection refused"))
	until("Disconnected", interval, func() bool { return m.State() == fleetv1alpha1.MemberStateDisconnected && m.conn.Load() == nil })
	probes.fail(nil)
	// The next probe succeeds, and the member, whose connection had
	// worked, is connected again at once.
	until("engaged again", interval, func() bool {
		select {
		case <-engaged:
			return true
		default:
			return false
		}
	})
	// From now on, time moves by a millisecond at a time: a tenth of a
	// second at most, far from the next probe.
	for i := 0; m.State() != fleetv1alpha1.MemberStateReady; i++ {
		if i == 100 {
			t.Fatalf("reconnected after a probe that succeeded, %s later: %s, want Ready", 100*time.Millisecond, m.State())
		}
		clk.Step(time.Millisecond)
		time.Sleep(10 * time.Millisecond)
	}
}

// scriptedMember returns a member of a new pool on clk, probed every
// interval by scripted probes, Disconnected at its third failure and
// connected again after backoff. Its cluster starts nothing that reaches
// its server. engaged receives each engagement, probed the state each
// probe led to.
func scriptedMember(t *testing.T, clk clock.WithTickerAndDelayedExecution, interval, backoff time.Duration) (m *member, probes *scriptedProbes, engaged chan struct{}, probed chan fleetv1alpha1.MemberState) {
	t.Helper()
	engaged = make(chan struct{}, 10)
	probed = make(chan fleetv1alpha1.MemberState, 1000)
	pool, err := NewPool(Options{
		Registry: NewObservedRegistry(func(_ string, s fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
			if probe != nil {
				probed <- s
			}
		}),
		Engage: func(ctx context.Context, _ string, _ cluster.Cluster) <-chan struct{} {
			engaged <- struct{}{}
			return ctx.Done()
		},
		Logger: logr.Discard(),
		Policy: kubeconfigtest.Permissive,
		Health: HealthOptions{
			Interval:         interval,
			RetryInterval:    interval,
			Timeout:          time.Hour, // a real-time context: never
			FailureThreshold: 2,
			DisconnectAfter:  2 * interval, // the third failure
		},
		ReconnectBackoff: &wait.Backoff{Duration: backoff},
		Clock:            clk,
		// Its server is closed: the member reads no cluster identity.
		AllowDuplicateClusters: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	m = newTestMember(t, pool, "https://127.0.0.1:1")
	probes = &scriptedProbes{}
	m.review, m.ping = probes.probe, nil
	return m, probes, engaged, probed
}

// TestMemberIsProbedAsSoonAsItsTeardownEnds: a member torn down is probed
// again as soon as its teardown is over, not at its next scheduled probe:
// a probe cut by the teardown (errClosing) is only excused and retried a
// RetryInterval later, which a server thawed as its member was torn down
// spent waiting (100 ms of 167 in a bench run).
func TestMemberIsProbedAsSoonAsItsTeardownEnds(t *testing.T) {
	const interval = 3 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	m, probes, engaged, _ := scriptedMember(t, clk, interval, time.Second)
	var mu sync.Mutex
	var starts []time.Time
	review := m.review
	m.review = func(ctx context.Context) error {
		mu.Lock()
		starts = append(starts, clk.Now())
		mu.Unlock()
		return review(ctx)
	}
	ctx, cancel := context.WithCancel(t.Context())
	m.start(ctx)
	t.Cleanup(func() { cancel(); m.stop() })
	step := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 10s: %s", what, m.State())
			}
			clk.Step(d)
			time.Sleep(50 * time.Millisecond)
		}
	}
	<-engaged
	step("Ready", interval, func() bool { return m.State() == fleetv1alpha1.MemberStateReady })
	probes.fail(errors.New("connection refused"))
	step("Disconnected", interval, func() bool { return m.State() == fleetv1alpha1.MemberStateDisconnected && m.conn.Load() == nil })
	tornDown := clk.Now() // when the probe that disconnected it started, or later
	probedSince := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return starts[len(starts)-1].After(tornDown)
	}
	for i := 0; !probedSince(); i++ {
		if i == 100 {
			t.Fatalf("no probe within %s of the teardown's end, want one at once", 100*time.Millisecond)
		}
		clk.Step(time.Millisecond)
		time.Sleep(10 * time.Millisecond)
	}
}
