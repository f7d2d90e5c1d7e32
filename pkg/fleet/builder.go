package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/fleetkube/fleet-manager/pkg/engage"
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
	options    crcontroller.TypedOptions[Request]
	err        error
}

type watch struct {
	obj        client.Object
	newHandler engage.HandlerFunc
	predicates []predicate.Predicate
}

// WatchOption adjusts one watch of a Builder.
type WatchOption func(*watch)

// WithPredicates filters the events of one watch.
func WithPredicates(predicates ...predicate.Predicate) WatchOption {
	return func(w *watch) { w.predicates = append(w.predicates, predicates...) }
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
	b.watches = append(b.watches, newWatch(obj, func(crcluster.Cluster) handler.EventHandler {
		return &handler.EnqueueRequestForObject{}
	}, opts))
	return b
}

// Owns reconciles the controlling owner, of the For object's kind, of each
// obj that changes. The owner is looked up in the same cluster, with that
// cluster's REST mapper.
func (b *Builder) Owns(obj client.Object, opts ...WatchOption) *Builder {
	b.watches = append(b.watches, newWatch(obj, func(cl crcluster.Cluster) handler.EventHandler {
		return handler.EnqueueRequestForOwner(cl.GetScheme(), cl.GetRESTMapper(), b.forObj, handler.OnlyControllerOwner())
	}, opts))
	return b
}

// Watches sends each event of obj to h, in every watched cluster. The
// requests h makes are tagged with the cluster's name.
func (b *Builder) Watches(obj client.Object, h handler.EventHandler, opts ...WatchOption) *Builder {
	b.watches = append(b.watches, newWatch(obj, func(crcluster.Cluster) handler.EventHandler { return h }, opts))
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

// WithOptions sets the controller-runtime controller's options. Reconciler
// and LogConstructor are set by the builder. CacheSyncTimeout also bounds
// the wait for each cluster's informers.
func (b *Builder) WithOptions(options crcontroller.TypedOptions[Request]) *Builder {
	b.options = options
	return b
}

// Complete builds the controller, adds it to the manager and engages it
// with every cluster it watches, including those already engaged.
func (b *Builder) Complete(r Reconciler) error {
	if b.err != nil {
		return b.err
	}
	if r == nil {
		return errors.New("fleet controller: a reconciler is required")
	}
	if b.forObj == nil {
		return errors.New("fleet controller: For is required")
	}
	name, err := b.controllerName()
	if err != nil {
		return err
	}
	c := &controller{
		name:        name,
		clusters:    b.clusters,
		syncTimeout: b.syncTimeout(),
		do:          r,
		memberState: b.mgr.pool.State,
		holdFor:     b.mgr.pool.HealthOptions().Interval,
		metrics:     b.mgr.metrics,
		ready:       make(chan struct{}),
		engaged:     map[string]context.Context{},
	}
	for _, w := range b.watches {
		c.sources = append(c.sources, engage.NewKind(w.obj, w.newHandler, append(w.predicates, b.predicates...)...))
	}

	opts := b.options
	opts.Reconciler = c
	log := b.mgr.GetLogger().WithValues("controller", name)
	opts.LogConstructor = func(req *Request) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
	}
	ctrl, err := crcontroller.NewTyped(name, b.mgr.Manager, opts)
	if err != nil {
		return err
	}
	if err := ctrl.Watch(engagements{c}); err != nil {
		return err
	}
	b.mgr.engager.Add(c)
	return nil
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

func newWatch(obj client.Object, newHandler engage.HandlerFunc, opts []WatchOption) watch {
	w := watch{obj: obj, newHandler: newHandler}
	for _, o := range opts {
		o(&w)
	}
	return w
}
