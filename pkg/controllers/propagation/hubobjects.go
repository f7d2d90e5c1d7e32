package propagation

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// hubObjects are the hub objects Propagations select, cached per
// namespace: a Propagation reads only its own namespace, so the manager
// needs read access only where Propagations are (a RoleBinding per
// namespace is enough, as for Secrets). A namespace's cache is dropped
// with its last Propagation. The fleet namespace is never read for a
// Propagation.
type hubObjects struct {
	fleet  string // the fleet namespace
	config *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	reader client.Reader
	log    logr.Logger
	// changed is told of every event of a hub object: its state before
	// (nil for a create) and after.
	changed func(namespace string, old, obj client.Object)

	// ctx bounds the caches: the leader's hub engagement.
	mu         sync.Mutex
	ctx        context.Context
	namespaces map[string]*namespaceCache
}

// namespaceCache is the cache of one namespace, which stop ends.
type namespaceCache struct {
	*watchedKinds
	ctx  context.Context
	stop context.CancelFunc
}

// start makes the caches live under ctx, the hub's engagement; the caches
// of an earlier engagement are dropped.
func (h *hubObjects) start(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctx, h.namespaces = ctx, map[string]*namespaceCache{}
}

// drop stops the cache of namespace, if any: a later list builds it
// again.
func (h *hubObjects) drop(namespace string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.namespaces[namespace]; ok {
		c.stop()
		delete(h.namespaces, namespace)
	}
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
	c, err := h.inNamespace(namespace)
	if err != nil {
		return nil, err
	}
	// A cache dropped meanwhile never syncs: do not wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	selector := labels.Everything()
	if sel.Selector != nil {
		if selector, err = metaLabelSelector(sel); err != nil {
			return nil, err
		}
	}
	objs, err := c.list(ctx, gvk, namespace, selector)
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

func (h *hubObjects) inNamespace(namespace string) (*namespaceCache, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || h.ctx.Err() != nil {
		return nil, errors.New("the hub is not engaged")
	}
	if c, ok := h.namespaces[namespace]; ok {
		return c, nil
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
		running: make(chan struct{}),
		onEvent: func(old, obj client.Object) { h.changed(namespace, old, obj) },
	}
	ctx, stop := context.WithCancel(h.ctx)
	w.run(ctx)
	nc := &namespaceCache{watchedKinds: w, ctx: ctx, stop: stop}
	h.namespaces[namespace] = nc
	return nc, nil
}
