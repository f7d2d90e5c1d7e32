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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/revisions"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// ControllerName names the controller in --controllers, logs and metrics.
const ControllerName = "propagation"

// DefaultWorkers is how many (member, Propagation) pairs are reconciled
// at once.
const DefaultWorkers = 16

// workersPerMember is how many of workers one member's requests may hold
// at once: a member that hangs holds at most a quarter of them.
func workersPerMember(workers int) int { return max(1, workers/4) }

// StatusInterval is the least time between two summings up, and so
// writes, of one Propagation's status, however many members report; but
// the sum that completes the picture (the last member result of a
// generation is in: every selected member converged, or one failed) is
// written at once, each such picture once per generation: at most one
// write per interval plus two per generation.
const StatusInterval = time.Second

// DefaultForgetAfter is how long a member may be gone from the fleet (its
// registration deleted, or of a format not enabled) before the journal
// forgets what it owes: a registration deleted and created again, under
// the same name, within it gets its owed removals.
const DefaultForgetAfter = 7 * 24 * time.Hour

// Options configure the Propagation controller.
type Options struct {
	// Workers is how many requests are reconciled at once. Default:
	// DefaultWorkers.
	Workers int
	// Client reads Propagations from the manager's cache and writes them.
	// Default: a client of Config reading from the manager's cache.
	Client client.Client
	// Config is the hub config the hub object caches are built from; its
	// user agent is also given to every member request. Default: the
	// manager's, with user agent "fleet-manager/propagation".
	Config *rest.Config
	// Journal is where the controller records the copies it applies in
	// each member and the removals members owe. Required.
	Journal *journal.Journal
	// ForgetAfter is how long a member may be gone from the fleet before
	// the journal forgets what it owes. Default: DefaultForgetAfter.
	ForgetAfter time.Duration
	// OwedRemovals, if set, is where each member's owed removals are
	// published, oldest first, for the MemberCluster controller.
	OwedRemovals *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	// Drains, if set, is where each drained member's drain is published,
	// for the MemberCluster controller.
	Drains *registry.Facts[fleetv1alpha1.DrainStatus]
	// WatchSweep is how often each member's copy watches are looked at: a
	// kind's informer that no run read since the last look, and that
	// neither the Propagations of its namespace nor what the journal holds
	// of the member there need, is stopped. Default: DefaultWatchSweep.
	WatchSweep time.Duration
	// DriftRecheck is how long a member's copy checked free of drift is
	// not compared again while its resourceVersion and desired content
	// stay. A member that gives a resourceVersion again to other content
	// (one restored from an etcd backup) has that drift found within it.
	// Default: DefaultDriftRecheck.
	DriftRecheck time.Duration
	// Tenancy is whether the TenancyPolicies of the hub decide which
	// members each namespace's Propagations may reach, and with which
	// kinds (see package tenancy): Enforce, Off (""), or Auto, which
	// enforces them in a fleet whose identity ConfigMap says it was
	// created with tenancy. ClusterPropagations are outside tenancy.
	Tenancy string
}

// NewOwedRemovals returns an empty store of owed removals for
// Options.OwedRemovals and their readers.
func NewOwedRemovals() *registry.Facts[[]fleetv1alpha1.OwedRemoval] {
	return registry.NewFacts(slices.Equal[[]fleetv1alpha1.OwedRemoval])
}

// reconciler reconciles two kinds of requests: one per member and
// Propagation, which makes that member's copies what the Propagation
// wants, and one per Propagation on the hub (cluster ""), which writes its
// status from the members' results and releases its finalizer.
type reconciler struct {
	m     *fleet.Manager
	fleet string
	hub   client.Client
	// live reads the hub itself, where its cache may lag.
	live     client.Reader
	recorder events.EventRecorder
	log      logr.Logger
	journal  *journal.Journal
	objects  *hubObjects
	copies   *copyCaches
	results  *results
	metrics  *propagationMetrics
	owed     *owedKeeper
	// owedRemovals, if not nil, publishes each member's owed removals.
	owedRemovals *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	// drains, if not nil, publishes each drained member's drain.
	drains *registry.Facts[fleetv1alpha1.DrainStatus]
	// content builds what Propagations apply from the hub objects, once
	// per change, and shares it.
	content *content.Cache
	// shared keeps the copies built once for every member.
	shared apply.SharedCopies
	// revisions makes, loads and prunes the Propagations' revisions.
	revisions *revisions.Store
	// refusedRevisions remembers the revisions the hub refused.
	refusedRevisions refusalBook
	// queue takes the requests the controller makes itself.
	queue controllerQueue
	// unreachable holds the members whose runs could not reach them.
	unreachable unreachableLog

	// mu guards lastStatus, what each Propagation's last status sum saw
	// and when, and readiness, each Propagation's Ready status, for
	// fleet_propagations.
	mu         sync.Mutex
	lastStatus map[propagationKey]statusSum
	readiness  map[propagationKey]string
	// recoveryTold holds the members told that the journal was lost.
	recoveryTold sync.Map
	// mirrorCut holds, by mirror ConfigMap, how many owed removals it
	// last had no room for.
	mirrorCut sync.Map
	// clusterPropagations is set when the hub serves ClusterPropagations.
	clusterPropagations bool
	// tenancy says what each namespace's Propagations may reach.
	tenancy *tenancyView
	// env is what member runs use of the controller.
	env *runEnv
}

// Add adds the Propagation controller to m. A hub without the Propagation
// CRD gets none: Add logs that and returns nil.
func Add(m *fleet.Manager, opts Options) error {
	if _, err := m.GetRESTMapper().RESTMapping(schema.GroupKind{Group: fleetv1alpha1.GroupVersion.Group, Kind: "Propagation"}, fleetv1alpha1.GroupVersion.Version); meta.IsNoMatchError(err) {
		m.GetLogger().Info("The hub has no Propagation CRD: objects are not propagated (install deploy/crd)")
		return nil
	}
	if opts.Journal == nil {
		return errors.New("the Propagation controller needs a journal")
	}
	_, err := m.GetRESTMapper().RESTMapping(schema.GroupKind{Group: fleetv1alpha1.GroupVersion.Group, Kind: "ClusterPropagation"}, fleetv1alpha1.GroupVersion.Version)
	clusterPropagations := err == nil
	if !clusterPropagations {
		m.GetLogger().Info("The hub has no ClusterPropagation CRD: cluster-scoped objects are not propagated (install deploy/crd)")
	}
	if _, err := tenancy.Mode(opts.Tenancy, nil); err != nil {
		return err
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.WatchSweep <= 0 {
		opts.WatchSweep = DefaultWatchSweep
	}
	if opts.DriftRecheck <= 0 {
		opts.DriftRecheck = DefaultDriftRecheck
	}
	if opts.Config == nil {
		opts.Config = rest.CopyConfig(m.GetConfig())
		opts.Config.UserAgent = "fleet-manager/" + ControllerName
	}
	apiReader, err := client.New(opts.Config, client.Options{Scheme: m.GetScheme(), Mapper: m.GetRESTMapper()})
	if err != nil {
		return err
	}
	if err := mayListPropagations(apiReader); apierrors.IsForbidden(err) {
		m.GetLogger().Error(err, "The manager may not list Propagations on the hub: objects are not propagated (grant the ClusterRole in deploy/propagation-rbac.yaml)")
		return nil
	} else if err != nil {
		return fmt.Errorf("listing Propagations on the hub: %w", err)
	}
	if opts.Client == nil {
		opts.Client, err = client.New(opts.Config, client.Options{
			Scheme: m.GetScheme(), Mapper: m.GetRESTMapper(), Cache: &client.CacheOptions{Reader: m.GetCache()},
		})
		if err != nil {
			return err
		}
	}
	pm, err := newMetrics(crmetrics.Registry, func(name string) bool {
		return writesSeries(m.Registry().Get(name))
	})
	if err != nil {
		return err
	}
	if rec := opts.Journal.Recovered(); rec != nil && rec.MovedTo != "" {
		pm.journalLost.SetToCurrentTime()
	}
	log := m.GetLogger().WithValues("controller", ControllerName)
	r := &reconciler{
		m: m, fleet: m.Namespace(), hub: opts.Client, live: apiReader, log: log, journal: opts.Journal,
		recorder: m.GetEventRecorder("fleet-manager"),
		results:  newResults(),
		metrics:  pm,
		owed:     newOwedKeeper(apiReader, opts.ForgetAfter),

		owedRemovals: opts.OwedRemovals,
		drains:       opts.Drains,

		lastStatus: map[propagationKey]statusSum{},
		readiness:  map[propagationKey]string{},

		clusterPropagations: clusterPropagations,
		tenancy:             tenancyViewOf(m, opts, apiReader),
	}
	r.objects = &hubObjects{fleet: m.Namespace(), config: opts.Config, scheme: m.GetScheme(), mapper: m.GetRESTMapper(), reader: apiReader, log: log, changed: r.hubObjectChanged}
	r.content = content.NewCache(&content.Builder{Fleet: m.Namespace(), Mapper: m.GetRESTMapper(), List: r.objects.list})
	r.content.Built = pm.contentBuilds.Inc
	r.revisions = &revisions.Store{Hub: opts.Client, Live: apiReader, Fleet: m.Namespace()}
	r.env = r.runEnv()
	r.copies = &copyCaches{
		fleet: m.Namespace(), userAgent: opts.Config.UserAgent, scheme: m.GetScheme(), log: log,
		propagations: r.memberPropagations, engaged: r.memberEngaged, found: r.copiesFound, sweep: opts.WatchSweep, driftRecheck: opts.DriftRecheck,
		watches:      func(member string, n int) { pm.memberWatches.WithLabelValues(member).Set(float64(n)) },
		watchStarted: func(member string) { pm.memberWatchStarts.WithLabelValues(member).Inc() },
		members:      map[string]*memberCopies{},
	}
	b := fleet.NewControllerManagedBy(m).
		Named(ControllerName).
		WatchesFleet(&fleetv1alpha1.Propagation{}, r.everyCluster, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), notStatusOnly)).
		WatchesFleet(&fleetv1alpha1.Propagation{}, statusOf, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), statusOnly)).
		WatchesFleet(&fleetv1alpha1.Propagation{}, r.everyCluster, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), rolloutChanged))
	if clusterPropagations {
		b = b.WatchesFleet(&fleetv1alpha1.ClusterPropagation{}, r.everyCluster, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), notStatusOnly)).
			WatchesFleet(&fleetv1alpha1.ClusterPropagation{}, statusOf, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), statusOnly)).
			WatchesFleet(&fleetv1alpha1.ClusterPropagation{}, r.everyCluster, fleet.InClusters(fleet.Hub), fleet.WithPredicates(r.concerned(), rolloutChanged))
	}
	b = b.WatchesFleet(&fleetv1alpha1.PropagationRevision{}, r.revisionMade, fleet.InClusters(fleet.Hub), fleet.WithPredicates(createdOnly))
	return b.WatchesFleet(&fleetv1alpha1.MemberCluster{}, r.memberMaintained, fleet.InClusters(fleet.Hub), fleet.WithPredicates(maintenanceChanged)).
		WatchesClusterSource(hubEngagement{r}, fleet.InClusters(fleet.Hub)).
		WatchesClusterSource(r.copies).
		WithOptions(fleet.ControllerOptions{
			TypedOptions:                      controller.TypedOptions[fleet.Request]{MaxConcurrentReconciles: opts.Workers},
			MaxConcurrentReconcilesPerCluster: workersPerMember(opts.Workers),
		}).
		Complete(r)
}

// mayListPropagations lists one Propagation: a manager that may not list
// them would wait forever for its cache of them.
func mayListPropagations(reader client.Reader) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return reader.List(ctx, &fleetv1alpha1.PropagationList{}, client.Limit(1))
}

// hubEngagement is the controller's source on the hub: while the hub is
// engaged (while this replica leads), the hub object caches live, the
// controller's queue is handed to r.queue (see controllerQueue), and
// every registry event asks the Propagations again about that member.
type hubEngagement struct{ r *reconciler }

func (h hubEngagement) String() string { return "propagated hub objects" }

func (h hubEngagement) Start(ctx context.Context, _ string, _ cluster.Cluster, q engage.Queue) (<-chan struct{}, error) {
	r := h.r
	r.queue.set(q)
	r.objects.start(ctx)
	go r.keepOwed(ctx)
	go r.tenancy.run(ctx, r.m.FleetID, r.tenancyChanged)
	go r.m.Registry().Subscribe(ctx).Run(ctx, 1, r.memberChanged)
	synced := make(chan struct{})
	close(synced)
	return synced, nil
}

// controllerQueue is the one way the controller's queue reaches what
// asks for requests outside a source's events: a hub object or a member
// that changed, a member result that asks for its Propagation's status,
// a failed owed removal's retry, an owed removal found on the hub. The
// fleet controller hands its queue, the same for every cluster, to each
// source it starts; hubEngagement hands it on here with set, as the hub
// is engaged. Until then add and addAfter drop their requests: the hub's
// engagement asks about every Propagation again. (copyCaches adds the
// requests of the member it is started in, its copies' events and the
// member's first round, to the queue its Start is given.)
type controllerQueue struct {
	mu sync.Mutex
	q  engage.Queue
}

// set makes q the controller's queue.
func (cq *controllerQueue) set(q engage.Queue) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.q = q
}

func (cq *controllerQueue) get() engage.Queue {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.q
}

// add adds reqs to the controller's queue, once there is one; a status
// request at statusPriority.
func (cq *controllerQueue) add(reqs ...fleet.Request) {
	for _, req := range reqs {
		cq.addAfter(req, 0)
	}
}

// addAfter adds req to the controller's queue after d, once there is one;
// a status request at statusPriority.
func (cq *controllerQueue) addAfter(req fleet.Request, d time.Duration) {
	q := cq.get()
	if pq, ok := q.(priorityqueue.PriorityQueue[fleet.Request]); ok && req.ClusterName == registry.HubName {
		pq.AddWithOpts(priorityqueue.AddOpts{After: d, Priority: ptr.To(statusPriority)}, req)
		return
	}
	switch {
	case q == nil:
	case d > 0:
		q.AddAfter(req, d)
	default:
		q.Add(req)
	}
}

// statusPriority is the priority of a Propagation's status requests
// (its hub requests) in the controller's queue, above the members'
// requests (0): the fair queue hands out one request of each cluster in
// turn within a priority, so at 0 a status request would wait, after
// the last member result it sums up, for one request of every member
// with work queued, each Propagation's. Its cost is bounded: the hub,
// like a member, holds at most workersPerMember workers at once, and a
// Propagation's status is summed up at most once per StatusInterval,
// and at most twice more per generation (see statusSum.earlySum).
const statusPriority = 1

// notStatusOnly drops the update events of a Propagation's own status
// writes, each of which would otherwise ask every member again.
var notStatusOnly = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
		!maps.Equal(o.GetLabels(), n.GetLabels())
}}

// statusOnly passes only the update events of a Propagation's own status
// writes. Each asks for the status once more: the cache may have held an
// older status when the last one was decided equal to it, and nothing else
// would ask again.
var statusOnly = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc:  func(e event.UpdateEvent) bool { return !notStatusOnly.Update(e) },
}

// statusOf maps a Propagation to the request for its status.
func statusOf(_ context.Context, _ string, obj client.Object) []fleet.Request {
	return []fleet.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
}

// everyCluster maps a Propagation to a request for its status on the hub
// and one for each engaged member.
func (r *reconciler) everyCluster(_ context.Context, _ string, obj client.Object) []fleet.Request {
	key := client.ObjectKeyFromObject(obj)
	reqs := []fleet.Request{{NamespacedName: key}}
	for _, name := range r.m.ClusterNames() {
		reqs = append(reqs, fleet.Request{ClusterName: name, NamespacedName: key})
	}
	return reqs
}

// revisionMade maps a revision this fleet made of a Propagation whose
// members apply the hub's content at once (see allAtOnce) to a request
// for each engaged member whose last run applied the revision's content
// without its number (see memberResult.unlabelled): it applied before
// the revision was made, and now labels its copies with its number. A
// member whose run made the revision, or found it made, labelled them
// already (see revisionNumber); one whose run is under way records its
// result after this, and asks itself again (see relabelLater).
func (r *reconciler) revisionMade(ctx context.Context, _ string, obj client.Object) []fleet.Request {
	l := obj.GetLabels()
	if l[fleetv1alpha1.FleetLabel] != r.fleet {
		return nil
	}
	key := propagationKey{Name: l[fleetv1alpha1.PropagationLabel]}
	if l[fleetv1alpha1.RevisionOfLabel] == "Propagation" {
		key.Namespace = obj.GetNamespace()
	} else if !r.clusterPropagations {
		return nil
	}
	p, err := r.getPropagation(ctx, key)
	if err != nil || !r.ours(p) || !allAtOnce(&p.Spec) {
		return nil
	}
	hash := l[fleetv1alpha1.RevisionHashLabel]
	return slices.DeleteFunc(r.everyCluster(ctx, "", p), func(req fleet.Request) bool {
		res, _ := r.results.get(key, req.ClusterName)
		return req.ClusterName == registry.HubName || !res.unlabelled(p) || res.revision != hash
	})
}

// relabelLater asks member again about Propagation p, of key, when its result
// res, just recorded, applied p's content without a revision number,
// and the revision of that content is made already: revisionMade may
// have seen the member's result before this one.
func (r *reconciler) relabelLater(ctx context.Context, key propagationKey, p *fleetv1alpha1.Propagation, member string, res memberResult) {
	if p == nil || !res.unlabelled(p) {
		return
	}
	if n, err := r.revisions.NewestOf(ctx, p, res.revision); err == nil && n > 0 {
		r.queue.add(fleet.Request{ClusterName: member, NamespacedName: key})
	}
}

// createdOnly passes only create events.
var createdOnly = predicate.Funcs{
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// hubObjectChanged asks again, in every member, each Propagation of
// namespace that selects the hub object before its change (old, nil for a
// create) or after it: the others have nothing to do. An object a
// Propagation refuses is selected too, so that it reports the refusal; an
// invalid selector selects nothing.
func (r *reconciler) hubObjectChanged(namespace string, old, obj client.Object) {
	props, err := r.propagationsIn(context.Background(), namespace)
	if err != nil {
		return
	}
	for i := range props {
		p := &props[i]
		if content.SelectsObject(p, old) || content.SelectsObject(p, obj) {
			r.queue.add(r.everyCluster(context.Background(), "", p)...)
		}
	}
}

// memberChanged asks every Propagation again about a member whose
// registration, acceptance, labels or state changed, and the Propagations
// that failed there about one whose kubeconfig changed; it records in the
// journal when a member left and that it is back: what a member owes is
// kept until it has been gone longer than forgetAfter (keepOwed forgets
// it), so a registration deleted and created again keeps it.
func (r *reconciler) memberChanged(ctx context.Context, e registry.Event) {
	if !e.Registered() && !e.Removed() && !e.LabelsChanged() && !e.StateChanged() && e.Old.Accepted() == e.New.Accepted() {
		if newKubeconfig(e) {
			// A new credential may have the rights a failure lacked.
			for _, key := range r.results.retryFailed(e.Name) {
				r.queue.add(fleet.Request{ClusterName: e.Name, NamespacedName: key})
			}
		}
		return // a probe, or a new credential: nothing else a Propagation reads
	}
	if e.Removed() || !e.New.Accepted() {
		r.results.forgetMember(e.Name)
		r.metrics.forget(e.Name)
	}
	var err error
	switch {
	case e.Removed():
		err = r.journal.Depart(e.Name, time.Now())
	case e.Registered():
		err = r.journal.Return(e.Name)
	}
	if err != nil {
		r.log.Error(err, "Recording in the journal whether a member left", "cluster", e.Name)
	}
	if e.StateChanged() && e.New.State == fleetv1alpha1.MemberStateReady {
		if mc := r.copies.get(e.Name); mc != nil {
			r.owed.again(mc)
		}
	}
	props, err := r.propagations(ctx)
	if err != nil {
		return
	}
	for i := range props {
		key := client.ObjectKeyFromObject(&props[i])
		r.queue.add(fleet.Request{NamespacedName: key}, fleet.Request{ClusterName: e.Name, NamespacedName: key})
	}
}

// newKubeconfig reports whether e is an accepted member's new kubeconfig,
// as a rotated credential.
func newKubeconfig(e registry.Event) bool {
	_, old, ok := e.Old.Registration()
	_, now, accepted := e.New.Registration()
	return ok && accepted && old != now
}
