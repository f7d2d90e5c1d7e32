package propagation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// kindRetry is how long a kind that could not be watched (missing,
// forbidden) is reported as such before it is tried again.
const kindRetry = 30 * time.Second

// kindError is why a kind cannot be read in one cluster: the reason of a
// member's result, or of the Propagation's conditions for the hub.
type kindError struct {
	reason  string
	message string
}

func (e *kindError) Error() string { return e.message }

// watchedKinds starts at most one informer per kind in a cache, checked
// first: a kind the cluster lacks, a cluster-scoped kind or one the
// manager may not list is refused, and remembered for kindRetry, so that
// neither a reconcile per member nor a failing informer hammers the API
// server.
type watchedKinds struct {
	cluster string // "the hub" or "member NAME", for messages
	cache   cache.Cache
	reader  client.Reader
	mapper  meta.RESTMapper
	// selector is the cache's label selector, which the check lists with.
	selector labels.Selector
	// namespace, when set, is the only namespace the cache holds.
	namespace string
	onEvent   func(obj client.Object)

	// running closes once the cache has started: until then it reads
	// nothing.
	running chan struct{}

	mu      sync.Mutex
	started map[schema.GroupVersionKind]bool
	refused map[schema.GroupVersionKind]refusedKind
}

// run starts the cache until ctx ends, and closes running once it has.
func (w *watchedKinds) run(ctx context.Context) {
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
// synced.
func (w *watchedKinds) watch(ctx context.Context, gvk schema.GroupVersionKind) error {
	select {
	case <-w.running:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	if w.started[gvk] {
		w.mu.Unlock()
		return nil
	}
	if r, ok := w.refused[gvk]; ok && time.Now().Before(r.until) {
		w.mu.Unlock()
		return r.err
	}
	w.mu.Unlock()

	if err := w.check(ctx, gvk); err != nil {
		if kerr, ok := errors.AsType[*kindError](err); ok {
			w.mu.Lock()
			w.refused[gvk] = refusedKind{err: kerr, until: time.Now().Add(kindRetry)}
			w.mu.Unlock()
		}
		return err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	informer, err := w.cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watching %s in %s: %w", gvk.Kind, w.cluster, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started[gvk] {
		return nil
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.notify(obj) },
		UpdateFunc: func(_, obj any) { w.notify(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			w.notify(obj)
		},
	}); err != nil {
		return fmt.Errorf("watching %s in %s: %w", gvk.Kind, w.cluster, err)
	}
	w.started[gvk] = true
	delete(w.refused, gvk)
	return nil
}

// watched lists the kinds whose informers run.
func (w *watchedKinds) watched() []schema.GroupVersionKind {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.started))
}

func (w *watchedKinds) notify(obj any) {
	if o, ok := obj.(client.Object); ok {
		w.onEvent(o)
	}
}

// check refuses a kind the cluster lacks, a cluster-scoped kind and one
// the manager may not list where the cache would.
func (w *watchedKinds) check(ctx context.Context, gvk schema.GroupVersionKind) error {
	mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return &kindError{reason: fleetv1alpha1.ReasonKindNotFound, message: fmt.Sprintf("%s has no kind %s in %s (is its CRD installed?)", w.cluster, gvk.Kind, gvk.GroupVersion())}
	}
	if err != nil {
		return fmt.Errorf("finding kind %s in %s: %w", gvk.Kind, w.cluster, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		return &kindError{reason: fleetv1alpha1.ReasonClusterScoped, message: fmt.Sprintf("%s is cluster-scoped: a Propagation copies only objects of its own namespace", gvk.Kind)}
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.Limit(1), client.MatchingLabelsSelector{Selector: w.selector}}
	where := "in any namespace"
	if w.namespace != "" {
		opts, where = append(opts, client.InNamespace(w.namespace)), "in namespace "+w.namespace
	}
	if err := w.reader.List(ctx, list, opts...); apierrors.IsForbidden(err) {
		return &kindError{reason: fleetv1alpha1.ReasonForbidden, message: fmt.Sprintf("%s forbids the manager to list %s %s", w.cluster, resourceName(mapping.Resource.GroupResource(), gvk.Kind), where)}
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

// list lists the cached objects of gvk in namespace that match selector.
func (w *watchedKinds) list(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]unstructured.Unstructured, error) {
	if err := w.watch(ctx, gvk); err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := w.cache.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// hubObjects are the hub objects Propagations select, cached per
// namespace: a Propagation reads only its own namespace, so the manager
// needs read access only where Propagations are (a RoleBinding per
// namespace is enough, as for Secrets). The fleet namespace is never
// read for a Propagation.
type hubObjects struct {
	fleet  string // the fleet namespace
	config *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	reader client.Reader
	log    logr.Logger
	// changed is told of every event of a hub object.
	changed func(namespace string, gvk schema.GroupVersionKind)

	// ctx bounds the caches: the leader's hub engagement.
	mu         sync.Mutex
	ctx        context.Context
	namespaces map[string]*watchedKinds
}

// start makes the caches live under ctx, the hub's engagement; the caches
// of an earlier engagement are dropped.
func (h *hubObjects) start(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctx, h.namespaces = ctx, map[string]*watchedKinds{}
}

// list returns the hub objects of namespace that sel selects.
func (h *hubObjects) list(ctx context.Context, namespace string, sel fleetv1alpha1.ResourceSelector) ([]unstructured.Unstructured, error) {
	gvk, err := resourceKind(sel)
	if err != nil {
		return nil, err
	}
	if namespace == h.fleet {
		return nil, &kindError{reason: fleetv1alpha1.ReasonRefused, message: fmt.Sprintf("%s of namespace %s is refused: %s", gvk.Kind, namespace, ruleFleetNamespace)}
	}
	w, err := h.inNamespace(namespace)
	if err != nil {
		return nil, err
	}
	selector := labels.Everything()
	if sel.Selector != nil {
		if selector, err = metaLabelSelector(sel); err != nil {
			return nil, err
		}
	}
	objs, err := w.list(ctx, gvk, namespace, selector)
	if err != nil || sel.Name == "" {
		return objs, err
	}
	for _, o := range objs {
		if o.GetName() == sel.Name {
			return []unstructured.Unstructured{o}, nil
		}
	}
	return nil, nil
}

func (h *hubObjects) inNamespace(namespace string) (*watchedKinds, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || h.ctx.Err() != nil {
		return nil, errors.New("the hub is not engaged")
	}
	if w, ok := h.namespaces[namespace]; ok {
		return w, nil
	}
	c, err := cache.New(h.config, cache.Options{
		Scheme: h.scheme, Mapper: h.mapper,
		DefaultNamespaces:        map[string]cache.Config{namespace: {}},
		DefaultWatchErrorHandler: quietWatchErrors(h.log),
	})
	if err != nil {
		return nil, fmt.Errorf("building the hub cache of namespace %s: %w", namespace, err)
	}
	w := &watchedKinds{
		cluster: "the hub", cache: c, reader: h.reader, mapper: h.mapper, selector: labels.Everything(), namespace: namespace,
		running: make(chan struct{}), started: map[schema.GroupVersionKind]bool{}, refused: map[schema.GroupVersionKind]refusedKind{},
		onEvent: func(obj client.Object) {
			h.changed(namespace, obj.GetObjectKind().GroupVersionKind())
		},
	}
	w.run(h.ctx)
	h.namespaces[namespace] = w
	return w, nil
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

// memberCopies are the copies in one member: a cache that holds only
// objects labelled as copies of this fleet, and clients whose user agent
// names the controller.
type memberCopies struct {
	*watchedKinds
	name   string
	client client.Client
	reader client.Reader

	// replayMu is held while the member's owed removals are carried out:
	// its other requests wait. replayed is set once they were, and
	// cleared when the member is Ready again.
	replayMu sync.Mutex
	replayed bool
}

// replayAgain makes the member's next request carry out its owed removals
// first.
func (mc *memberCopies) replayAgain() {
	mc.replayMu.Lock()
	defer mc.replayMu.Unlock()
	mc.replayed = false
}

// copyCaches is the fleet controller's source in every member: started
// as the controller engages a member, it builds the member's copy cache,
// watches every kind Propagations copy, and turns each event of a copy
// into a request for its Propagation in that member.
type copyCaches struct {
	fleet     string
	userAgent string
	scheme    *runtime.Scheme
	log       logr.Logger
	// kinds lists the kinds Propagations copy now, and those of the
	// copies a member owes removing; propagations lists the Propagations
	// and those whose copies it owes removing.
	kinds        func(ctx context.Context, member string) []schema.GroupVersionKind
	propagations func(ctx context.Context, member string) []types.NamespacedName
	// engaged is told of a member whose copy cache watches its kinds.
	engaged func(ctx context.Context, mc *memberCopies)

	mu      sync.Mutex
	members map[string]*memberCopies
}

var _ engage.Source = (*copyCaches)(nil)

func (c *copyCaches) String() string { return "propagated copies" }

// selector selects the copies of the fleet.
func (c *copyCaches) selector() labels.Selector {
	fleetReq, err := labels.NewRequirement(fleetv1alpha1.FleetLabel, selection.Equals, []string{c.fleet})
	if err != nil {
		panic(err) // the fleet's namespace is a valid label value
	}
	propReq, err := labels.NewRequirement(fleetv1alpha1.PropagationLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*fleetReq, *propReq)
}

func (c *copyCaches) Start(ctx context.Context, clusterName string, cl crcluster.Cluster, q engage.Queue) (<-chan struct{}, error) {
	base := cl.GetHTTPClient()
	httpClient := &http.Client{Transport: transport.NewUserAgentRoundTripper(c.userAgent, base.Transport), Timeout: base.Timeout, Jar: base.Jar}
	selector := c.selector()
	ca, err := cache.New(cl.GetConfig(), cache.Options{
		HTTPClient: httpClient, Scheme: c.scheme, Mapper: cl.GetRESTMapper(),
		DefaultLabelSelector: selector, ReaderFailOnMissingInformer: true,
		DefaultWatchErrorHandler: quietWatchErrors(c.log.WithValues("cluster", clusterName)),
	})
	if err != nil {
		return nil, err
	}
	writer, err := client.New(cl.GetConfig(), client.Options{HTTPClient: httpClient, Scheme: c.scheme, Mapper: cl.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	mc := &memberCopies{
		name: clusterName, client: writer, reader: writer,
		watchedKinds: &watchedKinds{
			cluster: "member " + clusterName, cache: ca, reader: writer, mapper: cl.GetRESTMapper(), selector: selector,
			running: make(chan struct{}), started: map[schema.GroupVersionKind]bool{}, refused: map[schema.GroupVersionKind]refusedKind{},
			onEvent: func(obj client.Object) {
				if name := obj.GetLabels()[fleetv1alpha1.PropagationLabel]; name != "" {
					q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
				}
			},
		},
	}
	mc.run(ctx)
	c.mu.Lock()
	c.members[clusterName] = mc
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.members[clusterName] == mc {
			delete(c.members, clusterName)
		}
	})
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		for _, gvk := range c.kinds(ctx, clusterName) {
			if err := mc.watch(ctx, gvk); err != nil && ctx.Err() == nil {
				c.log.V(1).Info("Not watching copies of a kind", "cluster", clusterName, "kind", gvk.Kind, "reason", err.Error())
			}
		}
		c.engaged(ctx, mc)
		// A member that is engaged, or comes back, is asked about every
		// Propagation and what it owes: the requests made before it was
		// engaged, or queued when it left, were dropped.
		for _, key := range c.propagations(ctx, clusterName) {
			q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: key})
		}
	}()
	return synced, nil
}

// get returns the copies of an engaged member, or nil.
func (c *copyCaches) get(clusterName string) *memberCopies {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[clusterName]
}
