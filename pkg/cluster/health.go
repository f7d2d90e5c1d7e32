package cluster

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// State is where a member is in its life.
type State string

const (
	// StatePending: registered, waiting for the pool to start.
	StatePending State = "Pending"
	// StateConnecting: its cluster is starting, or starting again after a
	// disconnection; no probe has succeeded since.
	StateConnecting State = "Connecting"
	// StateReady: engaged, and its last probe succeeded.
	StateReady State = "Ready"
	// StateUnhealthy: FailureThreshold probes in a row failed. Its work is
	// held and its informers are kept, so a short blip costs no re-list.
	StateUnhealthy State = "Unhealthy"
	// StateDisconnected: probes kept failing for DisconnectAfter. Its
	// cluster is torn down; probing goes on, and the next success
	// reconnects it.
	StateDisconnected State = "Disconnected"
)

// HealthOptions set how members are probed. With the defaults a frozen
// member (connections accepted, never answered) is Unhealthy within 5
// seconds, a dead one (connections refused) within 4.5. A busy member is
// never Unhealthy for being slow: a probe that timed out while the member
// kept sending on its connections counts as a success. A member's return
// is noticed as soon as it sends anything: that asks for a probe at once.
type HealthOptions struct {
	// Interval between probes. Defaults to 4s.
	Interval time.Duration
	// RetryInterval between probes after a failed one, so that a failure
	// is confirmed, and a return noticed, quickly. A Disconnected member
	// is probed every Interval instead. Defaults to 100ms.
	RetryInterval time.Duration
	// Timeout of one probe. A probe that times out while the member sent
	// nothing on its connections makes it Unhealthy at once: the member
	// is frozen, or cut off. Defaults to 1s.
	Timeout time.Duration
	// FailureThreshold is the number of probes in a row that fail with an
	// error, such as a refused connection or an error status, that make a
	// member Unhealthy. Defaults to 2.
	FailureThreshold int
	// DisconnectAfter is how long probes must keep failing before the
	// member is Disconnected. Defaults to 1m.
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
	if o.RetryInterval <= 0 {
		o.RetryInterval = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 2
	}
	if o.DisconnectAfter <= 0 {
		o.DisconnectAfter = time.Minute
	}
}

// health turns probe results into a member's state. It is owned by one
// prober goroutine.
type health struct {
	opts         HealthOptions
	state        State
	failures     int
	failingSince time.Time
}

// record takes one probe result at now and returns the new state.
// connected says whether the member's cluster is running; silent, that
// the probe timed out with nothing heard from the member.
func (h *health) record(now time.Time, err error, connected, silent bool) State {
	if err == nil {
		h.failures = 0
		if connected {
			h.state = StateReady
		} else {
			h.state = StateConnecting
		}
		return h.state
	}
	if h.failures == 0 {
		h.failingSince = now
	}
	h.failures++
	switch {
	case h.state == StateDisconnected:
	case now.Sub(h.failingSince) >= h.opts.DisconnectAfter:
		h.state = StateDisconnected
	case silent || h.failures >= h.opts.FailureThreshold:
		h.state = StateUnhealthy
	}
	return h.state
}

// probeFunc makes one probe of a member.
type probeFunc func(ctx context.Context) error

// prober probes at every interval, or retry interval after a failure,
// until ctx ends, and reports each result and the state it leads to.
type prober struct {
	clock  clock.WithTicker
	health *health
	probe  probeFunc
	// connected reports whether the member's cluster is running.
	connected func() bool
	// heardSince reports whether the member sent anything, on a
	// connection opened before t, since t.
	heardSince func(t time.Time) bool
	// report is called after each probe with its result and the state.
	report func(result ProbeResult, state State)
	// wake asks for a probe now, not before wakeGap after the last one
	// started: the member answered something.
	wake <-chan struct{}
}

// wakeGap is the least time between the start of a probe and a probe a
// wake asks for, so that a member whose watches stream while its probes
// fail is not probed in a loop.
const wakeGap = 10 * time.Millisecond

// ProbeResult is the outcome of one probe.
type ProbeResult struct {
	Time     time.Time
	Duration time.Duration
	Err      error
	// CredentialsRejected is true for a 401 or 403.
	CredentialsRejected bool
	// Busy is true for a probe that timed out while the member kept
	// sending on its connections: it counts as a success, and Err is nil.
	Busy bool
	// ConsecutiveFailures counts the failed probes in a row, this one
	// included; 0 after a success.
	ConsecutiveFailures int
}

// run probes at once, then an interval (or retry interval) after the
// start of each probe, until ctx ends.
func (p *prober) run(ctx context.Context) {
	for {
		start := p.clock.Now()
		pctx, cancel := context.WithTimeout(ctx, p.health.opts.Timeout)
		err := p.probe(pctx)
		timedOut := pctx.Err() == context.DeadlineExceeded
		cancel()
		if ctx.Err() != nil {
			return
		}
		result := ProbeResult{
			Time:                start,
			Duration:            p.clock.Since(start),
			Err:                 err,
			CredentialsRejected: apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err),
		}
		silent := false
		if err != nil && timedOut {
			if p.heardSince(start) {
				result.Err, result.Busy = nil, true
			} else {
				silent = true
			}
		}
		state := p.health.record(start, result.Err, p.connected(), silent)
		result.ConsecutiveFailures = p.health.failures
		p.report(result, state)
		next := p.health.opts.Interval
		if result.Err != nil && state != StateDisconnected {
			next = p.health.opts.RetryInterval
		}
		// A wake (an Unhealthy member answered something, or a new
		// connection is up) probes at once, unless the API server
		// answered this probe with an error: its answers would then
		// probe it in a loop.
		wake := p.wake
		if answered(result.Err) {
			wake = nil
		}
		timer := p.clock.NewTimer(max(next-result.Duration, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		case <-wake:
			timer.Stop()
			if !p.sleep(ctx, wakeGap-p.clock.Since(start)) {
				return
			}
		}
	}
}

// sleep waits d, and reports false if ctx ended first.
func (p *prober) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := p.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C():
		return true
	}
}

// answered reports whether err carries the member API server's answer.
func answered(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}
