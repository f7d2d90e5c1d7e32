package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// controller is a fleet controller as an engage.Aware: it starts its
// sources in each cluster it is handed and drops that cluster's work when
// the cluster leaves. Its controller-runtime controller owns the queue and
// the workers; it hands its queue over by starting the one source it
// knows of, engagements.
type controller struct {
	name string
	// accepts filters the clusters the controller engages; nil accepts all.
	accepts     func(clusterName string) bool
	sources     []scopedSource
	syncTimeout time.Duration
	do          Reconciler
	// fair is the queue, once the controller-runtime controller made
	// it; nil if the options bring a queue of their own.
	fair    atomic.Pointer[fairqueue.Queue[Request]]
	metrics *fleetMetrics

	// ready closes when the controller-runtime controller has started;
	// ctx and queue are set before.
	ready chan struct{}
	ctx   context.Context
	queue engage.Queue

	// hub is the hub cluster, whose objects fanned out to members are
	// replayed to each member the controller engages.
	hub cluster.Cluster
	// registry says which members' work is held: a queue made, or a
	// member engaged again, takes the holds from it.
	registry *registry.Registry
	// mayAct refuses, with a reason, a member's requests while this
	// replica cannot prove that it holds its Lease.
	mayAct func(clusterName string) error

	// mu guards engaged: each engaged cluster's engagement context (a
	// cluster's requests are reconciled only while its context lives);
	// and reconciling: the reconciles in flight per cluster. Holds are
	// applied under it, each after reading the registry, so that a hold
	// and a release cannot pass each other.
	mu          sync.Mutex
	engaged     map[string]context.Context
	reconciling map[string]*sync.WaitGroup
}

var (
	_ engage.Disengager = (*controller)(nil)
	_ engage.Selector   = (*controller)(nil)
)

func (c *controller) String() string { return c.name }

// engagements is the controller-runtime source of a fleet controller:
// started by the controller, it receives the controller's queue and opens
// the controller to engagements.
type engagements struct{ c *controller }

func (e engagements) Start(ctx context.Context, q engage.Queue) error {
	e.c.ctx, e.c.queue = ctx, q
	close(e.c.ready)
	return nil
}

func (e engagements) String() string { return "fleet engagements of " + e.c.name }

// Accepts applies the controller's cluster filter; the hub is always
// accepted. A controller engages every cluster it accepts, also where none
// of its sources watch: a watch elsewhere may map objects to requests for
// it.
func (c *controller) Accepts(clusterName string) bool {
	return clusterName == registry.HubName || c.accepts == nil || c.accepts(clusterName)
}

// Engage starts every source of the controller in cl, then waits, at most
// syncTimeout, until each has seen its informer's initial list. The
// informers list in parallel. A member is then handed the requests that
// hub objects fanned out to members made before it joined.
func (c *controller) Engage(ctx context.Context, clusterName string, cl cluster.Cluster) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil
	}
	// The engagement ends with the cluster or with the controller.
	ctx, cancel := context.WithCancel(ctx)
	stopWithController := context.AfterFunc(c.ctx, cancel)

	c.mu.Lock()
	c.engaged[clusterName] = ctx
	if q := c.fair.Load(); q != nil {
		q.Keep(clusterName)
		if member, ok := c.registry.Get(clusterName); ok && held(member) {
			q.Hold(clusterName, true) // a Disengage's Drop forgot it
		}
	}
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		stopWithController()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.engaged[clusterName] == ctx {
			delete(c.engaged, clusterName)
		}
	})

	timeout := time.NewTimer(c.syncTimeout)
	defer timeout.Stop()
	type started struct {
		src    engage.Source
		synced <-chan struct{}
	}
	var sources []started
	for _, scoped := range c.sources {
		if !scoped.clusters.include(clusterName) {
			continue
		}
		synced, err := scoped.src.Start(ctx, clusterName, cl, c.queue)
		if err != nil {
			cancel()
			return fmt.Errorf("%s: %w", scoped.src, err)
		}
		sources = append(sources, started{src: scoped.src, synced: synced})
	}
	for _, s := range sources {
		select {
		case <-s.synced:
		case <-ctx.Done():
			return nil
		case <-timeout.C:
			cancel()
			return fmt.Errorf("%s: informer not synced within %s", s.src, c.syncTimeout)
		}
	}
	if clusterName == registry.HubName {
		return nil
	}
	for _, scoped := range c.sources {
		kind, fansOut := scoped.src.(*engage.Kind)
		if !scoped.fansOut || !fansOut || !scoped.clusters.include(registry.HubName) {
			continue
		}
		replayCtx, stop := context.WithTimeout(ctx, c.syncTimeout)
		err := kind.Replay(replayCtx, registry.HubName, c.hub, c.queue, clusterName)
		stop()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			cancel()
			return fmt.Errorf("%s: replaying hub objects: %w", kind, err)
		}
	}
	return nil
}

// Disengage waits for the reconciles of a cluster that left, whose
// contexts are cancelled, then drops its queued requests. Until then, no
// new reconcile of the cluster starts and its requests are not handed to
// the reconciler.
func (c *controller) Disengage(clusterName string) {
	c.mu.Lock()
	delete(c.engaged, clusterName)
	inFlight := c.reconciling[clusterName]
	delete(c.reconciling, clusterName)
	c.mu.Unlock()
	if inFlight != nil {
		inFlight.Wait()
	}
	if q := c.fair.Load(); q != nil {
		q.Drop(clusterName)
	}
}

// hold keeps a cluster's requests queued, without handing them to a
// worker, while held. Before the queue exists it does nothing: the queue
// takes the holds from the registry when it is made.
func (c *controller) hold(clusterName string, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.fair.Load(); q != nil {
		q.Hold(clusterName, held)
	}
}

// setQueue makes q the controller's fair queue and holds the work of the
// members held now.
func (c *controller) setQueue(q *fairqueue.Queue[Request]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fair.Store(q)
	for _, member := range c.registry.List() {
		if held(member) {
			q.Hold(member.Name, true)
		}
	}
}

// incomingRetry is when a request of a member this replica is still
// taking over is tried again, if its hold did not keep it queued.
const incomingRetry = 100 * time.Millisecond

// Reconcile runs the user's reconciler for requests of engaged clusters
// this replica owns, under a context that ends when the cluster leaves,
// and drops the rest: requests that were being handed out as their
// cluster left, or went to another replica. A member's request waits
// while this replica cannot prove that it holds its Lease, checked here,
// as it is handed out: a process that was paused starts none after it
// woke, though the registry still says the member is its own until its
// replica's next pass.
func (c *controller) Reconcile(ctx context.Context, req Request) (reconcile.Result, error) {
	if req.ClusterName != registry.HubName {
		member, ok := c.registry.Get(req.ClusterName)
		if ok && member.Ownership == registry.Incoming {
			return reconcile.Result{RequeueAfter: incomingRetry}, nil
		}
		if !ok || !member.Owned() {
			return reconcile.Result{}, nil
		}
		if c.mayAct(req.ClusterName) != nil {
			return reconcile.Result{RequeueAfter: incomingRetry}, nil
		}
	}
	c.mu.Lock()
	clusterCtx, ok := c.engaged[req.ClusterName]
	if !ok || clusterCtx.Err() != nil {
		c.mu.Unlock()
		return reconcile.Result{}, nil
	}
	inFlight := c.reconciling[req.ClusterName]
	if inFlight == nil {
		inFlight = &sync.WaitGroup{}
		c.reconciling[req.ClusterName] = inFlight
	}
	inFlight.Add(1)
	c.mu.Unlock()
	defer inFlight.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(clusterCtx, cancel)
	defer stop()
	start := time.Now()
	result, err := c.do.Reconcile(ctx, req)
	if clusterCtx.Err() == nil { // a removed cluster's series are gone for good
		c.metrics.observeReconcile(c.name, req.ClusterName, time.Since(start), err)
	}
	return result, err
}

// scopedSource is a source and the clusters it watches. fansOut marks a
// source whose requests name their clusters (WatchesFleet).
type scopedSource struct {
	src      engage.Source
	clusters Clusters
	fansOut  bool
}

// Clusters says which clusters a watch covers.
type Clusters int

const (
	// Members watches every member cluster, not the hub. The default.
	Members Clusters = iota
	// Hub watches only the hub.
	Hub
	// HubAndMembers watches the hub and every member.
	HubAndMembers
)

func (c Clusters) include(clusterName string) bool {
	if clusterName == registry.HubName {
		return c != Members
	}
	return c != Hub
}
