package member

import (
	"context"
	"errors"
	"sync"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// HealthOptions set how members are probed. A probe is a
// SelfSubjectReview, or, for a Ready member reviewed less than
// ReviewInterval ago, an HTTP/2 PING on the connection its requests use.
// With the defaults a frozen member (connections accepted, never
// answered) is Unhealthy within 4.8 seconds, a dead one (connections
// refused) within 4.1. A busy member is never Unhealthy for being slow: a
// probe that timed out while the member sent anything on any connection
// it had when the probe started (a watch event, a list, a PING's answer)
// counts as a success; a connecting member does not count a timed-out
// probe against it while its cluster started less than startGrace ago,
// or while it sent anything within an Interval, its first lists under
// way (a member that answers nothing is Unhealthy 30 seconds after it
// started, with the defaults); and
// a timeout this process noticed late, starved of CPU, proves nothing of
// the member (see probeOnce). A member's return is
// noticed as soon as it sends anything: that asks for a probe at once.
type HealthOptions struct {
	// Interval between probes. A member's probes are brought forward by
	// up to a sixteenth of it, onto a grid all members share, so that the
	// process wakes once for many probes. Defaults to 4s.
	Interval time.Duration
	// ReviewInterval is the longest time between two SelfSubjectReviews
	// of a Ready member. Its probes in between are HTTP/2 PINGs, answered
	// by its API server's HTTP/2 layer: they prove the server and the
	// connection alive at a small part of a request's cost. A review also
	// proves the member accepts the credentials and serves requests. A
	// member without an HTTP/2 connection, or that is not Ready, is
	// reviewed at every probe. Defaults to 30s.
	ReviewInterval time.Duration
	// RetryInterval between probes after a failed one, so that a failure
	// is confirmed, and a return noticed, quickly. A Disconnected member
	// is probed every Interval instead, each probe waiting up to an
	// Interval for its answer, and the next following at once a probe
	// that timed out: one is always waiting on a frozen server, which
	// answers it as it resumes. Defaults to 100ms.
	RetryInterval time.Duration
	// Timeout of one probe. A probe of a Ready member that times out
	// while the member sent nothing, with a connection open for longer
	// than a timeout, makes it Unhealthy at once: the member is frozen, or
	// cut off. Other timeouts are failures like any other, but for those
	// excused above. Defaults to 800ms.
	Timeout time.Duration
	// FailureThreshold is the number of probes in a row that fail with an
	// error, such as a refused connection or an error status, that make a
	// member Unhealthy. Defaults to 2.
	FailureThreshold int
	// DisconnectAfter is how long probes must keep failing before the
	// member is Disconnected, its cluster torn down. Until then an
	// Unhealthy member keeps its cache, its informers' calls held, and
	// its watches resume where they were at its return. Defaults to 3m:
	// longer than the outages a control plane's restart or upgrade makes,
	// short enough that a member gone for good frees its cache within
	// minutes.
	DisconnectAfter time.Duration
}

// DefaultHealthOptions returns the health options a zero HealthOptions
// stands for.
func DefaultHealthOptions() HealthOptions {
	var o HealthOptions
	o.setDefaults()
	return o
}

func (o *HealthOptions) setDefaults() {
	if o.Interval <= 0 {
		o.Interval = 4 * time.Second
	}
	if o.ReviewInterval <= 0 {
		o.ReviewInterval = 30 * time.Second
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 800 * time.Millisecond
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 2
	}
	if o.DisconnectAfter <= 0 {
		o.DisconnectAfter = 3 * time.Minute
	}
}

// startGrace is how long a member whose cluster just started is not
// counted against for probes that time out: half of DisconnectAfter, at
// most 30 s.
func (o *HealthOptions) startGrace() time.Duration {
	return min(o.DisconnectAfter/2, 30*time.Second)
}

// health turns probe results into a member's state. Its prober's mu
// guards it.
type health struct {
	opts         HealthOptions
	state        fleetv1alpha1.MemberState
	failures     int
	failingSince time.Time
	// succeeded is whether the last probe counted succeeded.
	succeeded bool
	// starved counts the timed-out probes in a row excused because this
	// process noticed their timeouts late.
	starved int
}

// record takes one probe result at now and returns the new state.
// connected says whether the member's cluster is running; silent, that
// the probe timed out with nothing heard from the member.
func (h *health) record(now time.Time, err error, connected, silent bool) fleetv1alpha1.MemberState {
	h.succeeded = err == nil
	if err == nil {
		h.failures = 0
		if connected {
			h.state = fleetv1alpha1.MemberStateReady
		} else {
			h.state = fleetv1alpha1.MemberStateConnecting
		}
		return h.state
	}
	if h.failures == 0 {
		h.failingSince = now
	}
	h.failures++
	switch {
	case h.state == fleetv1alpha1.MemberStateDisconnected:
	case now.Sub(h.failingSince) >= h.opts.DisconnectAfter:
		h.state = fleetv1alpha1.MemberStateDisconnected
	case silent || h.failures >= h.opts.FailureThreshold:
		h.state = fleetv1alpha1.MemberStateUnhealthy
	}
	return h.state
}

// probeFunc makes one probe of a member.
type probeFunc func(ctx context.Context) error

// prober probes a member at once when started, then an interval (or
// retry interval) after the start of each probe, until stopped. It has no
// goroutine while it waits: each probe runs in a goroutine of its own,
// from a timer, so a fleet's members cost no goroutine for their probes
// between probes.
type prober struct {
	clock  clock.WithTickerAndDelayedExecution
	health *health
	// review is the SelfSubjectReview. ping, if not nil, PINGs the
	// member's HTTP/2 connection, and fails with errNoConnection at once
	// if it has none.
	review probeFunc
	ping   probeFunc
	// connected reports whether the member's cluster is running.
	connected func() bool
	// startedAt, if not nil, returns when the member's latest connection
	// began: when its cluster began to be built.
	startedAt func() time.Time
	// heardSince reports whether the member sent anything since since,
	// on a connection opened before openedBefore.
	heardSince func(openedBefore, since time.Time) bool
	// establishedAt reports whether the member had a connection at t
	// opened more than a probe timeout before, and still open.
	establishedAt func(t time.Time) bool
	// report is called after each probe with its result and the state.
	report func(result registry.ProbeResult, state fleetv1alpha1.MemberState)

	// running counts the probe under way: stop waits for it.
	running sync.WaitGroup

	// mu guards the rest, and health. heardSince, establishedAt and
	// connected are called with it held.
	mu  sync.Mutex
	ctx context.Context // set by start
	// timer is the next probe's, nil while a probe is under way.
	timer   clock.Timer
	stopped bool
	// lastStart is when the last probe started.
	lastStart time.Time
	// reviewedAt is when the last review that succeeded started. Only
	// the probe under way uses it.
	reviewedAt time.Time
	// wakeable is false after a probe the API server answered with an
	// error: its answers would then probe it in a loop.
	wakeable bool
	// woken is set by a wake during a probe, which is then followed by
	// another.
	woken bool
	// reviewDue makes the next probe a review, whatever PINGs would do.
	reviewDue bool
}

// wakeGap is the least time between the start of a probe and a probe a
// wake asks for, so that a member whose watches stream while its probes
// fail is not probed in a loop.
const wakeGap = 10 * time.Millisecond

// start probes at once, and goes on until stop or until ctx ends.
func (p *prober) start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx, p.wakeable = ctx, true
	p.scheduleLocked(0)
}

// stop stops probing and waits for a probe under way.
func (p *prober) stop() {
	p.mu.Lock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.running.Wait()
}

// wake asks for a probe now, not before wakeGap after the last one
// started: the member answered something, or has a new connection. A
// member whose API server answered the last probe with an error is not
// woken.
func (p *prober) wake() {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped || p.ctx == nil || !p.wakeable:
	case p.timer == nil:
		p.woken = true
	case p.timer.Stop():
		p.scheduleLocked(max(wakeGap-p.clock.Since(p.lastStart), 0))
	}
}

// reviewSoon asks for a review at once, even after a probe the API
// server answered with an error: new credentials are tested once, not in
// a loop.
func (p *prober) reviewSoon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reviewDue = true
	switch {
	case p.stopped || p.ctx == nil:
	case p.timer == nil:
		p.woken = true
	case p.timer.Stop():
		p.scheduleLocked(max(wakeGap-p.clock.Since(p.lastStart), 0))
	}
}

// scheduleLocked makes the next probe d from now.
func (p *prober) scheduleLocked(d time.Duration) {
	if d <= 0 {
		p.timer = nil // under way
		go p.fire()
		return
	}
	// A fake clock calls the function while it holds its lock.
	p.timer = p.clock.AfterFunc(d, func() { go p.fire() })
}

// fire makes a probe, reports it, and schedules the next.
func (p *prober) fire() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.timer, p.woken = nil, false
	p.lastStart = p.clock.Now()
	start, ctx := p.lastStart, p.ctx
	p.running.Add(1)
	p.mu.Unlock()
	defer p.running.Done()

	result, state, retry, ok := p.probeOnce(ctx, start)
	if !ok {
		return
	}
	p.report(result, state)
	next := p.health.opts.Interval
	if retry {
		next = p.health.opts.RetryInterval
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.wakeable = !answered(result.Err)
	if p.woken && (p.wakeable || p.reviewDue) {
		next = wakeGap
	}
	d := next - p.clock.Since(start)
	if next == p.health.opts.Interval {
		d = p.onGrid(d)
	}
	p.scheduleLocked(max(d, 0))
}

// onGrid returns d, shortened so that it ends on the grid of a sixteenth
// of Interval on the clock: the scheduled probes of a pool's members fall
// together, and the process wakes once for many of them rather than for
// each. A probe comes up to a sixteenth of Interval early, never late.
func (p *prober) onGrid(d time.Duration) time.Duration {
	now := p.clock.Now()
	return now.Add(d).Truncate(p.health.opts.Interval / 16).Sub(now)
}

// probeOnce probes, and returns the result and the state it leads to,
// and whether the next probe is a retry; ok is false if ctx ended. It
// PINGs a Ready member whose last probe succeeded and whose last review
// is less than ReviewInterval old, and reviews it otherwise, or when the
// PING fails before its timeout: the member has no connection to PING,
// or its connection broke.
func (p *prober) probeOnce(ctx context.Context, start time.Time) (result registry.ProbeResult, state fleetv1alpha1.MemberState, retry, ok bool) {
	opts := &p.health.opts
	p.mu.Lock()
	ready := p.health.state == fleetv1alpha1.MemberStateReady && p.health.failures == 0
	due := p.reviewDue
	p.reviewDue = false
	timeout := opts.Timeout
	if p.health.state == fleetv1alpha1.MemberStateDisconnected {
		// Its probes follow one another: one is always waiting, and a
		// frozen server that resumes answers it at once.
		timeout = opts.Interval
	}
	p.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	review := due || p.ping == nil || !ready || !p.connected() || start.Sub(p.reviewedAt) >= opts.ReviewInterval
	var err error
	if !review {
		if err = p.ping(pctx); err != nil && pctx.Err() == nil {
			review = true
		}
	}
	if review {
		if err = p.review(pctx); err == nil {
			p.reviewedAt = start
		}
	}
	timedOut := pctx.Err() == context.DeadlineExceeded
	cancel()
	if ctx.Err() != nil {
		return result, state, false, false
	}
	result = registry.ProbeResult{
		Time:                start,
		Duration:            p.clock.Since(start),
		Err:                 err,
		CredentialsRejected: apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.health
	starved := 0
	silent := false
	if err != nil && timedOut {
		switch {
		case p.heardSince(start, start):
			// The member sent something on a connection it had when the
			// probe started: it is alive, and busy. The probe's own new
			// connection does not count: its handshake may be a proxy's,
			// in front of a dead server.
			result.Err, result.Busy = nil, true
		case result.Duration-timeout > timeout/4 && h.starved < opts.FailureThreshold:
			// The timeout was noticed late: this process was starved of
			// CPU (a thousand members listing at once, or a machine that
			// descheduled it), and the answer, or bytes that would have
			// excused the probe, may be waiting unread in its sockets.
			// Such a probe proves nothing of the member, and is retried
			// soon. Only FailureThreshold of them in a row are excused, so
			// that a frozen member is still found on a process that stays
			// starved, a few retries later.
			starved = h.starved + 1
			result.Excused, retry = true, true
		case h.state == fleetv1alpha1.MemberStateConnecting &&
			(p.startedWithin(start, opts.startGrace()) || p.connected() && p.heardSince(start, start.Add(-opts.Interval))):
			// A member with its cluster starting, its first lists under
			// way, that sent something within an interval: its server is
			// busy with its lists, not gone. So is, for startGrace, one
			// whose cluster just started, whose first
			// handshakes may wait behind those of every client that
			// started with it (a thousand members registered at once).
			// After that, one that never sent anything (hung from the
			// start) gets no grace, nor one that stopped sending for an
			// interval.
			result.Excused = true
		default:
			// A timeout is decisive only for a Ready member, on an
			// established connection: a new connection's handshake is
			// slow when its server, or this process, is busy.
			silent = h.state == fleetv1alpha1.MemberStateReady && p.establishedAt(start)
		}
	}
	h.starved = starved
	if errors.Is(err, errClosing) {
		// Refused by the member's own connection, being torn down: it
		// proves nothing of the member, and is retried soon.
		result.Excused, retry = true, true
	}
	if result.Excused {
		result.ConsecutiveFailures = h.failures
		return result, h.state, retry, true
	}
	state = h.record(start, result.Err, p.connected(), silent)
	result.ConsecutiveFailures = h.failures
	// A Disconnected member is probed every Interval, but for one whose
	// probe timed out: another waits for it at once.
	retry = result.Err != nil && (state != fleetv1alpha1.MemberStateDisconnected || timedOut)
	return result, state, retry, true
}

// startedWithin reports whether the member's latest connection began
// less than d before t.
func (p *prober) startedWithin(t time.Time, d time.Duration) bool {
	return p.startedAt != nil && t.Sub(p.startedAt()) < d
}

// promote is told that the member's cluster was started: a member whose
// last probe succeeded is Ready from now, not from its next probe, up to
// an Interval later; promote then returns true. If a probe is under way,
// which may have found the member unconnected, another follows it at once.
func (p *prober) promote() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped || p.ctx == nil:
		return false
	case p.timer == nil:
		p.woken = true
		return false
	case !p.health.succeeded || p.health.state == fleetv1alpha1.MemberStateReady || !p.connected():
		return false
	}
	p.health.state = fleetv1alpha1.MemberStateReady
	return true
}

// answered reports whether err carries the member API server's answer.
func answered(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}
