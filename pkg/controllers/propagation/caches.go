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
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
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

// memberCopies are the copies in one member, cached per namespace where
// a run reads them: each cache holds only objects of its namespace
// labelled as copies of this fleet, so the manager needs rights only in
// those namespaces (as `register --namespaces` grants), and watches only
// the kinds runs read there, each from the first run that reads it until
// nothing needs it (see sweepWatches). Its clients' user agent names the
// controller.
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
	// watches is told how many informers the member's caches run, and
	// watchStarted of each informer started.
	watches      func(n int)
	watchStarted func()

	mu         sync.Mutex
	namespaces map[string]*namespaceCopies
	// countMu is held across counting the informers and telling watches,
	// so that a count is never told after a later one.
	countMu sync.Mutex

	// replayMu guards replayed, set once the member's owed removals were
	// carried out, and cleared when the member is Ready again.
	replayMu sync.Mutex
	replayed bool

	// copyMu guards checked, written and writing, by copy (see apply.CopyID).
	copyMu sync.Mutex
	// checked is, per copy, what its last drift check that found none
	// compared: a copy that is the same object version, wanted with the
	// same content, is not compared again for recheck (see unchanged).
	checked map[apply.CopyID]cleanCheck
	recheck time.Duration
	// written is, per copy, the resourceVersion the manager's last write
	// of it answered: the watch event of that version asks for no run
	// (see echo).
	written map[apply.CopyID]string
	// writing is, per copy the manager writes now, the events of it that
	// came before the write answered: the watch may show a write before
	// its answer comes, and only the answer tells whether it is the
	// write's (see echo).
	writing map[apply.CopyID]*heldEvents
}

// heldEvents are the events of a copy held while the manager writes it
// (writes of it in flight), each with what tells of it.
type heldEvents struct {
	writes int
	events []heldEvent
}

type heldEvent struct {
	resourceVersion string
	deliver         func()
}

// idOf is the apply.CopyID of obj.
func idOf(obj client.Object) apply.CopyID {
	return apply.CopyID{Namespace: obj.GetNamespace(), Key: apply.Key{GVK: obj.GetObjectKind().GroupVersionKind(), Name: obj.GetName()}}
}

// cleanCheck is a drift check that found none, at: of the member's copy
// at resourceVersion, against the desired copy of content hash
// contentHash.
type cleanCheck struct {
	resourceVersion, contentHash string
	at                           time.Time
}

// Unchanged reports whether a drift check of live against a desired copy
// of hash found none, less than recheck ago, and the copy has not
// changed since: every change of an object changes its resourceVersion,
// as Kubernetes defines it. A member that gives a version again to other
// content (an etcd backup restored) has the copy compared again at the
// latest recheck after its last check: left is how long the check is
// still trusted.
func (mc *memberCopies) Unchanged(id apply.CopyID, live *unstructured.Unstructured, hash string) (ok bool, left time.Duration) {
	mc.copyMu.Lock()
	defer mc.copyMu.Unlock()
	c, found := mc.checked[id]
	if !found || hash == "" || c.resourceVersion != live.GetResourceVersion() || c.contentHash != hash {
		return false, 0
	}
	left = mc.recheck - time.Since(c.at)
	return left > 0, left
}

// CheckedClean records that a drift check of live against a desired copy
// of hash found none, now.
func (mc *memberCopies) CheckedClean(id apply.CopyID, live *unstructured.Unstructured, hash string) {
	mc.copyMu.Lock()
	defer mc.copyMu.Unlock()
	if mc.checked == nil {
		mc.checked = map[apply.CopyID]cleanCheck{}
	}
	mc.checked[id] = cleanCheck{resourceVersion: live.GetResourceVersion(), contentHash: hash, at: time.Now()}
}

// Forget forgets copy id, which the manager removed or let go.
func (mc *memberCopies) Forget(id apply.CopyID) {
	mc.copyMu.Lock()
	defer mc.copyMu.Unlock()
	delete(mc.checked, id)
	delete(mc.written, id)
}

// Write records that the manager writes copy id now; wrote, which must
// follow, that the Write answered.
func (mc *memberCopies) Write(id apply.CopyID) {
	mc.copyMu.Lock()
	defer mc.copyMu.Unlock()
	if mc.writing == nil {
		mc.writing = map[apply.CopyID]*heldEvents{}
	}
	h := mc.writing[id]
	if h == nil {
		h = &heldEvents{}
		mc.writing[id] = h
	}
	h.writes++
}

// Wrote records that the manager's write of copy id answered obj, nil
// if it failed. An event held while it was in flight (see echo) that
// shows obj is its echo, dropped; the others are told once no write of
// the copy is in flight.
func (mc *memberCopies) Wrote(id apply.CopyID, obj *unstructured.Unstructured) {
	rv := ""
	if obj != nil {
		rv = obj.GetResourceVersion()
	}
	mc.copyMu.Lock()
	echoed := false
	var deliver []func()
	if h := mc.writing[id]; h != nil {
		h.writes--
		h.events = slices.DeleteFunc(h.events, func(e heldEvent) bool {
			if rv != "" && e.resourceVersion == rv && !echoed {
				echoed = true
				return true
			}
			return false
		})
		if h.writes <= 0 {
			delete(mc.writing, id)
			for _, e := range h.events {
				deliver = append(deliver, e.deliver)
			}
		}
	}
	if !echoed && rv != "" {
		if mc.written == nil {
			mc.written = map[apply.CopyID]string{}
		}
		mc.written[id] = rv
	}
	mc.copyMu.Unlock()
	for _, d := range deliver {
		d()
	}
}

// echo reports whether obj, as a create or update event of the member's
// copy cache shows it (old before it, nil for a create), is the version
// the manager's last write of it answered: the run that wrote it saw it
// already. It forgets that write at the copy's first event after it. An
// event that comes while the manager writes the copy is held, and echo
// reports true: wrote tells it with deliver, unless it shows the
// version the write answered. An event that moves the copy to another
// Propagation (its PropagationLabel changed) is never an echo: the
// Propagation it left must learn it.
func (mc *memberCopies) echo(old, obj client.Object, deliver func()) bool {
	id := idOf(obj)
	mc.copyMu.Lock()
	defer mc.copyMu.Unlock()
	if h := mc.writing[id]; h != nil && !ownerChanged(old, obj) {
		h.events = append(h.events, heldEvent{resourceVersion: obj.GetResourceVersion(), deliver: deliver})
		return true
	}
	rv, ok := mc.written[id]
	if !ok {
		return false
	}
	delete(mc.written, id)
	return rv != "" && rv == obj.GetResourceVersion() && !ownerChanged(old, obj)
}

// ownerChanged reports whether an event of a copy moved it from one
// Propagation to another.
func ownerChanged(old, obj client.Object) bool {
	return old != nil && old.GetLabels()[fleetv1alpha1.PropagationLabel] != obj.GetLabels()[fleetv1alpha1.PropagationLabel]
}

// copyEvent is told of each event of a copy that is not an echo (see
// echo): an update that shows the version the cache held already (a
// relist, after a watch failed, or a resync) makes the copy's next run
// compare it again, for a member whose versions went back (an etcd
// backup restored) may give that version to other content; enqueue is
// given the Propagations the copy belongs to before and after.
func (mc *memberCopies) copyEvent(old, obj client.Object, enqueue func(namespace, propagation string)) {
	if old != nil && old.GetResourceVersion() == obj.GetResourceVersion() {
		mc.copyMu.Lock()
		delete(mc.checked, idOf(obj))
		mc.copyMu.Unlock()
	}
	now := obj.GetLabels()[fleetv1alpha1.PropagationLabel]
	if now != "" {
		enqueue(obj.GetNamespace(), now)
	}
	if old != nil {
		if before := old.GetLabels()[fleetv1alpha1.PropagationLabel]; before != "" && before != now {
			enqueue(old.GetNamespace(), before)
		}
	}
}

// namespaceCopies is the copy cache of one namespace of a member.
type namespaceCopies struct {
	*watchedKinds
	ctx  context.Context
	stop context.CancelFunc
	// used is when a request last asked for it or let it go, and holders
	// how many requests use it now (under memberCopies.mu): drop keeps
	// it while one does, however long its kind's check takes.
	used    time.Time
	holders int
}

// inNamespace returns the copy cache of namespace, started if need be,
// and what lets it go, which the caller calls when done with it.
func (mc *memberCopies) inNamespace(namespace string) (*namespaceCopies, func(), error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	nc, ok := mc.namespaces[namespace]
	if !ok {
		if mc.ctx.Err() != nil {
			return nil, nil, mc.ctx.Err()
		}
		w, err := mc.newCache(namespace)
		if err != nil {
			return nil, nil, fmt.Errorf("building the copy cache of namespace %s in member %s: %w", namespace, mc.name, err)
		}
		ctx, stop := context.WithCancel(mc.ctx)
		w.run(ctx)
		nc = &namespaceCopies{watchedKinds: w, ctx: ctx, stop: stop}
		mc.namespaces[namespace] = nc
	}
	nc.used = time.Now()
	nc.holders++
	return nc, func() {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		nc.used = time.Now()
		nc.holders--
	}, nil
}

// watch makes sure the copy cache of namespace holds gvk.
func (mc *memberCopies) watch(ctx context.Context, namespace string, gvk schema.GroupVersionKind) error {
	nc, done, err := mc.inNamespace(namespace)
	if err != nil {
		return err
	}
	defer done()
	return nc.watch(ctx, gvk)
}

// List lists the copies of gvk in namespace that match selector: the
// cache's own objects, not copies (a run of 30 copies of 10 KiB would
// copy 300 KiB). Whoever writes into one, or hands it to a client call
// that writes its answer into it, copies it first (as apply does).
func (mc *memberCopies) List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]unstructured.Unstructured, error) {
	nc, done, err := mc.inNamespace(namespace)
	if err != nil {
		return nil, err
	}
	defer done()
	// A cache stopped meanwhile never syncs: do not wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(nc.ctx, cancel)()
	return nc.list(ctx, gvk, namespace, selector, client.UnsafeDisableDeepCopy)
}

// WatchedIn lists the kinds whose informers have synced in namespace.
func (mc *memberCopies) WatchedIn(namespace string) []schema.GroupVersionKind {
	if nc := mc.caches()[namespace]; nc != nil {
		return nc.watched()
	}
	return nil
}

// informersChanged tells of an informer that started or stopped.
func (mc *memberCopies) informersChanged(started bool) {
	if started {
		mc.watchStarted()
	}
	mc.countWatches()
}

// countWatches tells watches how many informers the member's caches
// run, while the member is engaged.
func (mc *memberCopies) countWatches() {
	mc.countMu.Lock()
	defer mc.countMu.Unlock()
	if mc.ctx.Err() != nil {
		return // told 0 as it ended
	}
	n := 0
	for _, nc := range mc.caches() {
		n += len(nc.started())
	}
	mc.watches(n)
}

// Served forgets, in every copy cache, that gk was missing.
func (mc *memberCopies) Served(gk schema.GroupKind) {
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

// drop stops the copy cache of namespace if it runs no informer, no
// request uses it and none asked for it since: a later request builds it
// again.
func (mc *memberCopies) drop(namespace string, since time.Time) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if nc, ok := mc.namespaces[namespace]; ok && nc.holders == 0 && nc.used.Before(since) && len(nc.started()) == 0 {
		nc.stop()
		delete(mc.namespaces, namespace)
	}
}

// copyCaches is the fleet controller's source in every member: started
// as the controller engages a member, it asks the member about every
// Propagation and what the member owes; each run then watches, in the
// member's copy cache of its namespace, the kinds it reads (see
// memberCopies), and each event of a copy becomes a request for its
// Propagation in that member.
type copyCaches struct {
	fleet     string
	userAgent string
	scheme    *runtime.Scheme
	log       logr.Logger
	// propagations lists the Propagations and those whose copies a member
	// owes removing.
	propagations func(ctx context.Context, member string) []types.NamespacedName
	// engaged is told of a member once it is engaged; found of each kind
	// whose informer synced in one of its copy caches.
	engaged func(ctx context.Context, mc *memberCopies)
	found   func(ctx context.Context, mc *memberCopies, w *watchedKinds, gvk schema.GroupVersionKind)
	// watches is told how many informers a member's copy caches run, and
	// watchStarted of each informer started in one.
	watches      func(member string, n int)
	watchStarted func(member string)
	// sweep is how often a member's watches are looked at (see
	// sweepWatches).
	sweep time.Duration
	// driftRecheck is how long a drift check that found none is trusted
	// (see memberCopies.unchanged).
	driftRecheck time.Duration

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
		recheck:      c.driftRecheck,
		watches:      func(n int) { c.watches(clusterName, n) },
		watchStarted: func() { c.watchStarted(clusterName) },
	}
	mc.newCache = func(namespace string) (*watchedKinds, error) {
		ca, err := cache.New(cl.GetConfig(), cache.Options{
			HTTPClient: httpClient, Scheme: c.scheme, Mapper: cl.GetRESTMapper(),
			DefaultNamespaces: map[string]cache.Config{namespace: {}}, DefaultLabelSelector: selector,
			ReaderFailOnMissingInformer: true,
			DefaultWatchErrorHandler:    quietWatchErrors(c.log.WithValues("cluster", clusterName)),
		})
		if err != nil {
			return nil, err
		}
		w := &watchedKinds{
			cluster: "member " + clusterName, grantHint: apply.GrantHint(clusterName), cache: ca, reader: writer, mapper: cl.GetRESTMapper(), selector: selector, namespace: namespace,
			running: make(chan struct{}), echo: mc.echo,
			onEvent: func(old, obj client.Object) {
				mc.copyEvent(old, obj, func(namespace, name string) {
					q.Add(fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
				})
			},
			onInformers: mc.informersChanged,
		}
		w.onSynced = func(ctx context.Context, gvk schema.GroupVersionKind) { c.found(ctx, mc, w, gvk) }
		return w, nil
	}
	c.mu.Lock()
	c.members[clusterName] = mc
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.members[clusterName] == mc {
			delete(c.members, clusterName)
			mc.countMu.Lock()
			defer mc.countMu.Unlock()
			mc.watches(0) // its caches stopped with it
		}
	})
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		c.engaged(ctx, mc)
		// A member that is engaged, or comes back, is asked about every
		// Propagation and what it owes: the requests made before it was
		// engaged, or queued when it left, were dropped. Each run watches
		// what it reads.
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

// memberEngaged tells the member of a lost journal, counts what it owes
// and, while it is engaged, stops the watches nothing needs (see
// sweepWatches).
func (r *reconciler) memberEngaged(ctx context.Context, mc *memberCopies) {
	go r.sweepWatches(ctx, mc)
	r.countOwed(mc.name)
	if rec := r.journal.Recovered(); rec != nil && rec.MovedTo != "" {
		obj := &fleetv1alpha1.MemberCluster{}
		if _, told := r.recoveryTold.LoadOrStore(mc.name, true); !told && r.hub.Get(ctx, types.NamespacedName{Name: mc.name}, obj) == nil {
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonJournalLost, "Recover",
				"the manager's journal could not be used (%v) and was moved to %s: the copies found in this member are recorded again; removals it owed for deleted Propagations are forgotten unless their copies are found", rec.Err, rec.MovedTo)
		}
	}
}

// copiesFound records in the journal the copies of this fleet of kind
// gvk that w, a copy cache of mc's member, found as its informer synced,
// so that a journal that was lost, or kept by another replica, learns
// them again. Only copies that carry the fleet's identity are recorded:
// the journal proves the copies stamped without one.
func (r *reconciler) copiesFound(ctx context.Context, mc *memberCopies, w *watchedKinds, gvk schema.GroupVersionKind) {
	id, err := r.m.FleetID(ctx)
	if err != nil {
		return // the informer stopped, or the manager stops
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := w.cache.List(ctx, list, client.MatchingLabels{fleetv1alpha1.FleetIDLabel: id}); err != nil {
		return // stopped meanwhile
	}
	var found []journal.Copy
	for i := range list.Items {
		if c := apply.JournalCopy(&list.Items[i]); c.Propagation != "" {
			found = append(found, c)
		}
	}
	if len(found) == 0 {
		return
	}
	if err := r.journal.Record(mc.name, found); err != nil && ctx.Err() == nil {
		r.log.Error(err, "Recording the copies found in a member in the journal", "cluster", mc.name)
	}
}

// DefaultDriftRecheck is how long a drift check that found none is
// trusted (Options.DriftRecheck): a copy whose resourceVersion stays is
// compared again at its first run after it, once.
const DefaultDriftRecheck = 5 * time.Minute

// DefaultWatchSweep is how often a member's copy watches are looked at
// (Options.WatchSweep).
const DefaultWatchSweep = time.Minute

// sweepWatches, every sweep interval until ctx ends, stops in each of
// mc's copy caches the informer of each kind that no request asked for
// since the last look and that the namespace no longer needs (see
// neededKinds), and drops the caches left with no informer that no
// request asked for since. When in doubt it keeps them.
func (r *reconciler) sweepWatches(ctx context.Context, mc *memberCopies) {
	t := time.NewTicker(r.copies.sweep)
	defer t.Stop()
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for namespace, nc := range mc.caches() {
			needed, err := r.neededKinds(ctx, mc.name, namespace)
			if err != nil {
				continue
			}
			for _, gvk := range nc.started() {
				if !slices.Contains(needed, gvk) {
					nc.unwatch(gvk, since)
				}
			}
			mc.drop(namespace, since)
		}
		since = now
	}
}

// neededKinds lists the kinds member's copies of namespace must be
// watched in: those the namespace's Propagations copy or copied (see
// kindsOf), and those of the copies and owed removals the journal holds
// of the member there.
func (r *reconciler) neededKinds(ctx context.Context, member, namespace string) ([]schema.GroupVersionKind, error) {
	props, err := r.propagationsIn(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var kinds []schema.GroupVersionKind
	for i := range props {
		kinds = append(kinds, kindsOf(&props[i])...)
	}
	copies, err := r.journal.Copies(member)
	if err != nil {
		return nil, err
	}
	for _, c := range copies {
		if c.Namespace == namespace {
			kinds = append(kinds, c.GVK)
		}
	}
	owed, err := r.journal.Owed(member)
	if err != nil {
		return nil, err
	}
	for _, o := range owed {
		if o.Namespace == namespace {
			kinds = append(kinds, o.Kinds...)
		}
	}
	return kinds, nil
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

// list returns the hub objects of namespace that sel selects: the
// cache's own, which no caller may change.
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
	// The cache's own objects, not copies: content reads them and copies
	// what it keeps (see content.Authored).
	objs, err := c.list(ctx, gvk, namespace, selector, client.UnsafeDisableDeepCopy)
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
