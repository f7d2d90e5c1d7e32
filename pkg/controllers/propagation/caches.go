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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// requestTimeout bounds each request of the manager to a member, not its
// watches: a member that stops answering (frozen, cut off) holds a worker
// no longer; the request fails and is tried again. A member answers a
// request for one object within a second, and within 30 s even loaded or
// behind an admission webhook at its own longest timeout (30 s).
const requestTimeout = 30 * time.Second

// memberCopies are the copies in one member, cached per namespace that
// has Propagations, or copies the journal holds: each cache holds only
// objects of its namespace labelled as copies of this fleet, so the
// manager needs rights only in those namespaces (as `register
// --namespaces` grants). Its clients' user agent names the controller.
type memberCopies struct {
	name   string
	client client.Client
	reader client.Reader
	// discovery and metadata read what a container copy holds (see
	// otherContent), uncached, with the writer's timeout.
	discovery discovery.DiscoveryInterface
	metadata  metadata.Interface
	// newCache builds the copy cache of a namespace, which runs until ctx,
	// the member's engagement, ends, or the cache is dropped.
	newCache func(namespace string) (*watchedKinds, error)
	ctx      context.Context

	mu         sync.Mutex
	namespaces map[string]*namespaceCopies

	// replayMu guards replayed, set once the member's owed removals were
	// carried out, and cleared when the member is Ready again.
	replayMu sync.Mutex
	replayed bool
}

// namespaceCopies is the copy cache of one namespace of a member.
type namespaceCopies struct {
	*watchedKinds
	ctx  context.Context
	stop context.CancelFunc
	// used is when a request last read it.
	used time.Time
}

// inNamespace returns the copy cache of namespace, started if need be.
func (mc *memberCopies) inNamespace(namespace string) (*namespaceCopies, error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if nc, ok := mc.namespaces[namespace]; ok {
		nc.used = time.Now()
		return nc, nil
	}
	if mc.ctx.Err() != nil {
		return nil, mc.ctx.Err()
	}
	w, err := mc.newCache(namespace)
	if err != nil {
		return nil, fmt.Errorf("building the copy cache of namespace %s in member %s: %w", namespace, mc.name, err)
	}
	ctx, stop := context.WithCancel(mc.ctx)
	w.run(ctx)
	nc := &namespaceCopies{watchedKinds: w, ctx: ctx, stop: stop, used: time.Now()}
	mc.namespaces[namespace] = nc
	return nc, nil
}

// watch makes sure the copy cache of namespace holds gvk.
func (mc *memberCopies) watch(ctx context.Context, namespace string, gvk schema.GroupVersionKind) error {
	nc, err := mc.inNamespace(namespace)
	if err != nil {
		return err
	}
	return nc.watch(ctx, gvk)
}

// list lists the copies of gvk in namespace that match selector.
func (mc *memberCopies) list(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]unstructured.Unstructured, error) {
	nc, err := mc.inNamespace(namespace)
	if err != nil {
		return nil, err
	}
	// A cache dropped meanwhile never syncs: do not wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(nc.ctx, cancel)()
	return nc.list(ctx, gvk, namespace, selector)
}

// watched lists the kinds whose informers have synced in any namespace.
func (mc *memberCopies) watched() []schema.GroupVersionKind {
	var kinds []schema.GroupVersionKind
	for _, nc := range mc.caches() {
		for _, gvk := range nc.watched() {
			if !slices.Contains(kinds, gvk) {
				kinds = append(kinds, gvk)
			}
		}
	}
	return kinds
}

// served forgets, in every copy cache, that gk was missing.
func (mc *memberCopies) served(gk schema.GroupKind) {
	for _, nc := range mc.caches() {
		nc.served(gk)
	}
}

// caches returns the namespaces' copy caches.
func (mc *memberCopies) caches() map[string]*namespaceCopies {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return maps.Clone(mc.namespaces)
}

// idle lists the namespaces whose copy caches no request read since.
func (mc *memberCopies) idle(since time.Time) []string {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	var namespaces []string
	for ns, nc := range mc.namespaces {
		if nc.used.Before(since) {
			namespaces = append(namespaces, ns)
		}
	}
	return namespaces
}

// drop stops the copy cache of namespace unless a request read it since:
// a later request builds it again.
func (mc *memberCopies) drop(namespace string, since time.Time) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if nc, ok := mc.namespaces[namespace]; ok && nc.used.Before(since) {
		nc.stop()
		delete(mc.namespaces, namespace)
	}
}

// copyCaches is the fleet controller's source in every member: started
// as the controller engages a member, it watches every kind Propagations
// copy in the member's copy cache of each namespace that has
// Propagations, and turns each event of a copy into a request for its
// Propagation in that member.
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
	// engaged is told of a member whose copy caches watch its kinds.
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

func (c *copyCaches) Start(ctx context.Context, clusterName string, cl cluster.Cluster, q engage.Queue) (<-chan struct{}, error) {
	base := cl.GetHTTPClient()
	rt := transport.NewUserAgentRoundTripper(c.userAgent, base.Transport)
	httpClient := &http.Client{Transport: rt, Timeout: base.Timeout, Jar: base.Jar}
	writerTimeout := requestTimeout
	if base.Timeout > 0 {
		writerTimeout = min(writerTimeout, base.Timeout)
	}
	selector := c.selector()
	// The writer's timeout bounds its requests, in the client and, as
	// ?timeout=, in the member.
	writerHTTP := &http.Client{Transport: rt, Timeout: writerTimeout, Jar: base.Jar}
	writer, err := client.New(cl.GetConfig(), client.Options{HTTPClient: writerHTTP, Scheme: c.scheme, Mapper: cl.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	// Listing every kind a namespace may hold meets deprecated ones: their
	// warnings say nothing about the copies.
	contentCfg := rest.CopyConfig(cl.GetConfig())
	contentCfg.WarningHandlerWithContext = rest.NoWarnings{}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(contentCfg, writerHTTP)
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfigAndClient(contentCfg, writerHTTP)
	if err != nil {
		return nil, err
	}
	mc := &memberCopies{
		name: clusterName, client: writer, reader: writer, discovery: disc, metadata: metadataClient, ctx: ctx, namespaces: map[string]*namespaceCopies{},
		newCache: func(namespace string) (*watchedKinds, error) {
			ca, err := cache.New(cl.GetConfig(), cache.Options{
				HTTPClient: httpClient, Scheme: c.scheme, Mapper: cl.GetRESTMapper(),
				DefaultNamespaces: map[string]cache.Config{namespace: {}}, DefaultLabelSelector: selector,
				ReaderFailOnMissingInformer: true,
				DefaultWatchErrorHandler:    quietWatchErrors(c.log.WithValues("cluster", clusterName)),
			})
			if err != nil {
				return nil, err
			}
			return &watchedKinds{
				cluster: "member " + clusterName, grantHint: grantHint(clusterName), cache: ca, reader: writer, mapper: cl.GetRESTMapper(), selector: selector, namespace: namespace,
				running: make(chan struct{}),
				onEvent: func(_, obj client.Object) {
					if name := obj.GetLabels()[fleetv1alpha1.PropagationLabel]; name != "" {
						q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}})
					}
				},
			}, nil
		},
	}
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
		// The kinds are watched, at once, in every namespace that has
		// Propagations or copies the journal holds.
		kinds := c.kinds(ctx, clusterName)
		var wg sync.WaitGroup
		for _, namespace := range namespacesOf(c.propagations(ctx, clusterName)) {
			for _, gvk := range kinds {
				wg.Go(func() {
					if err := mc.watch(ctx, namespace, gvk); err != nil && ctx.Err() == nil {
						c.log.V(1).Info("Not watching copies of a kind", "cluster", clusterName, "namespace", namespace, "kind", gvk.Kind, "reason", err.Error())
					}
				})
			}
		}
		wg.Wait()
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

// namespacesOf lists the namespaces of keys.
func namespacesOf(keys []types.NamespacedName) []string {
	var namespaces []string
	for _, k := range keys {
		if !slices.Contains(namespaces, k.Namespace) {
			namespaces = append(namespaces, k.Namespace)
		}
	}
	return namespaces
}

// get returns the copies of an engaged member, or nil.
func (c *copyCaches) get(clusterName string) *memberCopies {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[clusterName]
}

// memberEngaged records in the journal the copies of this fleet the
// member's caches found, so that a journal that was lost, or kept by
// another replica, learns them again, and tells the member of a lost
// journal. Only copies that carry the fleet's identity are recorded: the
// journal proves the copies stamped without one. Then, while the member
// is engaged, the copy caches nothing needs are dropped.
func (r *reconciler) memberEngaged(ctx context.Context, mc *memberCopies) {
	go r.dropUnneededCaches(ctx, mc)
	id, err := r.m.FleetID(ctx)
	if err != nil {
		return // the member left, or the manager stops
	}
	var found []journal.Copy
	for _, nc := range mc.caches() {
		for _, gvk := range nc.watched() {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := nc.cache.List(ctx, list, client.MatchingLabels{fleetv1alpha1.FleetIDLabel: id}); err != nil {
				continue
			}
			for i := range list.Items {
				if c := journalCopy(&list.Items[i]); c.Propagation != "" {
					found = append(found, c)
				}
			}
		}
	}
	if err := r.journal.Record(mc.name, found); err != nil && ctx.Err() == nil {
		r.log.Error(err, "Recording the copies found in a member in the journal", "cluster", mc.name)
	}
	r.countOwed(mc.name)
	if rec := r.journal.Recovered(); rec != nil && rec.MovedTo != "" {
		obj := &fleetv1alpha1.MemberCluster{}
		if _, told := r.recoveryTold.LoadOrStore(mc.name, true); !told && r.hub.Get(ctx, types.NamespacedName{Name: mc.name}, obj) == nil {
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonJournalLost, "Recover",
				"the manager's journal could not be used (%v) and was moved to %s: the copies found in this member are recorded again; removals it owed for deleted Propagations are forgotten unless their copies are found", rec.Err, rec.MovedTo)
		}
	}
}

// cacheSweep is how often a member's copy caches are looked at: one that
// no request read since the last look is dropped when no Propagation of
// its namespace and nothing the journal holds of the member there needs
// it.
const cacheSweep = time.Minute

// dropUnneededCaches drops mc's copy caches nothing needs until ctx ends.
func (r *reconciler) dropUnneededCaches(ctx context.Context, mc *memberCopies) {
	t := time.NewTicker(cacheSweep)
	defer t.Stop()
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, namespace := range mc.idle(since) {
			if !r.needsCopies(ctx, mc.name, namespace) {
				mc.drop(namespace, since)
			}
		}
		since = now
	}
}

// needsCopies reports whether member's copies of namespace must be read:
// a Propagation of the namespace reads them, or the journal holds copies
// or owed removals of the member there. When in doubt it says yes.
func (r *reconciler) needsCopies(ctx context.Context, member, namespace string) bool {
	props, err := r.propagationsIn(ctx, namespace)
	if err != nil || len(props) > 0 {
		return true
	}
	copies, err := r.journal.Copies(member)
	if err != nil || slices.ContainsFunc(copies, func(c journal.Copy) bool { return c.Namespace == namespace }) {
		return true
	}
	owed, err := r.journal.Owed(member)
	return err != nil || slices.ContainsFunc(owed, func(o journal.Owed) bool { return o.Namespace == namespace })
}

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
	gvk, err := content.ResourceKind(sel)
	if err != nil {
		return nil, err
	}
	if namespace == h.fleet {
		return nil, &kindError{reason: fleetv1alpha1.ReasonRefused, message: fmt.Sprintf("%s of namespace %s is refused: %s", gvk.Kind, namespace, content.RuleFleetNamespace)}
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
		if selector, err = content.LabelSelector(sel); err != nil {
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
