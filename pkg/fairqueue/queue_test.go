package fairqueue

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
)

// Request is the item of the tests' queues: a fleet request.
type Request = engage.Request

// fqReq returns the request for object name in a cluster.
func fqReq(clusterName, name string) Request {
	return Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
}

// requestCluster names the cluster of a request, as a fleet controller's
// queue does.
func requestCluster(r Request) string { return r.ClusterName }

// newTestFairQueue returns a fair queue of requests with the options, on
// a fake clock, shut down when the test ends.
func newTestFairQueue(t *testing.T, opts Options[Request]) (*Queue[Request], *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	opts.Clock = clk
	q := New("", requestCluster, opts)
	t.Cleanup(q.ShutDown)
	return q, clk
}

// fqWaitLen waits until q.Len() is n.
func fqWaitLen(t *testing.T, q workqueue.TypedInterface[Request], n int) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("Len() == %d", n), func() bool { return q.Len() == n })
}

// ringOrder returns, per priority with a ring, the clusters of the ring
// in the order they will be served.
func (q *Queue[T]) ringOrder() map[int][]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[int][]string{}
	for _, r := range q.rings {
		l := r.head
		for {
			out[r.priority] = append(out[r.priority], l.cluster.name)
			if l = l.next; l == r.head {
				break
			}
		}
	}
	return out
}

// fqScenario is a queue a scenario runs on, and what it has handed
// out, as "name@priority".
type fqScenario struct {
	t *testing.T
	q priorityqueue.PriorityQueue[Request]
	// step advances the queue's clock. controller-runtime's queue runs
	// on the real clock, so step does nothing there and scenarios use
	// short delays and waitLen.
	step func(time.Duration)
	got  []string
}

// get hands out the next item, and records it.
func (s *fqScenario) get() Request {
	s.t.Helper()
	item, priority, shutdown := s.q.GetWithPriority()
	if shutdown {
		s.t.Fatal("GetWithPriority: shutdown")
	}
	s.got = append(s.got, item.Name+"@"+strconv.Itoa(priority))
	return item
}

// getDone hands out the next items and marks them Done.
func (s *fqScenario) getDone(n int) {
	s.t.Helper()
	for range n {
		s.q.Done(s.get())
	}
}

// onBothFqQueues runs a scenario on a fair queue and on controller-runtime's
// priority queue.
func onBothFqQueues(t *testing.T, scenario func(s *fqScenario)) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, name := range []string{"fair", "controller-runtime"} {
		t.Run(name, func(t *testing.T) {
			s := &fqScenario{t: t}
			if name == "fair" {
				q, clk := newTestFairQueue(t, Options[Request]{})
				s.q, s.step = q, clk.Step
			} else {
				q := priorityqueue.New[Request]("")
				s.q, s.step = q, func(time.Duration) {}
				t.Cleanup(func() {
					if !q.ShuttingDown() { // Its ShutDown panics when called twice.
						q.ShutDown()
					}
				})
			}
			scenario(s)
			got[name] = s.got
		})
	}
	return got
}

func TestFairQueueSemanticsMatchControllerRuntime(t *testing.T) {
	add := func(s *fqScenario, o priorityqueue.AddOpts, names ...string) {
		for _, n := range names {
			s.q.AddWithOpts(o, fqReq("a", n))
		}
	}
	prio := func(p int) priorityqueue.AddOpts { return priorityqueue.AddOpts{Priority: new(p)} }

	for name, tc := range map[string]struct {
		run  func(s *fqScenario)
		want []string
	}{
		"FIFO": {
			run: func(s *fqScenario) {
				add(s, prio(0), "a", "b", "c")
				fqWaitLen(s.t, s.q, 3)
				s.getDone(3)
			},
			want: []string{"a@0", "b@0", "c@0"},
		},
		"deduplicated": {
			run: func(s *fqScenario) {
				add(s, prio(0), "a", "a", "b", "a")
				fqWaitLen(s.t, s.q, 2)
				s.getDone(2)
				fqWaitLen(s.t, s.q, 0)
			},
			want: []string{"a@0", "b@0"},
		},
		"re-added while in flight, handed out after Done": {
			run: func(s *fqScenario) {
				add(s, prio(0), "foo")
				fqWaitLen(s.t, s.q, 1)
				foo := s.get()
				add(s, prio(0), "foo", "bar")
				fqWaitLen(s.t, s.q, 2)
				s.getDone(1) // bar, not foo
				add(s, prio(0), "baz")
				fqWaitLen(s.t, s.q, 2)
				s.q.Done(foo)
				s.getDone(2)
			},
			want: []string{"foo@0", "bar@0", "foo@0", "baz@0"},
		},
		"highest priority kept": {
			run: func(s *fqScenario) {
				add(s, prio(1), "foo")
				add(s, prio(2), "foo")
				add(s, prio(2), "bar")
				add(s, prio(1), "bar")
				fqWaitLen(s.t, s.q, 2)
				s.getDone(2)
			},
			want: []string{"foo@2", "bar@2"},
		},
		"raised priority goes to the back of it": {
			run: func(s *fqScenario) {
				add(s, prio(0), "foo")
				add(s, prio(1), "bar")
				add(s, prio(0), "baz")
				add(s, prio(1), "foo")
				fqWaitLen(s.t, s.q, 3)
				s.getDone(3)
			},
			want: []string{"bar@1", "foo@1", "baz@0"},
		},
		"higher priority first": {
			run: func(s *fqScenario) {
				for i := range 30 {
					add(s, prio([]int{-100, 0, 5}[i%3]), strconv.Itoa(i))
				}
				fqWaitLen(s.t, s.q, 30)
				s.getDone(30)
			},
			want: func() []string {
				var want []string
				for _, p := range []int{5, 0, -100} {
					for i := range 30 {
						if []int{-100, 0, 5}[i%3] == p {
							want = append(want, fmt.Sprintf("%d@%d", i, p))
						}
					}
				}
				return want
			}(),
		},
		"earliest ready time kept, waiting items not in Len": {
			run: func(s *fqScenario) {
				add(s, priorityqueue.AddOpts{}, "foo")
				add(s, priorityqueue.AddOpts{After: time.Hour}, "foo", "bar")
				add(s, priorityqueue.AddOpts{}, "baz")
				fqWaitLen(s.t, s.q, 2)
				s.getDone(2)
				add(s, priorityqueue.AddOpts{}, "bar")
				fqWaitLen(s.t, s.q, 1)
				s.getDone(1)
			},
			want: []string{"foo@0", "baz@0", "bar@0"},
		},
		"a waiting item added ready keeps its place": {
			run: func(s *fqScenario) {
				add(s, priorityqueue.AddOpts{After: time.Hour}, "a")
				add(s, priorityqueue.AddOpts{}, "b", "a")
				fqWaitLen(s.t, s.q, 2)
				s.getDone(2)
			},
			want: []string{"a@0", "b@0"},
		},
		"items become ready in order of ready time": {
			run: func(s *fqScenario) {
				add(s, priorityqueue.AddOpts{After: 50 * time.Millisecond}, "foo")
				add(s, priorityqueue.AddOpts{After: time.Millisecond}, "bar")
				add(s, priorityqueue.AddOpts{}, "baz")
				s.step(50 * time.Millisecond)
				fqWaitLen(s.t, s.q, 3)
				s.getDone(3)
			},
			want: []string{"baz@0", "bar@0", "foo@0"},
		},
		"rate limited": {
			run: func(s *fqScenario) {
				add(s, priorityqueue.AddOpts{}, "bar")
				s.q.AddRateLimited(fqReq("a", "foo"))
				s.q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true, After: time.Hour, Priority: new(1)}, fqReq("a", "foo"))
				s.step(10 * time.Millisecond)
				fqWaitLen(s.t, s.q, 2)
				if n := s.q.NumRequeues(fqReq("a", "foo")); n != 2 {
					s.t.Errorf("NumRequeues = %d, want 2", n)
				}
				s.getDone(2)
				s.q.Forget(fqReq("a", "foo"))
				if n := s.q.NumRequeues(fqReq("a", "foo")); n != 0 {
					s.t.Errorf("NumRequeues after Forget = %d, want 0", n)
				}
			},
			want: []string{"foo@1", "bar@0"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for queue, got := range onBothFqQueues(t, tc.run) {
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s queue handed out %v, want %v", queue, got, tc.want)
				}
			}
		})
	}
}

func TestFairQueueMatchesControllerRuntimeOnRandomOps(t *testing.T) {
	// Within one cluster the fair queue hands out what controller-runtime's
	// does. Random adds at random priorities, Gets and Dones, with items
	// re-added while in flight; a Get only when an item can be handed out.
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 0))
		fair, _ := newTestFairQueue(t, Options[Request]{})
		cr := priorityqueue.New[Request]("")
		queued := map[Request]bool{}
		var inFlight []Request
		for op := range 400 {
			key := fqReq("a", strconv.Itoa(rnd.IntN(12)))
			switch n := rnd.IntN(10); {
			case n < 5:
				o := priorityqueue.AddOpts{Priority: new(rnd.IntN(3) - 1)}
				fair.AddWithOpts(o, key)
				cr.AddWithOpts(o, key)
				queued[key] = true
			case n < 8:
				handable := false
				for k := range queued {
					handable = handable || !slices.Contains(inFlight, k)
				}
				if !handable {
					continue
				}
				fk, fp, _ := fair.GetWithPriority()
				ck, cp, _ := cr.GetWithPriority()
				if fk != ck || fp != cp {
					t.Fatalf("seed %d, op %d: fair queue handed out %v@%d, controller-runtime's %v@%d", seed, op, fk, fp, ck, cp)
				}
				delete(queued, fk)
				inFlight = append(inFlight, fk)
			case len(inFlight) > 0:
				i := rnd.IntN(len(inFlight))
				fair.Done(inFlight[i])
				cr.Done(inFlight[i])
				inFlight = slices.Delete(inFlight, i, i+1)
			}
			if fl, cl := fair.Len(), cr.Len(); fl != cl {
				t.Fatalf("seed %d, op %d: Len() = %d on the fair queue, %d on controller-runtime's", seed, op, fl, cl)
			}
		}
		cr.ShutDown()
	}
}

func TestFairQueueShutDownMatchesControllerRuntime(t *testing.T) {
	onBothFqQueues(t, func(s *fqScenario) {
		s.q.Add(fqReq("a", "foo"))
		fqWaitLen(s.t, s.q, 1)

		blocked := make(chan bool)
		go func() {
			s.q.Get() // foo
			_, shutdown := s.q.Get()
			blocked <- shutdown
		}()
		s.q.ShutDown()
		if !<-blocked {
			s.t.Error("a Get blocked at ShutDown did not return shutdown")
		}
		if !s.q.ShuttingDown() {
			s.t.Error("ShuttingDown() = false after ShutDown")
		}
		s.q.Add(fqReq("a", "bar"))
		if item, priority, shutdown := s.q.GetWithPriority(); item != (Request{}) || priority != 0 || !shutdown {
			s.t.Errorf("GetWithPriority after ShutDown = %v, %d, %t; want zero, 0, true", item, priority, shutdown)
		}
	})
}

func TestFairQueueRoundRobin(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{})
	for _, r := range []Request{
		fqReq("a", "1"), fqReq("a", "2"), fqReq("a", "3"),
		fqReq("b", "1"), fqReq("b", "2"),
		fqReq("c", "1"),
		fqReq("", "1"), // the hub
	} {
		q.Add(r)
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(-100)}, fqReq("c", "low"))

	var got []string
	for range 8 {
		item, _ := q.Get()
		got = append(got, item.ClusterName+"/"+item.Name)
		q.Done(item)
	}
	want := []string{"a/1", "b/1", "c/1", "/1", "a/2", "b/2", "a/3", "c/low"}
	if !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
}

func TestFairQueueIsFairAndControllerRuntimeIsNot(t *testing.T) {
	const noisy = 10000
	got := onBothFqQueues(t, func(s *fqScenario) {
		for i := range noisy {
			s.q.Add(fqReq("noisy", strconv.Itoa(i)))
		}
		s.q.Add(fqReq("quiet", "alone"))
		fqWaitLen(s.t, s.q, noisy+1)
		for range noisy + 1 {
			item, _ := s.q.Get()
			s.got = append(s.got, item.ClusterName)
			s.q.Done(item)
		}
	})
	if i := slices.Index(got["fair"], "quiet"); i < 0 || i+1 > 2 {
		t.Errorf("fair queue: the quiet cluster's item was handed out by Get %d, want within the first 2 (one per cluster)", i+1)
	}
	if i := slices.Index(got["controller-runtime"], "quiet"); i != noisy {
		t.Errorf("controller-runtime's queue: the quiet cluster's item was handed out by Get %d, want last (%d)", i+1, noisy+1)
	}
}

func TestFairQueueOfOtherItems(t *testing.T) {
	// Items of any comparable type, here "cluster/name" strings; equal
	// items are one item.
	q := New("", func(item string) string {
		clusterName, _, _ := strings.Cut(item, "/")
		return clusterName
	}, Options[string]{})
	defer q.ShutDown()
	for _, item := range []string{"a/1", "a/2", "a/1", "b/1", "a/3", "b/2"} {
		q.Add(item)
	}
	if n := q.Len(); n != 5 {
		t.Errorf("Len() = %d, want 5", n)
	}
	var got []string
	for range 5 {
		item, _ := q.Get()
		got = append(got, item)
		q.Done(item)
	}
	if want := []string{"a/1", "b/1", "a/2", "b/2", "a/3"}; !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
}

func TestFairQueueHigherPriorityFirstAcrossClusters(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{})
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(-100)}, fqReq("a", "1"), fqReq("a", "2"))
	q.AddWithOpts(priorityqueue.AddOpts{}, fqReq("b", "1"))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(-100)}, fqReq("c", "1"))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(5)}, fqReq("c", "2"))

	var got []string
	for range 5 {
		item, priority, _ := q.GetWithPriority()
		got = append(got, fmt.Sprintf("%s/%s@%d", item.ClusterName, item.Name, priority))
		q.Done(item)
	}
	want := []string{"c/2@5", "b/1@0", "a/1@-100", "c/1@-100", "a/2@-100"}
	if !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
}

func TestFairQueueCapSkipsClusterAtCap(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{MaxInFlightPerCluster: 1})
	q.Add(fqReq("a", "1"))
	q.Add(fqReq("a", "2"))
	q.Add(fqReq("b", "1"))

	a1, _ := q.Get()
	b1, _ := q.Get()
	if a1 != fqReq("a", "1") || b1 != fqReq("b", "1") {
		t.Fatalf("handed out %v, %v; want a/1, b/1", a1, b1)
	}
	if got := q.ringOrder(); len(got) != 0 {
		t.Fatalf("clusters that can hand out = %v, want none: a is at its cap", got)
	}
	if n := q.Len(); n != 1 {
		t.Errorf("Len() = %d, want 1: a/2 waits, queued", n)
	}
	q.Done(fqReq("a", "2")) // not in flight: changes nothing
	q.Done(b1)
	if got := q.ringOrder(); len(got) != 0 {
		t.Fatalf("clusters that can hand out = %v, want none", got)
	}

	got := make(chan Request)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	q.Done(a1)
	if item := <-got; item != fqReq("a", "2") {
		t.Errorf("Get after Done = %v, want a/2", item)
	}
}

func TestFairQueueCapHoldsUnderConcurrentWorkers(t *testing.T) {
	const (
		workers  = 8
		capacity = 2
		items    = 4000
	)
	clusters := []string{"a", "b", "c", "d"}
	q, _ := newTestFairQueue(t, Options[Request]{MaxInFlightPerCluster: capacity})

	inFlight := map[string]*atomic.Int32{}
	for _, c := range clusters {
		inFlight[c] = new(atomic.Int32)
	}
	// Every third item is added again, once, while it is in flight, so it
	// is handed out twice.
	want := int64(items + (items+2)/3)
	var processed, peak atomic.Int64
	var readded sync.Map
	finished := make(chan struct{})

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				item, shutdown := q.Get()
				if shutdown {
					return
				}
				n := inFlight[item.ClusterName].Add(1)
				if n > capacity {
					t.Errorf("cluster %s has %d items in flight, cap %d", item.ClusterName, n, capacity)
				}
				for p := peak.Load(); int64(n) > p && !peak.CompareAndSwap(p, int64(n)); p = peak.Load() {
				}
				if i, _ := strconv.Atoi(item.Name); i%3 == 0 {
					if _, again := readded.LoadOrStore(item, true); !again {
						q.Add(item)
					}
				}
				for range rand.IntN(20) {
					runtime.Gosched()
				}
				inFlight[item.ClusterName].Add(-1)
				q.Done(item)
				if processed.Add(1) == want {
					close(finished)
				}
			}
		})
	}
	for i := range items {
		q.Add(fqReq(clusters[i%len(clusters)], strconv.Itoa(i)))
	}
	<-finished
	q.ShutDown()
	wg.Wait()

	if n := processed.Load(); n != want {
		t.Errorf("processed %d items, want %d", n, want)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d after processing everything, want 0", n)
	}
	t.Logf("peak in flight per cluster: %d (cap %d)", peak.Load(), capacity)
}

func TestFairQueueHold(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{})
	q.Hold("a", true)
	q.Add(fqReq("a", "1"))
	q.Add(fqReq("b", "1"))
	q.Add(fqReq("a", "1"))

	if item, _ := q.Get(); item != fqReq("b", "1") {
		t.Fatalf("Get = %v, want b/1: a is held", item)
	}
	q.Done(fqReq("b", "1"))
	if got := q.ringOrder(); len(got) != 0 {
		t.Fatalf("clusters that can hand out = %v, want none: a is held", got)
	}
	if n := q.Len(); n != 1 {
		t.Errorf("Len() = %d, want 1: a's item stays queued", n)
	}

	got := make(chan Request)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	q.Hold("a", false)
	if item := <-got; item != fqReq("a", "1") {
		t.Errorf("Get after the hold ended = %v, want a/1", item)
	}
	q.Done(fqReq("a", "1"))

	// Drop forgets a hold: a cluster added again after its drop starts
	// unheld, and an item in flight is not affected.
	q.Add(fqReq("a", "2"))
	a2, _ := q.Get()
	q.Hold("a", true)
	q.Drop("a")
	q.Add(fqReq("a", "3"))
	q.Done(a2)
	if n, order := q.Len(), q.ringOrder(); n != 1 || len(order) != 1 || !slices.Equal(order[0], []string{"a"}) {
		t.Fatalf("after drop of a held cluster: Len() = %d, rings %v; want 1 item, a in the ring of priority 0: the drop ended the hold", n, order)
	}
	if item, _ := q.Get(); item != fqReq("a", "3") {
		t.Errorf("Get = %v, want a/3", item)
	}
	q.Done(fqReq("a", "3"))

	// A cluster dropped while held, with nothing in flight, is forgotten.
	q.Hold("b", true)
	q.Drop("b")
	q.mu.Lock()
	_, known := q.clusters["b"]
	q.mu.Unlock()
	if known {
		t.Error("a cluster dropped while held is still known to the queue")
	}
}

// fqCountingRateLimiter counts Forget calls.
type fqCountingRateLimiter struct {
	workqueue.TypedRateLimiter[Request]
	forgets atomic.Int64
}

func (r *fqCountingRateLimiter) Forget(item Request) {
	r.forgets.Add(1)
	r.TypedRateLimiter.Forget(item)
}

func TestFairQueueDrop(t *testing.T) {
	const big = 10000
	rl := &fqCountingRateLimiter{TypedRateLimiter: workqueue.DefaultTypedControllerRateLimiter[Request]()}
	q, clk := newTestFairQueue(t, Options[Request]{RateLimiter: rl})

	q.Add(fqReq("a", "0"))
	a0, _ := q.Get() // a/0 in flight
	q.Add(a0)        // parked until Done
	for i := range big {
		q.Add(fqReq("big", strconv.Itoa(i)))
	}
	q.AddAfter(fqReq("big", "later"), time.Hour)
	q.Add(fqReq("a", "1"))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: new(1)}, fqReq("a", "2"))
	q.AddAfter(fqReq("a", "3"), time.Minute)
	q.AddRateLimited(fqReq("a", "4"))

	q.mu.Lock()
	bigCluster := q.clusters["big"]
	bigItems := slices.Clone(bigCluster.levels[0].items.items)
	bigWaiting := slices.Clone(bigCluster.waiting.items)
	q.mu.Unlock()
	lenBefore := q.Len()

	q.Drop("a")
	q.Drop("unknown")

	if n := q.Len(); n != lenBefore-3 {
		t.Errorf("Len() = %d after drop, want %d (a's 3 ready items gone)", n, lenBefore-3)
	}
	if n := rl.forgets.Load(); n != 5 {
		t.Errorf("drop visited %d items, want a's 5 queued ones", n)
	}
	if n := q.NumRequeues(fqReq("a", "4")); n != 0 {
		t.Errorf("NumRequeues(a/4) = %d after drop, want 0", n)
	}
	q.mu.Lock()
	if q.clusters["big"] != bigCluster ||
		!slices.Equal(bigCluster.levels[0].items.items, bigItems) ||
		!slices.Equal(bigCluster.waiting.items, bigWaiting) {
		t.Error("drop of a changed the other cluster's structures")
	}
	for i, it := range bigItems {
		if it.index != i || it.state != fqReady {
			t.Fatalf("drop of a changed item %v of the other cluster", it.key)
		}
	}
	if len(q.timers) != 1 || q.timers[0] != bigCluster {
		t.Errorf("clusters with waiting items: %d, want only big", len(q.timers))
	}
	q.mu.Unlock()
	if got := q.ringOrder(); !slices.Equal(got[0], []string{"big"}) || len(got) != 1 {
		t.Errorf("rings = %v, want only big at priority 0", got)
	}

	// The item in flight stays in flight; later adds are accepted.
	q.Add(a0)
	q.Add(fqReq("a", "5"))
	clk.Step(2 * time.Minute) // a/3 was dropped: it does not come back
	if n := q.Len(); n != big+2 {
		t.Errorf("Len() = %d, want %d", n, big+2)
	}
	if item, _ := q.Get(); item != fqReq("big", "0") {
		t.Errorf("Get = %v, want big/0", item)
	}
	if item, _ := q.Get(); item != fqReq("a", "5") {
		t.Errorf("Get = %v, want a/5: a/0 is still in flight", item)
	}
	q.Done(a0)
	q.mu.Lock()
	next := q.rings[0].head.cluster.name
	q.mu.Unlock()
	if next != "big" {
		t.Errorf("next cluster = %s, want big", next)
	}
	q.Get()
	if item, _ := q.Get(); item != a0 {
		t.Errorf("Get = %v, want %v after its Done", item, a0)
	}
}

func TestFairQueueKeepsClustersUntilDropped(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{})
	known := func(name string) bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.clusters[name] != nil
	}
	q.Add(fqReq("a", "1"))
	q.Add(fqReq("b", "1"))
	for range 2 {
		item, _ := q.Get()
		q.Done(item)
	}
	if !known("a") || !known("b") {
		t.Fatal("an idle cluster was forgotten before its drop")
	}
	q.Add(fqReq("a", "2"))
	a2, _ := q.Get()
	q.Drop("a")
	q.Drop("b")
	if !known("a") || known("b") {
		t.Fatalf("after drop: a known %t (one item in flight), b known %t; want true, false", known("a"), known("b"))
	}
	q.Done(a2)
	if known("a") {
		t.Error("a dropped cluster was kept after its last Done")
	}

	// A late request of a dropped cluster does not make it kept again;
	// Keep does.
	q.Drop("a")
	q.Add(fqReq("a", "late"))
	late, _ := q.Get()
	q.Done(late)
	if known("a") {
		t.Error("a dropped cluster was kept after a late request")
	}
	q.Add(fqReq("a", "3"))
	q.Drop("a")
	q.Keep("a")
	q.Add(fqReq("a", "4"))
	a4, _ := q.Get()
	q.Done(a4)
	if !known("a") {
		t.Error("a cluster kept again after its drop was forgotten when idle")
	}
}

func TestFairQueueShrinksDrainedCluster(t *testing.T) {
	q, _ := newTestFairQueue(t, Options[Request]{})
	const n = 10 * fqKeepItems
	for i := range n {
		q.Add(fqReq("a", strconv.Itoa(i)))
	}
	q.mu.Lock()
	before := q.clusters["a"].items
	q.mu.Unlock()
	for range n {
		item, _ := q.Get()
		q.Done(item)
	}
	q.mu.Lock()
	c := q.clusters["a"]
	level := c.level(0)
	if reflect.ValueOf(c.items).UnsafePointer() == reflect.ValueOf(before).UnsafePointer() || c.itemsPeak != 0 {
		t.Errorf("the drained cluster kept its item map of %d items (peak %d)", n, c.itemsPeak)
	}
	if level.items.items != nil {
		t.Errorf("the drained level kept a heap of capacity %d", cap(level.items.items))
	}
	q.mu.Unlock()

	// A small queue keeps its map.
	q.Add(fqReq("a", "x"))
	q.mu.Lock()
	small := c.items
	q.mu.Unlock()
	item, _ := q.Get()
	q.Done(item)
	q.mu.Lock()
	defer q.mu.Unlock()
	if reflect.ValueOf(c.items).UnsafePointer() != reflect.ValueOf(small).UnsafePointer() {
		t.Error("a cluster that never grew past fqKeepItems had its map made anew")
	}
}

func TestFairQueueAddAfterOnFakeClock(t *testing.T) {
	q, clk := newTestFairQueue(t, Options[Request]{})
	got := make(chan Request)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	q.AddAfter(fqReq("a", "later"), time.Second)
	poll.Until(t, "the queue's timer", func() bool { return clk.Waiters() == 1 })

	clk.Step(time.Second - time.Nanosecond)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len() = %d before the item's time, want 0", n)
	}
	q.Add(fqReq("b", "now"))
	if item := <-got; item != fqReq("b", "now") {
		t.Fatalf("Get = %v, want b/now", item)
	}
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	clk.Step(time.Nanosecond) // The timer goroutine wakes the Get.
	if item := <-got; item != fqReq("a", "later") {
		t.Errorf("Get = %v, want a/later", item)
	}
}

func TestFairQueueLeavesNoGoroutine(t *testing.T) {
	baseline := goleak.IgnoreCurrent()
	provider, err := NewMetricsProvider(prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("NewMetricsProvider: %v", err)
	}
	q := New("leak-test", requestCluster, Options[Request]{MetricsProvider: provider})
	q.AddAfter(fqReq("a", "later"), time.Hour)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { q.Get() })
	}
	q.ShutDown()
	q.ShutDown()
	wg.Wait()
	if err := goleak.Find(baseline); err != nil {
		t.Error(err)
	}
}
