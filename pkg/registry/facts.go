package registry

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Facts are one kind of fact about registered clusters, kept by name and
// published by its one owner: the removals a member owes, by the
// Propagation controller; what its credential is, by the token renewal.
// Readers Get a cluster's current fact and watch Source, which names each
// cluster whose fact changed. Each kind is kept apart from the registry
// and from the others, so that a change wakes only the readers of its
// kind.
//
// The methods are safe for concurrent use. A Facts never calls out while
// holding its lock.
type Facts[T any] struct {
	equal func(a, b T) bool

	// mu guards everything below.
	mu     sync.Mutex
	values map[string]T
	queues map[workqueue.TypedRateLimitingInterface[reconcile.Request]]struct{}
}

// NewFacts returns an empty Facts whose values equal tells apart: a value
// published again unchanged wakes no reader.
func NewFacts[T any](equal func(a, b T) bool) *Facts[T] {
	return &Facts[T]{equal: equal, values: map[string]T{}, queues: map[workqueue.TypedRateLimitingInterface[reconcile.Request]]struct{}{}}
}

// Publish makes v cluster name's fact.
func (f *Facts[T]) Publish(name string, v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.values[name]; ok && f.equal(old, v) {
		return
	}
	f.values[name] = v
	f.lockedNotify(name)
}

// Forget removes cluster name's fact.
func (f *Facts[T]) Forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[name]; ok {
		delete(f.values, name)
		f.lockedNotify(name)
	}
}

// Get returns cluster name's fact, and false if none is published.
func (f *Facts[T]) Get(name string) (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	return v, ok
}

func (f *Facts[T]) lockedNotify(name string) {
	for q := range f.queues {
		q.Add(reconcile.Request{NamespacedName: nameKey(name)})
	}
}

// Source returns a controller-runtime source that enqueues a request named
// after each cluster whose fact changes, and after every cluster with a
// fact when it starts, like Registry.Source.
func (f *Facts[T]) Source() source.Source { return factsSource[T]{f} }

type factsSource[T any] struct{ f *Facts[T] }

func (s factsSource[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.queues[q] = struct{}{}
	for name := range s.f.values {
		q.Add(reconcile.Request{NamespacedName: nameKey(name)})
	}
	context.AfterFunc(ctx, func() {
		s.f.mu.Lock()
		delete(s.f.queues, q)
		s.f.mu.Unlock()
	})
	return nil
}

func (factsSource[T]) String() string { return "published facts" }
