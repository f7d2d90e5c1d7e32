package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// subscriber is an aware that remembers every engagement it was handed.
// Like multicluster-runtime's controllers, it starts a goroutine of its
// own per engagement, which ends with the engagement's context.
type subscriber struct {
	mu          sync.Mutex
	engagements map[string][]*engagement
}

type engagement struct {
	cl    cluster.Cluster
	ctx   context.Context
	start time.Time
	// ended closes when the goroutine the engagement started returns.
	ended chan struct{}
	// disengaged is set, with its time, when Disengage was called after
	// the context ended.
	disengaged   bool
	disengagedAt time.Time
}

// until is when the engagement was disengaged; far in the future while
// it was not.
func (e *engagement) until() time.Time {
	if e.disengaged {
		return e.disengagedAt
	}
	return time.Now().Add(time.Hour)
}

func newSubscriber() *subscriber { return &subscriber{engagements: map[string][]*engagement{}} }

func (s *subscriber) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	e := &engagement{cl: cl, ctx: ctx, start: time.Now(), ended: make(chan struct{})}
	go func() {
		defer close(e.ended)
		<-ctx.Done()
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.engagements[name] = append(s.engagements[name], e)
	return nil
}

func (s *subscriber) Disengage(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.engagements[name] {
		if e.ctx.Err() != nil && !e.disengaged {
			e.disengagedAt, e.disengaged = time.Now(), true
		}
	}
}

func (s *subscriber) String() string { return "subscriber" }

// of returns copies of the engagements of cluster name, oldest first.
func (s *subscriber) of(name string) []*engagement {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*engagement, len(s.engagements[name]))
	for i, e := range s.engagements[name] {
		c := *e
		out[i] = &c
	}
	return out
}

// live returns the names of the clusters with an engagement whose context
// lives, sorted.
func (s *subscriber) live() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, es := range s.engagements {
		if slices.ContainsFunc(es, func(e *engagement) bool { return e.ctx.Err() == nil }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// subscribe runs EngageMembers until the returned stop is called, which
// waits until it has returned.
func subscribe(t *testing.T, m *fleet.Manager, s *subscriber, filter fleet.ClusterFilter) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.EngageMembers(ctx, s, filter) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("EngageMembers: %v", err)
				}
			case <-time.After(poll.Timeout):
				t.Errorf("EngageMembers did not return within %s of its context's end", poll.Timeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitLive(t *testing.T, s *subscriber, want ...string) {
	t.Helper()
	poll.Until(t, fmt.Sprint("the subscriber engaged with exactly ", want), func() bool { return slices.Equal(s.live(), want) })
}

// TestEngageMembersLateSubscriber: a subscriber that comes after the
// members is engaged with each of them, not with the hub; a member that
// leaves ends its engagement; and once EngageMembers returns, every
// engagement has ended, the subscriber was told, and nothing it started
// is left.
func TestEngageMembersLateSubscriber(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	gone := f.Register(t, "sub-gone", suite.Kubeconfigs[0])
	f.Register(t, "sub-kept", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "sub-gone", "sub-kept")
	suite.WaitMemberCluster(t, "sub-kept", "written by this fleet", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Spec.SecretRef.Namespace == f.Namespace
	})
	f.Manager.GetEventRecorder("warm-up").Eventf(gone, nil, corev1.EventTypeNormal, "WarmUp", "Test", "before the goroutine baseline")
	baseline := goleak.IgnoreCurrent()
	hubWorkers := goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority")

	s := newSubscriber()
	stop := subscribe(t, f.Manager, s, nil)
	waitLive(t, s, "sub-gone", "sub-kept")
	for _, name := range []string{"sub-gone", "sub-kept"} {
		want, err := f.Manager.GetCluster(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if es := s.of(name); len(es) != 1 || es[0].cl != want {
			t.Fatalf("%s: %d engagements, want one with the member's cluster", name, len(es))
		}
	}

	if err := suite.HubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	waitLive(t, s, "sub-kept")

	stop()
	for name, es := range map[string][]*engagement{"sub-gone": s.of("sub-gone"), "sub-kept": s.of("sub-kept")} {
		for _, e := range es {
			if e.ctx.Err() == nil || !e.disengaged {
				t.Fatalf("%s: after EngageMembers returned, its engagement lives (%v) or was not disengaged (%v)", name, e.ctx.Err() == nil, !e.disengaged)
			}
			<-e.ended
		}
	}
	if es := s.of(registry.HubName); len(es) != 0 {
		t.Fatalf("the hub was handed to the subscriber %d times", len(es))
	}
	var leaked error
	deadline := time.Now().Add(poll.Timeout)
	for leaked = goleak.Find(baseline, hubWorkers); leaked != nil && time.Now().Before(deadline); leaked = goleak.Find(baseline, hubWorkers) {
		time.Sleep(100 * time.Millisecond)
	}
	if leaked != nil {
		t.Fatalf("goroutines left after EngageMembers returned: %v", leaked)
	}
}

// TestEngageMembersRotationJoinAndRepoint: a member whose credentials are
// rotated in place stays engaged, once, with the same cluster; a member
// that joins later is engaged; a Secret pointed at another API server
// ends the engagement and engages the new cluster; a member the filter
// refuses is never engaged.
func TestEngageMembersRotationJoinAndRepoint(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{})
	rotated := f.Register(t, "sub-rotated", suite.Kubeconfigs[0])
	f.Register(t, "sub-filtered", suite.Kubeconfigs[0])
	s := newSubscriber()
	subscribe(t, f.Manager, s, func(name string, _ map[string]string) bool { return name != "sub-filtered" })
	waitLive(t, s, "sub-rotated")

	first := s.of("sub-rotated")[0]
	kubeconfig := suite.AdminKubeconfig(t, suite.Members[0], suite.Name("rotated-user"))
	rotated.Data[registry.KubeconfigKey] = kubeconfig
	if err := suite.HubClient.Update(t.Context(), rotated); err != nil {
		t.Fatal(err)
	}
	// Evidence that the rotation was handled: the member runs the new
	// kubeconfig.
	poll.Until(t, "sub-rotated runs the rotated kubeconfig", func() bool {
		cl, err := f.Manager.GetRunningCluster("sub-rotated", kubeconfig)
		return err == nil && cl == first.cl
	})

	repointed := f.Register(t, "sub-repointed", suite.Kubeconfigs[0])
	waitLive(t, s, "sub-repointed", "sub-rotated")
	before := s.of("sub-repointed")[0]
	repointed.Data[registry.KubeconfigKey] = suite.Kubeconfigs[1]
	if err := suite.HubClient.Update(t.Context(), repointed); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "sub-repointed engaged again with its new cluster", func() bool {
		es := s.of("sub-repointed")
		last := es[len(es)-1]
		return last.ctx.Err() == nil && sameHost(last.cl.GetConfig().Host, suite.Members[1].Config.Host)
	})
	if before.ctx.Err() == nil {
		t.Fatal("the engagement of the old cluster lives on")
	}
	if es := s.of("sub-rotated"); len(es) != 1 || es[0].ctx.Err() != nil {
		t.Fatalf("sub-rotated: %d engagements after its rotation, the first ended: %v; want the first, alive", len(es), es[0].ctx.Err() != nil)
	}
	if es := s.of("sub-filtered"); len(es) != 0 {
		t.Fatalf("the member the filter refuses was engaged %d times", len(es))
	}
}

// TestEngageMembersFollowsOwnership: a replica alone owns every member
// and its subscriber is engaged with each; when a second replica joins,
// the members it takes are disengaged from the first replica's
// subscriber before they are engaged with its own: no member is ever
// engaged on two replicas at once.
func TestEngageMembersFollowsOwnership(t *testing.T) {
	t.Parallel()
	ns := suite.FleetNamespace(t)
	quick := func(name string) func(o *fleet.Options) {
		return func(o *fleet.Options) {
			o.Shard = &shard.Options{Name: name, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 250 * time.Millisecond}
		}
	}
	first := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Configure: quick("first")})
	var names []string
	for i := range 8 {
		name := suite.Name("owned")
		names = append(names, name)
		first.Register(t, name, suite.Kubeconfigs[i%2])
	}
	slices.Sort(names)
	fromFirst := newSubscriber()
	subscribe(t, first.Manager, fromFirst, nil)
	waitLive(t, fromFirst, names...)

	second := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Configure: quick("second")})
	fromSecond := newSubscriber()
	subscribe(t, second.Manager, fromSecond, nil)
	var moved []string
	poll.Until(t, "every member engaged on exactly its owner, some on the second", func() bool {
		moved = nil
		onFirst, onSecond := fromFirst.live(), fromSecond.live()
		for _, n := range names {
			firstOwns, secondOwns := first.Manager.Owns(n), second.Manager.Owns(n)
			if firstOwns == secondOwns || slices.Contains(onFirst, n) != firstOwns || slices.Contains(onSecond, n) != secondOwns {
				return false
			}
			if secondOwns {
				moved = append(moved, n)
			}
		}
		return len(moved) > 0
	})
	for _, n := range moved {
		was, now := fromFirst.of(n), fromSecond.of(n)
		for _, w := range was {
			for _, e := range now {
				if w.start.Before(e.until()) && e.start.Before(w.until()) {
					t.Fatalf("%s: engaged on the second replica at %s while the first had not let it go (engaged at %s, disengaged: %v)", n, e.start.Format(time.StampMicro), w.start.Format(time.StampMicro), w.disengaged)
				}
			}
		}
	}
}

func sameHost(a, b string) bool { return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") }
