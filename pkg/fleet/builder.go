package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
)

// Builder builds a fleet controller: one shared queue, fed by the watched
// kinds in every cluster the controller watches, and drained by the
// workers of one controller-runtime controller.
type Builder struct {
	mgr        *Manager
	name       string
	forObj     client.Object
	watches    []watch
	predicates []predicate.Predicate
	clusters   Clusters
	filter     ClusterFilter
	options    ControllerOptions
	rawSources []source.TypedSource[Request]
	logger     func(*Request) logr.Logger
	err        error
}

// Controller is a fleet controller as Build returns it: a
// controller-runtime controller of fleet requests, to which sources such
// as Channel can be added while it runs.
type Controller = crcontroller.TypedController[Request]

// ControllerOptions are a fleet controller's options: controller-runtime's,
// and those of its queue, which is fair across clusters.
type ControllerOptions struct {
	crcontroller.TypedOptions[Request]

	// MaxConcurrentReconcilesPerCluster caps the reconciles of one cluster
	// in flight, so that one slow member cannot hold every worker; its
	// other requests wait in the queue. Defaults to 0: no cap.
	MaxConcurrentReconcilesPerCluster int
}

// watch is one watch of a Builder: its source is made once the builder's
// own predicates are known.
type watch struct {
	newSource  func(predicates []predicate.Predicate) engage.Source
	fansOut    bool
	predicates []predicate.Predicate
	// clusters overrides the builder's WatchClusters when set.
	clusters *Clusters
}

// WatchOption adjusts one watch of a Builder.
type WatchOption func(*watch)

// WithPredicates filters the events of one watch.
func WithPredicates(predicates ...predicate.Predicate) WatchOption {
	return func(w *watch) { w.predicates = append(w.predicates, predicates...) }
}

// InClusters makes one watch cover c instead of the builder's
// WatchClusters, for example a watch of hub objects mapped to requests for
// members with WatchesFleet.
func InClusters(c Clusters) WatchOption {
	return func(w *watch) { w.clusters = &c }
}

// MapFunc maps an object of cluster clusterName ("" is the hub) to
// requests for any clusters.
type MapFunc func(ctx context.Context, clusterName string, obj client.Object) []Request

// ClusterFilter chooses the clusters a controller engages, by name and by
// the labels of their registration (MemberCluster labels). The hub is
// always accepted. It is evaluated when a cluster is engaged and again
// whenever its labels change: a cluster it stops accepting is disengaged,
// one it starts accepting is engaged.
type ClusterFilter func(clusterName string, labels map[string]string) bool

// ClusterNamesFilter accepts the named clusters.
func ClusterNamesFilter(names ...string) ClusterFilter {
	return func(clusterName string, _ map[string]string) bool { return slices.Contains(names, clusterName) }
}

// ClusterSelectorFilter accepts the clusters whose labels selector matches.
func ClusterSelectorFilter(selector labels.Selector) ClusterFilter {
	return func(_ string, l map[string]string) bool { return selector.Matches(labels.Set(l)) }
}

// ToEveryMember maps an object to one request per engaged member, for the
// object key returns: a hub object that concerns every member. A member
// that a controller engages later, or again after a disconnection, is
// handed the requests of the hub objects that exist then.
func ToEveryMember(mgr *Manager, key func(client.Object) types.NamespacedName) MapFunc {
	return func(_ context.Context, _ string, obj client.Object) []Request {
		names := mgr.ClusterNames()
		reqs := make([]Request, len(names))
		for i, name := range names {
			reqs[i] = Request{ClusterName: name, NamespacedName: key(obj)}
		}
		return reqs
	}
}

// NewControllerManagedBy starts a fleet controller that mgr will run.
func NewControllerManagedBy(mgr *Manager) *Builder {
	return &Builder{mgr: mgr}
}

// Named sets the controller's name, used in logs and metrics. It must be
// unique. Defaults to the lower-cased kind of the For object.
func (b *Builder) Named(name string) *Builder {
	b.name = name
	return b
}

// For reconciles obj: each event of obj in a watched cluster enqueues that
// object, tagged with the cluster's name.
func (b *Builder) For(obj client.Object, opts ...WatchOption) *Builder {
	if b.forObj != nil {
		b.err = errors.Join(b.err, errors.New("For may be called only once"))
		return b
	}
	b.forObj = obj
	return b.tagged(obj, func(cluster.Cluster) handler.EventHandler { return &handler.EnqueueRequestForObject{} }, opts)
}

// Owns reconciles the controlling owner, of the For object's kind, of each
// obj that changes. The owner is looked up in the same cluster, with that
// cluster's REST mapper.
func (b *Builder) Owns(obj client.Object, opts ...WatchOption) *Builder {
	return b.tagged(obj, func(cl cluster.Cluster) handler.EventHandler {
		return handler.EnqueueRequestForOwner(cl.GetScheme(), cl.GetRESTMapper(), b.forObj, handler.OnlyControllerOwner())
	}, opts)
}

// Watches sends each event of obj to h, in every watched cluster. The
// requests h makes are tagged with the cluster's name.
func (b *Builder) Watches(obj client.Object, h handler.EventHandler, opts ...WatchOption) *Builder {
	return b.tagged(obj, func(cluster.Cluster) handler.EventHandler { return h }, opts)
}

// WatchesMetadata is Watches for the metadata of obj's kind only: the
// caches hold PartialObjectMetadata, which costs far less memory than whole
// objects.
func (b *Builder) WatchesMetadata(obj client.Object, h handler.EventHandler, opts ...WatchOption) *Builder {
	gvk, err := apiutil.GVKForObject(obj, b.mgr.GetScheme())
	if err != nil {
		b.err = errors.Join(b.err, fmt.Errorf("WatchesMetadata: %w", err))
		return b
	}
	metadata := &metav1.PartialObjectMetadata{}
	metadata.SetGroupVersionKind(gvk)
	return b.Watches(metadata, h, opts...)
}

// WatchesFleet sends each event of obj to fn, which names the cluster of
// every request it makes: for example, with InClusters(Hub) and
// ToEveryMember, a hub object enqueues one request per engaged member.
func (b *Builder) WatchesFleet(obj client.Object, fn MapFunc, opts ...WatchOption) *Builder {
	return b.add(true, func(predicates []predicate.Predicate) engage.Source {
		return engage.NewRequestKind(obj, func(clusterName string) engage.RequestHandler {
			return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []Request {
				return fn(ctx, clusterName, o)
			})
		}, predicates...)
	}, opts)
}

// WithClusterFilter makes the controller engage only the members filter
// accepts.
func (b *Builder) WithClusterFilter(filter ClusterFilter) *Builder {
	b.filter = filter
	return b
}

// tagged adds a watch whose handler's requests are tagged with the
// cluster's name.
func (b *Builder) tagged(obj client.Object, newHandler engage.HandlerFunc, opts []WatchOption) *Builder {
	return b.add(false, func(predicates []predicate.Predicate) engage.Source {
		return engage.NewKind(obj, newHandler, predicates...)
	}, opts)
}

// WatchesClusterSource starts src in every watched cluster as the
// controller engages it, until the cluster leaves: for watches that For,
// Owns and Watches do not express, such as caches of the controller's own.
// The engagement waits for src's synced channel, as for any watch. Of
// opts, only InClusters applies.
func (b *Builder) WatchesClusterSource(src engage.Source, opts ...WatchOption) *Builder {
	return b.add(false, func([]predicate.Predicate) engage.Source { return src }, opts)
}

func (b *Builder) add(fansOut bool, newSource func([]predicate.Predicate) engage.Source, opts []WatchOption) *Builder {
	w := watch{newSource: newSource, fansOut: fansOut}
	for _, o := range opts {
		o(&w)
	}
	b.watches = append(b.watches, w)
	return b
}

// WatchesRawSource adds a source of fleet requests that the controller
// starts as it is: requests name their clusters themselves. Use it for
// events from outside the clusters' API servers, such as webhooks or
// timers (see Channel). Requests for clusters the controller has not
// engaged are dropped.
func (b *Builder) WatchesRawSource(src source.TypedSource[Request]) *Builder {
	b.rawSources = append(b.rawSources, src)
	return b
}

// Channel returns a source that enqueues the request each event of ch
// carries: controller-runtime's Channel source, for events that name
// their cluster.
func Channel(ch <-chan event.TypedGenericEvent[Request]) source.TypedSource[Request] {
	return source.TypedChannel(ch, handler.TypedFuncs[Request, Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[Request], q workqueue.TypedRateLimitingInterface[Request]) {
			q.Add(e.Object)
		},
	})
}

// WithLogConstructor sets how the controller's logger for each request is
// made. Defaults to the manager's logger with the keys controller,
// cluster, namespace and name.
func (b *Builder) WithLogConstructor(logConstructor func(*Request) logr.Logger) *Builder {
	b.logger = logConstructor
	return b
}

// WithEventFilter filters the events of every watch.
func (b *Builder) WithEventFilter(p predicate.Predicate) *Builder {
	b.predicates = append(b.predicates, p)
	return b
}

// WatchClusters chooses the clusters the controller watches. Defaults to
// Members.
func (b *Builder) WatchClusters(c Clusters) *Builder {
	b.clusters = c
	return b
}

// WithOptions sets the controller's options. Reconciler and LogConstructor
// are set by the builder (see WithLogConstructor). CacheSyncTimeout also
// bounds the wait for each cluster's informers. NewQueue replaces the fair
// queue, and with it the per-cluster cap and holding the work of Unhealthy
// members.
func (b *Builder) WithOptions(options ControllerOptions) *Builder {
	b.options = options
	return b
}

// Complete builds the controller, adds it to the manager and engages it
// with every cluster it watches, including those already engaged.
func (b *Builder) Complete(r Reconciler) error {
	_, err := b.Build(r)
	return err
}

// Build is Complete, and returns the controller so that sources can be
// added to it later.
func (b *Builder) Build(r Reconciler) (Controller, error) {
	if b.err != nil {
		return nil, b.err
	}
	if r == nil {
		return nil, errors.New("fleet controller: a reconciler is required")
	}
	if b.forObj == nil && b.name == "" {
		return nil, errors.New("fleet controller: For or Named is required")
	}
	name, err := b.controllerName()
	if err != nil {
		return nil, err
	}
	c := &controller{
		name:        name,
		accepts:     b.accepts(),
		syncTimeout: b.syncTimeout(),
		do:          r,
		metrics:     b.mgr.metrics,
		hub:         b.mgr.Manager,
		registry:    b.mgr.registry,
		mayAct:      b.mgr.mayAct,
		ready:       make(chan struct{}),
		engaged:     map[string]context.Context{},
		reconciling: map[string]*sync.WaitGroup{},
	}
	for _, w := range b.watches {
		clusters := b.clusters
		if w.clusters != nil {
			clusters = *w.clusters
		}
		c.sources = append(c.sources, scopedSource{src: w.newSource(append(w.predicates, b.predicates...)), clusters: clusters, fansOut: w.fansOut})
	}

	opts := b.options.TypedOptions
	opts.Reconciler = c
	if opts.NewQueue == nil {
		opts.NewQueue = func(name string, rateLimiter workqueue.TypedRateLimiter[Request]) workqueue.TypedRateLimitingInterface[Request] {
			q := fairqueue.New[Request](name, func(r Request) string { return r.ClusterName }, fairqueue.Options[Request]{
				RateLimiter:           rateLimiter,
				MetricsProvider:       b.mgr.queueMetrics,
				MaxInFlightPerCluster: b.options.MaxConcurrentReconcilesPerCluster,
			})
			c.setQueue(q)
			return q
		}
	}
	opts.LogConstructor = b.logger
	if opts.LogConstructor == nil {
		log := b.mgr.GetLogger().WithValues("controller", name)
		opts.LogConstructor = func(req *Request) logr.Logger {
			if req == nil {
				return log
			}
			return log.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
		}
	}
	ctrl, err := crcontroller.NewTyped(name, b.mgr.Manager, opts)
	if err != nil {
		return nil, err
	}
	for _, src := range append([]source.TypedSource[Request]{engagements{c}}, b.rawSources...) {
		if err := ctrl.Watch(src); err != nil {
			return nil, err
		}
	}
	b.mgr.addController(c)
	return ctrl, nil
}

func (b *Builder) controllerName() (string, error) {
	if b.name != "" {
		return b.name, nil
	}
	gvk, err := apiutil.GVKForObject(b.forObj, b.mgr.GetScheme())
	if err != nil {
		return "", fmt.Errorf("fleet controller: naming it after its For object: %w", err)
	}
	return strings.ToLower(gvk.Kind), nil
}

func (b *Builder) syncTimeout() time.Duration {
	if b.options.CacheSyncTimeout > 0 {
		return b.options.CacheSyncTimeout
	}
	if t := b.mgr.GetControllerOptions().CacheSyncTimeout; t > 0 {
		return t
	}
	return 2 * time.Minute
}

// accepts returns the controller's cluster filter, reading each member's
// labels from the registry; nil without a filter.
func (b *Builder) accepts() func(string) bool {
	if b.filter == nil {
		return nil
	}
	return func(clusterName string) bool {
		var l map[string]string
		if c, ok := b.mgr.registry.Get(clusterName); ok {
			l = c.Labels
		}
		return b.filter(clusterName, l)
	}
}
