// Package mcprovider runs multicluster-runtime controllers on a fleet:
// its Provider is a multicluster.Provider and
// multicluster.ProviderRunnable over a fleet.Manager, so that a
// controller built with multicluster-runtime's mcbuilder works on the
// fleet's members unchanged.
//
// # Usage
//
// Wrap the fleet manager, which stays multicluster-runtime's local
// cluster (the hub), and build controllers on the result:
//
//	fm, _ := fleet.New(cfg, fleet.Options{...})
//	provider := mcprovider.New(fm, mcprovider.Options{})
//	mgr, _ := mcmanager.WithMultiCluster(fm, provider)
//	_ = mcbuilder.ControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(r)
//	_ = mgr.Start(ctx)
//
// The members are those the fleet registers, in every format it reads
// (multicluster-runtime's kubeconfig Secrets among them: add
// registry.MulticlusterRuntimeFormat to fleet.Options.SecretFormats).
//
// # Lifecycle
//
// Start hands multicluster-runtime every member this replica owns as the
// fleet engages it (fleet.Manager.EngageMembers), once it has answered a
// probe on that connection (multicluster-runtime's controller waits for
// a cluster's cache under its lock), under a context that
// ends when the member leaves, is disconnected, moves to another replica
// or the filter stops accepting it. A member whose credentials are
// rotated in place keeps its cluster.Cluster and is not engaged again.
//
// Get returns a member's cluster, or an error wrapping
// multicluster.ErrClusterNotFound for the hub's name "", a name not
// registered or refused, a member the filter refuses, one not connected
// now, or one another replica owns (or this one is still taking over):
// multicluster-runtime's builder then drops the request, so a request
// never reaches the reconciler on a replica that does not own its member.
// While this replica cannot prove that it holds its Lease, Get of its own
// member returns an error wrapping fleet.ErrNotOwned only, and the
// request is retried with backoff.
//
// # Fairness and metrics, opt-in
//
// A multicluster-runtime controller has controller-runtime's queue,
// first in, first out across all clusters, and per-controller metrics.
// Two options give it what fleet controllers have:
//
//	mcbuilder.ControllerManagedBy(mgr).Named("configmaps").For(&corev1.ConfigMap{}).
//		WithOptions(mccontroller.Options{NewQueue: provider.FairQueue(mcprovider.QueueOptions{})}).
//		Complete(provider.MeteredReconciler("configmaps", r))
//
// FairQueue is the fleet's fair queue (package fairqueue): within a
// priority, one request of each cluster in turn, so a member's backlog
// delays another member's request by at most one request of each busy
// member; optionally a cap of reconciles in flight per member. A member's
// queued requests are dropped when its engagement ends.
// MeteredReconciler writes the fleet's per-cluster reconcile series. Both
// are labelled with the controller's name; see their documentation for
// the series.
package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// Options configure a Provider.
type Options struct {
	// Filter, if set, limits the members handed to multicluster-runtime,
	// by name and registration labels; it is asked again whenever a
	// member's labels change.
	Filter fleet.ClusterFilter
}

// Provider is a multicluster-runtime provider of a fleet's members.
type Provider struct {
	mgr    *fleet.Manager
	filter fleet.ClusterFilter

	// mu guards engaged: the context of each member's live engagement
	// with multicluster-runtime; begun: the context of each member's
	// latest engagement begun, whose requests the fair queues keep; and
	// queues: the fair queues made (FairQueue). A member is kept in, or
	// dropped from, the queues under mu, together with begun, so that the
	// end of an engagement never drops the requests of a later one.
	mu      sync.Mutex
	engaged map[string]context.Context
	begun   map[string]context.Context
	queues  []*fairqueue.Queue[mcreconcile.Request]
	// started is set by the first Start.
	started atomic.Bool
}

var (
	_ multicluster.Provider         = (*Provider)(nil)
	_ multicluster.ProviderRunnable = (*Provider)(nil)
)

// New returns a provider of mgr's members.
func New(mgr *fleet.Manager, opts Options) *Provider {
	return &Provider{mgr: mgr, filter: opts.Filter, engaged: map[string]context.Context{}, begun: map[string]context.Context{}}
}

// Start engages aware with every member as the fleet engages it, until
// ctx ends, and returns once every engagement has ended.
// multicluster-runtime's manager calls it as it starts.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	if !p.started.CompareAndSwap(false, true) {
		return errStartedTwice
	}
	return p.mgr.EngageMembers(ctx, &engager{p: p, aware: aware}, p.filter)
}

// errStartedTwice refuses a second Start: one provider hands its members
// to one multicluster-runtime manager, and ListClusters speaks of it.
var errStartedTwice = errors.New("mcprovider: Start called twice: a Provider serves one multicluster-runtime manager")

// Get returns member clusterName's cluster, or an error wrapping
// multicluster.ErrClusterNotFound unless this replica works on it now.
func (p *Provider) Get(ctx context.Context, clusterName multicluster.ClusterName) (cluster.Cluster, error) {
	name := string(clusterName)
	if clusterName.Empty() {
		return nil, fmt.Errorf("%w: the hub is multicluster-runtime's local cluster, not a member", multicluster.ErrClusterNotFound)
	}
	registered, ok := p.mgr.Registry().Get(name)
	if ok && p.filter != nil && !p.filter(name, registered.Labels) {
		return nil, fmt.Errorf("%w: %q: not selected by the provider's filter", multicluster.ErrClusterNotFound, name)
	}
	cl, err := p.mgr.GetCluster(ctx, name)
	switch {
	case err == nil:
		return cl, nil
	case ok && registered.Owned() && errors.Is(err, fleet.ErrNotOwned):
		// Its own member, while it cannot prove that it holds its
		// Lease: retried, not dropped.
		return nil, err
	default:
		return nil, fmt.Errorf("%w: %w", multicluster.ErrClusterNotFound, err)
	}
}

// IndexField adds an index to every member, present and future (not to
// the hub, which multicluster-runtime indexes through its local manager).
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return p.mgr.GetMemberFieldIndexer().IndexField(ctx, obj, field, extract)
}

// ListClusters returns the names of the members engaged with
// multicluster-runtime now, sorted.
func (p *Provider) ListClusters() []multicluster.ClusterName {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := slices.Sorted(maps.Keys(p.engaged))
	out := make([]multicluster.ClusterName, len(names))
	for i, n := range names {
		out[i] = multicluster.ClusterName(n)
	}
	return out
}

// engager hands the fleet's engagements to multicluster-runtime and
// keeps the provider's list of engaged members.
type engager struct {
	p     *Provider
	aware multicluster.Aware
}

func (e *engager) Engage(ctx context.Context, clusterName string, cl cluster.Cluster) error {
	// multicluster-runtime's controller engages a cluster under its lock,
	// and waits there for the cluster's cache to sync: a member that never
	// answers would hold every later member's engagement. It is handed
	// over once it answered a probe.
	ready := e.p.mgr.MemberReadyOn(clusterName, cl)
	if ready == nil {
		return errNotCurrent
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.p.begin(ctx, clusterName)
	if err := e.aware.Engage(ctx, multicluster.ClusterName(clusterName), cl); err != nil {
		return err
	}
	e.p.mu.Lock()
	e.p.engaged[clusterName] = ctx
	e.p.mu.Unlock()
	context.AfterFunc(ctx, func() {
		e.p.mu.Lock()
		defer e.p.mu.Unlock()
		if e.p.engaged[clusterName] == ctx {
			delete(e.p.engaged, clusterName)
		}
	})
	return nil
}

// begin keeps clusterName in the fair queues for the engagement ctx, and
// drops it from them when ctx ends, unless another engagement has begun
// since. It is called before multicluster-runtime starts the
// engagement's sources, so that none of their requests is dropped.
func (p *Provider) begin(ctx context.Context, clusterName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.begun[clusterName] == ctx { // a retried Engage
		return
	}
	p.begun[clusterName] = ctx
	for _, q := range p.lockedQueues() {
		q.Keep(clusterName)
	}
	context.AfterFunc(ctx, func() { p.end(ctx, clusterName) })
}

// end drops clusterName from the fair queues as its engagement ctx ends,
// unless another engagement has begun since.
func (p *Provider) end(ctx context.Context, clusterName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.begun[clusterName] != ctx {
		return
	}
	delete(p.begun, clusterName)
	for _, q := range p.lockedQueues() {
		q.Drop(clusterName)
	}
}

// errNotCurrent refuses the engagement of a cluster the member no longer
// runs: its engagement is ending.
var errNotCurrent = errors.New("mcprovider: the member runs another cluster now")

// String names multicluster-runtime among the fleet's controllers, as in
// MemberCluster status.
func (*engager) String() string { return "multicluster-runtime" }
