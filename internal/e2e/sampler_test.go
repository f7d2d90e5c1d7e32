package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// samplePeriod is how often a sampler reads the members.
const samplePeriod = 50 * time.Millisecond

// copyState is a member's copy of the sampled ConfigMap at one sample.
type copyState struct {
	// value is the copy's v, "" without a copy.
	value string
	// terminating: the copy has a deletionTimestamp (a finalizer holds it).
	terminating bool
	// from and to bound the read: the copy was so at some time between.
	from, to time.Time
	// applied is when the member's API server last took an apply of
	// fleet-manager's to the copy (its managedFields time, in whole
	// seconds), zero if unknown.
	applied time.Time
}

// sample is one reading: each member's copy, read first, then the hub's
// rollout record of the Propagation, read after them.
type sample struct {
	at     time.Time
	copies map[string]copyState
	record *fleetv1alpha1.RolloutStatus
}

// sampler reads, every 50 ms, each member's copy of one ConfigMap and
// then the Propagation's rollout record, until stopped.
type sampler struct {
	t       *testing.T
	hub     client.Client
	ns      string
	name    string
	members map[string]client.Client

	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	done    chan struct{}
}

// sample starts a sampler of ConfigMap name in members of tm, reading
// Propagation web's record from tm's hub. It stops when the test ends,
// or at stopSampling.
func (tm *team) sample(name string, members ...string) *sampler {
	s := &sampler{t: tm.t, hub: tm.hub, ns: tm.ns, name: name, members: map[string]client.Client{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, m := range members {
		s.members[m] = tm.member(m)
	}
	go s.run()
	tm.t.Cleanup(s.stopSampling)
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	ctx := s.t.Context()
	tick := time.NewTicker(samplePeriod)
	defer tick.Stop()
	for {
		smp := sample{at: time.Now(), copies: map[string]copyState{}}
		ok := true
		var mu sync.Mutex
		var wg sync.WaitGroup
		for m, cl := range s.members {
			wg.Go(func() {
				from := time.Now()
				cm := &corev1.ConfigMap{}
				err := cl.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: s.name}, cm)
				c := copyState{from: from, to: time.Now()}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case apierrors.IsNotFound(err):
					smp.copies[m] = c
				case err != nil:
					ok = false
				default:
					c.value, c.terminating, c.applied = cm.Data["v"], cm.DeletionTimestamp != nil, appliedAt(cm)
					smp.copies[m] = c
				}
			})
		}
		wg.Wait()
		p := &fleetv1alpha1.Propagation{}
		if err := s.hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web"}, p); err == nil {
			smp.record = p.Status.Rollout
		}
		if ok {
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stopSampling stops the sampler and waits for it.
func (s *sampler) stopSampling() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// taken returns the samples so far.
func (s *sampler) taken() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// appliedAt returns when cm's member last took an apply of
// fleet-manager's, truncated to the second; zero if it records none.
func appliedAt(cm *corev1.ConfigMap) time.Time {
	for _, f := range cm.ManagedFields {
		if f.Manager == "fleet-manager" && f.Operation == metav1.ManagedFieldsOperationApply && f.Time != nil {
			return f.Time.Time
		}
	}
	return time.Time{}
}

// change bounds when a member's copy took a value: after lo, the start
// of the last read that did not show it, and before hi, the end of the
// first that did; both narrowed to the second the member's API server
// recorded the apply in (managedFields), so that a loaded machine's slow
// reads do not blur the verdict beyond a second.
type change struct{ lo, hi time.Time }

// changes returns when each member's copy took value.
func changes(samples []sample, value string) map[string]change {
	out, before := map[string]change{}, map[string]time.Time{}
	for _, smp := range samples {
		for m, c := range smp.copies {
			if _, ok := out[m]; ok {
				continue
			}
			if c.value == value {
				lo, hi := before[m], c.to
				if lo.IsZero() {
					lo = c.from
				}
				if !c.applied.IsZero() {
					lo, hi = later(lo, c.applied), earlier(hi, c.applied.Add(time.Second))
				}
				out[m] = change{lo: lo, hi: hi}
			} else {
				before[m] = c.from
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// firstSeen returns when each member's copy was seen with value, at the
// latest.
func firstSeen(samples []sample, value string) map[string]time.Time {
	out := map[string]time.Time{}
	for m, c := range changes(samples, value) {
		out[m] = c.hi
	}
	return out
}

// checkOneAtATime fails the test if more than maxConcurrency members were
// between revisions at once, a member being between revisions from its
// copy's change to value until it has been Available, as a ConfigMap is
// at once, for minSuccessTime. Each change is known within the reads that
// bound it; a breach is reported only when certain: maxConcurrency+1
// members whose changes all fall within less than minSuccessTime. It
// returns the members in the order they took value.
func checkOneAtATime(t *testing.T, samples []sample, value string, maxConcurrency int, minSuccessTime time.Duration) []string {
	t.Helper()
	ch := changes(samples, value)
	var order []string
	worst := time.Duration(0)
	for m, c := range ch {
		order = append(order, m)
		worst = max(worst, c.hi.Sub(c.lo))
	}
	slices.SortFunc(order, func(a, b string) int { return ch[a].hi.Compare(ch[b].hi) })
	if worst >= minSuccessTime {
		t.Fatalf("a change was known only within %s, not less than minSuccessTime %s: the verdict would prove nothing", worst, minSuccessTime)
	}
	t.Logf("%d members took %q, each change known within %s", len(order), value, worst.Round(time.Millisecond))
	for i := 0; i+maxConcurrency < len(order); i++ {
		first, last := ch[order[i]], ch[order[i+maxConcurrency]]
		if span := last.hi.Sub(first.lo); span < minSuccessTime {
			t.Errorf("%d members between revisions at once, maxConcurrency %d: %v took %q within %s, less than minSuccessTime %s; order:%s",
				maxConcurrency+1, maxConcurrency, order[i:i+maxConcurrency+1], value, span, minSuccessTime, describe(order, firstSeen(samples, value)))
		}
	}
	return order
}

// checkGivenFirst fails the test if a member's copy held value at a
// sample while the rollout record, read after it, did not give the member
// revision at least rev: "A member applies a revision only when
// status.rollout.members, as the hub holds it, gives it".
func checkGivenFirst(t *testing.T, samples []sample, value string, rev int64) {
	t.Helper()
	for _, smp := range samples {
		for m, c := range smp.copies {
			if c.value == value && given(smp.record, m) < rev {
				t.Errorf("at %s %s held %q (revision %d) while the rollout record read after it gave it revision %d: %+v",
					smp.at.Format("15:04:05.000"), m, value, rev, given(smp.record, m), smp.record)
				return
			}
		}
	}
}

func describe(order []string, seen map[string]time.Time) string {
	var b strings.Builder
	for _, m := range order {
		fmt.Fprintf(&b, " %s@%s", m, seen[m].Format("15:04:05.000"))
	}
	return b.String()
}
