package engage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Queue is the shared queue of one fleet controller.
type Queue = workqueue.TypedRateLimitingInterface[Request]

// HandlerFunc builds the event handler for one cluster. Handlers that need
// the cluster, such as owner handlers, which need its REST mapper, are
// built anew for each engagement.
type HandlerFunc func(cl cluster.Cluster) handler.EventHandler

// RequestHandler is an event handler that makes fleet requests itself,
// naming their clusters, such as one that maps a hub object to requests
// for members.
type RequestHandler = handler.TypedEventHandler[client.Object, Request]

// Source is a multi-cluster source, started once for each cluster a
// controller engages.
type Source interface {
	// Start sends the source's events in cl, named clusterName, to q as
	// requests until ctx ends, and then stops everything it started for
	// cl. The returned channel closes once the source has caught up with
	// cl, for example once its informers have listed.
	Start(ctx context.Context, clusterName string, cl cluster.Cluster, q Queue) (synced <-chan struct{}, err error)
	fmt.Stringer
}

var _ Source = (*Kind)(nil)

// Kind is a multi-cluster source of one kind. Started for a cluster, it
// registers its handler on that cluster's informer, tags every request the
// handler makes with the cluster's name, and removes the registration when
// the engagement ends. Other engagements of the same informer are left
// alone, so one controller can drop a cluster that others keep.
type Kind struct {
	obj        client.Object
	newHandler func(clusterName string, cl cluster.Cluster) RequestHandler
	predicates []predicate.Predicate
}

// NewKind returns a source of obj's kind whose events pass predicates and
// go to the handler newHandler builds for each cluster; the requests it
// makes are tagged with the cluster's name.
func NewKind(obj client.Object, newHandler HandlerFunc, predicates ...predicate.Predicate) *Kind {
	return &Kind{obj: obj, predicates: predicates, newHandler: func(clusterName string, cl cluster.Cluster) RequestHandler {
		return tagged{clusterName: clusterName, handler: newHandler(cl)}
	}}
}

// NewRequestKind returns a source of obj's kind whose events pass
// predicates and go to the handler newHandler builds for each cluster,
// which names the cluster of each request itself.
func NewRequestKind(obj client.Object, newHandler func(clusterName string) RequestHandler, predicates ...predicate.Predicate) *Kind {
	return &Kind{obj: obj, predicates: predicates, newHandler: func(clusterName string, _ cluster.Cluster) RequestHandler {
		return newHandler(clusterName)
	}}
}

// String names the kind for logs.
func (k *Kind) String() string { return fmt.Sprintf("kind source: %T", k.obj) }

// Start registers the handler on cl's informer for the kind, under ctx,
// without waiting for the informer to sync. Events go to q as requests
// tagged with clusterName until ctx ends, and then the registration is
// removed. The returned channel closes once the handler has seen the
// informer's initial list.
func (k *Kind) Start(ctx context.Context, clusterName string, cl cluster.Cluster, q Queue) (synced <-chan struct{}, err error) {
	informer, err := cl.GetCache().GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("getting informer for %T: %w", k.obj, err)
	}
	log := logf.FromContext(ctx).WithValues("cluster", clusterName)
	h := &eventHandler{
		ctx:        logf.IntoContext(ctx, log),
		handler:    k.newHandler(clusterName, cl),
		queue:      q,
		predicates: k.predicates,
	}
	reg, err := informer.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("adding event handler for %T: %w", k.obj, err)
	}
	context.AfterFunc(ctx, func() {
		if err := informer.RemoveEventHandler(reg); err != nil {
			log.Error(err, "Removing event handler", "source", k.String())
		}
	})
	return reg.HasSyncedChecker().Done(), nil
}

// eventHandler turns informer notifications into handler calls, dropping
// them once its context has ended.
type eventHandler struct {
	ctx        context.Context
	handler    RequestHandler
	queue      Queue
	predicates []predicate.Predicate
}

var _ toolscache.ResourceEventHandler = (*eventHandler)(nil)

func (h *eventHandler) OnAdd(obj any, isInInitialList bool) {
	o, ok := obj.(client.Object)
	if h.ctx.Err() != nil || !ok {
		return
	}
	evt := event.CreateEvent{Object: o, IsInInitialList: isInInitialList}
	for _, p := range h.predicates {
		if !p.Create(evt) {
			return
		}
	}
	h.handler.Create(h.ctx, evt, h.queue)
}

func (h *eventHandler) OnUpdate(oldObj, newObj any) {
	o, okOld := oldObj.(client.Object)
	n, okNew := newObj.(client.Object)
	if h.ctx.Err() != nil || !okOld || !okNew {
		return
	}
	evt := event.UpdateEvent{ObjectOld: o, ObjectNew: n}
	for _, p := range h.predicates {
		if !p.Update(evt) {
			return
		}
	}
	h.handler.Update(h.ctx, evt, h.queue)
}

func (h *eventHandler) OnDelete(obj any) {
	if h.ctx.Err() != nil {
		return
	}
	unknown := false
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, unknown = tombstone.Obj, true
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	evt := event.DeleteEvent{Object: o, DeleteStateUnknown: unknown}
	for _, p := range h.predicates {
		if !p.Delete(evt) {
			return
		}
	}
	h.handler.Delete(h.ctx, evt, h.queue)
}

// tagged runs a controller-runtime handler against a view of the queue
// that tags its requests with one cluster's name.
type tagged struct {
	clusterName string
	handler     handler.EventHandler
}

func (t tagged) Create(ctx context.Context, e event.CreateEvent, q Queue) {
	t.handler.Create(ctx, e, &clusterQueue{clusterName: t.clusterName, queue: q})
}

func (t tagged) Update(ctx context.Context, e event.UpdateEvent, q Queue) {
	t.handler.Update(ctx, e, &clusterQueue{clusterName: t.clusterName, queue: q})
}

func (t tagged) Delete(ctx context.Context, e event.DeleteEvent, q Queue) {
	t.handler.Delete(ctx, e, &clusterQueue{clusterName: t.clusterName, queue: q})
}

func (t tagged) Generic(ctx context.Context, e event.GenericEvent, q Queue) {
	t.handler.Generic(ctx, e, &clusterQueue{clusterName: t.clusterName, queue: q})
}

// Replay hands every object of the kind that cl holds now to the source's
// handler, as events of the informer's initial list, and passes on to q
// only the requests for cluster target. It returns once every object was
// handed over, or when ctx ends. A cluster that joins a controller is so
// given the requests that objects elsewhere, such as hub objects mapped to
// every member, made before it joined.
func (k *Kind) Replay(ctx context.Context, clusterName string, cl cluster.Cluster, q Queue, target string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced, err := k.Start(ctx, clusterName, cl, &targetQueue{Queue: q, target: target})
	if err != nil {
		return err
	}
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// targetQueue passes on only the requests for one cluster.
type targetQueue struct {
	Queue
	target string
}

var _ priorityqueue.PriorityQueue[Request] = (*targetQueue)(nil)

func (q *targetQueue) Add(r Request) {
	if r.ClusterName == q.target {
		q.Queue.Add(r)
	}
}

func (q *targetQueue) AddAfter(r Request, d time.Duration) {
	if r.ClusterName == q.target {
		q.Queue.AddAfter(r, d)
	}
}

func (q *targetQueue) AddRateLimited(r Request) {
	if r.ClusterName == q.target {
		q.Queue.AddRateLimited(r)
	}
}

func (q *targetQueue) AddWithOpts(o priorityqueue.AddOpts, rs ...Request) {
	addWithOpts(q.Queue, o, slices.DeleteFunc(slices.Clone(rs), func(r Request) bool { return r.ClusterName != q.target })...)
}

// GetWithPriority reports a shut-down queue: the view is write-only.
func (q *targetQueue) GetWithPriority() (Request, int, bool) { return Request{}, 0, true }
