package registry

import (
	"context"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Event is a change of one cluster as one subscriber sees it: from the
// snapshot it was last given to the current one. Changes made while the
// subscriber was busy are folded into one event, so an event always ends
// at the current truth.
type Event struct {
	Name string
	// Old is the snapshot this subscriber was last given, nil if none.
	Old *Cluster
	// New is the current snapshot, nil once the name is no longer
	// registered.
	New *Cluster
}

// Registered reports whether the subscriber sees the cluster for the first
// time.
func (e Event) Registered() bool { return e.Old == nil && e.New != nil }

// Removed reports whether the cluster is no longer registered.
func (e Event) Removed() bool { return e.New == nil }

// Refused reports whether the cluster is refused now and was not before,
// or was for another reason.
func (e Event) Refused() bool {
	return e.New != nil && e.New.Refusal != nil && (e.Old == nil || e.Old.Refusal == nil || *e.Old.Refusal != *e.New.Refusal)
}

// LabelsChanged reports whether the cluster's labels changed.
func (e Event) LabelsChanged() bool {
	return e.Old != nil && e.New != nil && !maps.Equal(e.Old.Labels, e.New.Labels)
}

// StateChanged reports whether the member's state changed.
func (e Event) StateChanged() bool { return e.Old != nil && e.New != nil && e.Old.State != e.New.State }

// Subscription is one subscriber's stream of events. Each cluster's events
// come one at a time: the next event of a cluster is handed out only after
// Done for the previous one, while events of different clusters may be
// handled in parallel.
type Subscription struct {
	r     *Registry
	queue workqueue.TypedInterface[string]

	// mu guards seen: the snapshot last handed out per cluster.
	mu   sync.Mutex
	seen map[string]*Cluster
}

func newSubscription(r *Registry) *Subscription {
	return &Subscription{r: r, queue: workqueue.NewTyped[string](), seen: map[string]*Cluster{}}
}

// Next blocks until a cluster changed and returns its event, or returns
// false once the subscription ended. Call Done with the event once it is
// handled.
func (s *Subscription) Next() (Event, bool) {
	name, shutdown := s.queue.Get()
	if shutdown {
		return Event{}, false
	}
	current, _ := s.r.Get(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := Event{Name: name, Old: s.seen[name], New: current}
	if current == nil {
		delete(s.seen, name)
	} else {
		s.seen[name] = current
	}
	return e, true
}

// Done marks e handled; a change that came meanwhile is handed out next.
func (s *Subscription) Done(e Event) { s.queue.Done(e.Name) }

// Run hands each event to handle from workers goroutines until ctx ends,
// then returns once they have.
func (s *Subscription) Run(ctx context.Context, workers int, handle func(ctx context.Context, e Event)) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				e, ok := s.Next()
				if !ok {
					return
				}
				handle(ctx, e)
				s.Done(e)
			}
		})
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
}

// Source returns a controller-runtime source that enqueues a request
// named after each cluster that changes, and after every cluster when it
// starts: a controller whose reconciler reads the registry then sees every
// change, including those made before it started.
func (r *Registry) Source() source.Source { return registrySource{r} }

type registrySource struct{ r *Registry }

func (s registrySource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := s.r.Subscribe(ctx)
	go sub.Run(ctx, 1, func(_ context.Context, e Event) {
		q.Add(reconcile.Request{NamespacedName: nameKey(e.Name)})
	})
	return nil
}

func (registrySource) String() string { return "registered clusters" }

func nameKey(name string) types.NamespacedName { return types.NamespacedName{Name: name} }
