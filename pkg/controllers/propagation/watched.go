package propagation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// kindRetry is how long a kind that could not be watched (missing,
// forbidden) is reported as such before it is tried again.
const kindRetry = 30 * time.Second

// forbiddenKindRetry is kindRetry for a kind the member forbids the
// manager to list: shorter, so that a grant is used at the next run (see
// forbiddenRetry), while one list still answers the runs of every
// Propagation of the namespace in a burst.
const forbiddenKindRetry = 2 * time.Second

// syncTimeout bounds how long a request waits for an informer to list its
// kind: a cluster that does not answer (frozen, cut off) holds a worker no
// longer. The informer goes on listing; the request fails and is tried
// again.
const syncTimeout = 30 * time.Second

// kindError is why a kind cannot be read in one cluster: the reason of a
// member's result, or of the Propagation's conditions for the hub.
type kindError struct {
	reason  string
	message string
}

func (e *kindError) Error() string { return e.message }

// ErrorReason makes e a content.ReasonedError.
func (e *kindError) ErrorReason() string { return e.reason }

// watchedKinds starts at most one informer per kind in a cache, checked
// first: a kind the cluster lacks, a cluster-scoped kind or one the
// manager may not list is refused, and remembered for kindRetry, so that
// neither a reconcile per member nor a failing informer hammers the API
// server.
type watchedKinds struct {
	cluster string // "the hub" or "member NAME", for messages
	// grantHint says how to grant what is forbidden: for a member, the
	// command that does (see apply.GrantHint); "" for the hub.
	grantHint string
	cache     cache.Cache
	reader    client.Reader
	mapper    meta.RESTMapper
	// selector is the cache's label selector, which the check lists with.
	selector labels.Selector
	// namespace is the only namespace the cache holds; "" for the cache
	// of cluster-scoped objects.
	namespace string
	// onEvent is told of each event of a cached object: its state before
	// (nil for a create) and after (the last known state for a delete).
	onEvent func(old, obj client.Object)
	// echo, if set, says whether an object a create or update event
	// shows (old before it, nil for a create) is what the manager's own
	// write made, or is held until a write answers: such an event is not
	// told, but by deliver, if it is held and proves no echo. A delete
	// always is.
	echo func(old, obj client.Object, deliver func()) bool
	// onSynced, if set, is told of each informer started once it has
	// synced, under a context that ends when the informer stops.
	onSynced func(ctx context.Context, gvk schema.GroupVersionKind)
	// onInformers, if set, is told after an informer started (started)
	// or stopped.
	onInformers func(started bool)

	// running closes once the cache has started: until then it reads
	// nothing. ctx is the cache's: stopped closes when it ends.
	running chan struct{}
	ctx     context.Context
	stopped <-chan struct{}

	// mu guards informers, the kinds whose informers were started, and
	// refused; both are made when first written; and removals, which
	// counts the informers stopped. It is never held across a request.
	mu        sync.Mutex
	informers map[schema.GroupVersionKind]*kindInformer
	refused   map[schema.GroupVersionKind]refusedKind
	removals  int
}

// kindInformer is the informer of one kind in a cache, as the cache's
// user sees it.
type kindInformer struct {
	handler toolscache.ResourceEventHandlerRegistration
	// used is when a request last asked for the kind.
	used time.Time
	// stop ends what was started for the informer (onSynced).
	stop context.CancelFunc
}

// run starts the cache until ctx ends, and closes running once it has.
func (w *watchedKinds) run(ctx context.Context) {
	w.ctx, w.stopped = ctx, ctx.Done()
	go w.cache.Start(ctx) //nolint:errcheck // it fails only when started twice
	go func() {
		if w.cache.WaitForCacheSync(ctx) {
			close(w.running)
		}
	}()
}

type refusedKind struct {
	err   *kindError
	until time.Time
}

// watch makes sure the cache holds gvk, and returns once its informer has
// synced, or fails after syncTimeout.
func (w *watchedKinds) watch(ctx context.Context, gvk schema.GroupVersionKind) error {
	select {
	case <-w.running:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	var handler toolscache.ResourceEventHandlerRegistration
	ki, started := w.informers[gvk]
	if started {
		handler, ki.used = ki.handler, time.Now()
	}
	r, refused := w.refused[gvk]
	w.mu.Unlock()
	if !started {
		if refused && time.Now().Before(r.until) {
			return r.err
		}
		var err error
		if handler, err = w.start(ctx, gvk); err != nil {
			return err
		}
	}
	if handler.HasSynced() {
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !toolscache.WaitForCacheSync(waitCtx.Done(), handler.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s has not listed %s within %s", w.cluster, gvk.Kind, syncTimeout)
	}
	return nil
}

// start checks gvk, then starts its informer, without waiting for it to
// sync, and adds the event handler once.
func (w *watchedKinds) start(ctx context.Context, gvk schema.GroupVersionKind) (toolscache.ResourceEventHandlerRegistration, error) {
	if err := w.check(ctx, gvk); err != nil {
		if kerr, ok := errors.AsType[*kindError](err); ok {
			w.mu.Lock()
			if w.refused == nil {
				w.refused = map[schema.GroupVersionKind]refusedKind{}
			}
			retry := kindRetry
			if kerr.reason == fleetv1alpha1.ReasonForbidden {
				retry = forbiddenKindRetry
			}
			w.refused[gvk] = refusedKind{err: kerr, until: time.Now().Add(retry)}
			w.mu.Unlock()
		}
		return nil, err
	}
	// A stopped cache still adds an informer, which never starts: its
	// cache of named namespaces would wait for it to list forever.
	select {
	case <-w.stopped:
		return nil, fmt.Errorf("the cache of %s has stopped", w.cluster)
	default:
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	for {
		w.mu.Lock()
		removals := w.removals
		w.mu.Unlock()
		// The cache holds one informer per kind: a second call returns it.
		informer, err := w.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("watching %s in %s: %w", gvk.Kind, w.cluster, err)
		}
		handler, added, err := w.register(gvk, informer, removals)
		if added && w.onInformers != nil {
			w.onInformers(true)
		}
		if handler != nil || err != nil {
			return handler, err
		}
	}
}

// register returns the event handler of gvk's informer, added to
// informer once (added), or nil, when an informer was stopped since
// removals were counted: informer may be that one, and the caller asks
// the cache again.
func (w *watchedKinds) register(gvk schema.GroupVersionKind, informer cache.Informer, removals int) (_ toolscache.ResourceEventHandlerRegistration, added bool, _ error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ki, ok := w.informers[gvk]; ok {
		ki.used = time.Now()
		return ki.handler, false, nil
	}
	if w.removals != removals {
		return nil, false, nil
	}
	handler, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.notifyUnlessEcho(nil, obj) },
		UpdateFunc: func(old, obj any) { w.notifyUnlessEcho(old, obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			w.notify(nil, obj)
		},
	})
	if err != nil {
		return nil, false, fmt.Errorf("watching %s in %s: %w", gvk.Kind, w.cluster, err)
	}
	if w.informers == nil {
		w.informers = map[schema.GroupVersionKind]*kindInformer{}
	}
	ctx, stop := context.WithCancel(w.ctx)
	w.informers[gvk] = &kindInformer{handler: handler, used: time.Now(), stop: stop}
	delete(w.refused, gvk)
	if w.onSynced != nil {
		go func() {
			if toolscache.WaitForCacheSync(ctx.Done(), handler.HasSynced) {
				w.onSynced(ctx, gvk)
			}
		}()
	}
	return handler, true, nil
}

// unwatch stops the informer of gvk unless a request asked for the kind
// since then, and reports whether it did. A later watch starts it again.
func (w *watchedKinds) unwatch(gvk schema.GroupVersionKind, since time.Time) bool {
	if !w.removeInformer(gvk, since) {
		return false
	}
	if w.onInformers != nil {
		w.onInformers(false)
	}
	return true
}

func (w *watchedKinds) removeInformer(gvk schema.GroupVersionKind, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ki, ok := w.informers[gvk]
	if !ok || !ki.used.Before(since) {
		return false
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	// Under mu, counted in removals: a start that got this informer from
	// the cache meanwhile asks for a new one (see register).
	if err := w.cache.RemoveInformer(w.ctx, obj); err != nil {
		return false
	}
	ki.stop()
	delete(w.informers, gvk)
	w.removals++
	return true
}

// started lists the kinds whose informers were started.
func (w *watchedKinds) started() []schema.GroupVersionKind {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.informers))
}

// served forgets that gk was missing: its CRD is Established now, and
// the kind is checked again at its next watch.
func (w *watchedKinds) served(gk schema.GroupKind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for gvk, r := range w.refused {
		if gvk.GroupKind() == gk && r.err.reason == fleetv1alpha1.ReasonKindNotFound {
			delete(w.refused, gvk)
		}
	}
}

// watched lists the kinds whose informers have synced.
func (w *watchedKinds) watched() []schema.GroupVersionKind {
	w.mu.Lock()
	defer w.mu.Unlock()
	var kinds []schema.GroupVersionKind
	for gvk, ki := range w.informers {
		if ki.handler.HasSynced() {
			kinds = append(kinds, gvk)
		}
	}
	return kinds
}

// notifyUnlessEcho notifies of a create or update event, unless it
// shows what the manager's own write made (see echo).
func (w *watchedKinds) notifyUnlessEcho(old, obj any) {
	before, _ := old.(client.Object)
	if o, ok := obj.(client.Object); ok && w.echo != nil && w.echo(before, o, func() { w.notify(old, obj) }) {
		return
	}
	w.notify(old, obj)
}

func (w *watchedKinds) notify(old, obj any) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	before, _ := old.(client.Object)
	w.onEvent(before, o)
}

// check refuses a kind the cluster lacks, one the manager may not list
// where the cache would, and one of the other scope: a cache of a
// namespace holds namespaced kinds, the cache of no namespace (of
// ClusterPropagations) cluster-scoped ones.
func (w *watchedKinds) check(ctx context.Context, gvk schema.GroupVersionKind) error {
	mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return &kindError{reason: fleetv1alpha1.ReasonKindNotFound, message: fmt.Sprintf("%s has no kind %s in %s (is its CRD installed?)", w.cluster, gvk.Kind, gvk.GroupVersion())}
	}
	if err != nil {
		return fmt.Errorf("finding kind %s in %s: %w", gvk.Kind, w.cluster, err)
	}
	switch clusterScoped := mapping.Scope.Name() == meta.RESTScopeNameRoot; {
	case clusterScoped && w.namespace != "":
		return &kindError{reason: fleetv1alpha1.ReasonClusterScoped, message: fmt.Sprintf("%s is cluster-scoped: a Propagation copies only objects of its own namespace (a ClusterPropagation copies it)", gvk.Kind)}
	case !clusterScoped && w.namespace == "":
		return &kindError{reason: fleetv1alpha1.ReasonNamespacedKind, message: fmt.Sprintf("%s is namespaced: a ClusterPropagation copies only cluster-scoped objects (a Propagation of its namespace, or an Envelope, copies it)", gvk.Kind)}
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.Limit(1), client.MatchingLabelsSelector{Selector: w.selector}}
	where := "in any namespace"
	if w.namespace != "" {
		opts, where = append(opts, client.InNamespace(w.namespace)), "in namespace "+w.namespace
	}
	if err := w.reader.List(ctx, list, opts...); apierrors.IsForbidden(err) {
		return &kindError{reason: fleetv1alpha1.ReasonForbidden, message: fmt.Sprintf("%s forbids the manager to list %s %s%s", w.cluster, resourceName(mapping.Resource.GroupResource(), gvk.Kind), where, w.grantHint)}
	} else if err != nil {
		return fmt.Errorf("listing %s in %s: %w", mapping.Resource.GroupResource(), w.cluster, err)
	}
	return nil
}

// resourceName is gr's name, if it is one (a DNS subdomain, as every
// resource's is), else kind: a member's discovery is its own words.
func resourceName(gr schema.GroupResource, kind string) string {
	if name := gr.String(); len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return kind
}

// list lists the cached objects of gvk in namespace that match selector,
// with opts (client.UnsafeDisableDeepCopy, say).
func (w *watchedKinds) list(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	if err := w.watch(ctx, gvk); err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts = append(opts, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector})
	if err := w.cache.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// quietWatchErrors logs a failed list or watch of a copy or hub object
// cache at V(1): the informer retries, a member that is down is reported
// by its state, and a kind that may not be read was refused before its
// informer started.
func quietWatchErrors(log logr.Logger) toolscache.WatchErrorHandlerWithContext {
	return func(_ context.Context, r *toolscache.Reflector, err error) {
		log.V(1).Info("Watch failed; retrying", "reflector", r.TypeDescription(), "error", err.Error())
	}
}
