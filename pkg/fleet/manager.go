package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// DefaultNamespace is the default fleet namespace.
const DefaultNamespace = "fleet-system"

// DefaultHubQPS and DefaultHubBurst limit the hub client of a config that
// sets no limit. client-go's own 5 QPS would let MemberCluster status lag
// by minutes behind a few hundred registrations; the hub's API Priority
// and Fairness still protects it.
const (
	DefaultHubQPS   = 200
	DefaultHubBurst = 400
)

// DefaultGCPercent is the garbage collector's target percentage New sets
// when the environment sets no GOGC. A fleet manager's heap is mostly its
// members' caches: long-lived objects, allocated once and rarely freed.
// At Go's default, 100, a process keeps about twice its live heap; at 25,
// a quarter more. The CPU a collection costs grows with the live heap, but
// collections come as often as the allocation rate over GOGC, and a
// settled fleet allocates little: in `make bench` the trade cost no
// measurable settle time (README, Benchmarks).
const DefaultGCPercent = 25

// Options configure a Manager.
type Options struct {
	// Options configure the hub's controller-runtime manager.
	// Controller.CacheSyncTimeout also bounds how long a fleet controller
	// waits for a member's informers to sync (default 2 minutes), and
	// Controller.MaxConcurrentReconciles, when set, is how many
	// registration Secrets of each format are reconciled at once (default
	// 16).
	manager.Options

	// Namespace is the fleet namespace, where native registration Secrets
	// live. Defaults to DefaultNamespace.
	Namespace string

	// SecretFormats are the registration formats read besides the native
	// one, such as registry.ArgoCDFormat("argocd"). Each format's Secrets
	// are cached apart, narrowed by its selectors, so the manager caches no
	// other Secret of the hub.
	SecretFormats []registry.Format

	// KubeconfigPolicy decides which member kubeconfigs are accepted. The
	// zero value is the strictest policy.
	KubeconfigPolicy kubeconfig.Policy

	// MemberQPS and MemberBurst limit each member's client. Default to 50
	// and 100.
	MemberQPS   float32
	MemberBurst int

	// MemberHealth sets how members are probed and when they turn
	// Unhealthy and Disconnected; see member.HealthOptions for defaults.
	MemberHealth member.HealthOptions

	// ConfigureMember, if set, adjusts each member's member.Options, for
	// example its cache transforms, namespaces or selectors. It is called
	// once per member with fresh options.
	ConfigureMember func(clusterName string, o *cluster.Options)

	// AllowDuplicateClusters, LOW LEVEL PRIMITIVE, engages every
	// registered name, even names that reach one cluster, whatever the
	// hub's MemberClusters record of their clusters; see
	// member.Options.AllowDuplicateClusters. Default false: of the names
	// of one cluster, only the one registered first is engaged.
	AllowDuplicateClusters bool

	// ClusterProfiles, if set, registers clusters from the ClusterProfiles
	// of SIG-Multicluster's Cluster Inventory API it selects, besides the
	// Secrets, under the names <namespace>.<name>.
	ClusterProfiles *registry.ClusterProfiles

	// Shard, if set, makes this manager one replica of several that share
	// the fleet (package shard): each member is owned by one live
	// replica, which alone runs it and does its work. Its Namespace,
	// Registry, Running, Warm, Scheme, HTTPClient and Logger are the
	// manager's. It excludes leader election.
	Shard *shard.Options

	// GCPercent is the garbage collector's target percentage New sets for
	// the process (runtime/debug.SetGCPercent) when the environment sets
	// no GOGC: the process is the fleet manager's, and the GOGC variable
	// stays its operator's choice. Defaults to DefaultGCPercent; a
	// negative value leaves the process's setting alone.
	GCPercent int
}

// Manager runs a fleet: the hub's controller-runtime manager, which it
// embeds, plus the registry of registered clusters, the member pool that
// follows it and the engager that hands clusters to fleet controllers.
//
// Start it like any manager. With leader election, only the leader starts
// member caches and fleet controllers; other replicas keep only the hub
// side warm.
type Manager struct {
	manager.Manager

	namespace string
	policy    kubeconfig.Policy
	identity  *identity
	registry  *registry.Registry
	pool      *member.Pool
	// replica is this replica's part in a shared fleet; nil when it
	// works alone.
	replica *shard.Replica
	engager *engage.Engager
	metrics *fleetMetrics
	// queueMetrics are the workqueue series of the fleet controllers.
	queueMetrics *fairqueue.MetricsProvider

	// controllersMu guards controllers: every fleet controller built.
	controllersMu sync.Mutex
	controllers   []*controller
}

// New returns a fleet manager for the hub cfg points at. A cfg with
// neither QPS nor a RateLimiter gets DefaultHubQPS and DefaultHubBurst.
// Hub requests wait, up to 30 s or their context's end, for a hub that
// refuses connections, so informers catch up as soon as it returns; each
// kind of request the hub forbids is logged once, at error level.
func New(cfg *rest.Config, opts Options) (*Manager, error) {
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = DefaultHubQPS, DefaultHubBurst
	}
	hubLog := opts.Logger
	if hubLog.GetSink() == nil {
		hubLog = crlog.Log
	}
	cfg = withHubTransport(cfg, hubLog.WithName("hub"))
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Scheme == nil {
		opts.Scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(opts.Scheme); err != nil {
			return nil, err
		}
	}
	if err := fleetv1alpha1.AddToScheme(opts.Scheme); err != nil {
		return nil, err
	}
	if opts.ClusterProfiles != nil {
		if err := inventoryv1alpha1.AddToScheme(opts.Scheme); err != nil {
			return nil, err
		}
	}
	hub, err := manager.New(cfg, opts.Options)
	if err != nil {
		return nil, fmt.Errorf("creating hub manager: %w", err)
	}
	log := hub.GetLogger()
	setGCPercent(opts.GCPercent, log)
	m := &Manager{Manager: hub, namespace: opts.Namespace, policy: opts.KubeconfigPolicy}
	m.identity = &identity{namespace: opts.Namespace, reader: hub.GetAPIReader(), writer: hub.GetClient(), log: log.WithName("identity"), resolved: make(chan struct{})}
	if m.metrics, err = newFleetMetrics(crmetrics.Registry); err != nil {
		return nil, err
	}
	if m.queueMetrics, err = fairqueue.NewMetricsProvider(crmetrics.Registry); err != nil {
		return nil, err
	}
	formats := append([]registry.Format{registry.NativeFormat(opts.Namespace)}, opts.SecretFormats...)
	for _, f := range formats {
		if !slices.Contains(fleetv1alpha1.RegistrationFormats, fleetv1alpha1.RegistrationFormat(f.Name)) {
			return nil, fmt.Errorf("registration format %q: the name must be one of %v, which MemberClusters can record", f.Name, fleetv1alpha1.RegistrationFormats)
		}
	}
	if opts.Shard != nil && opts.LeaderElection {
		return nil, errors.New("a fleet shared by replicas (Options.Shard) elects no leader: every replica works")
	}
	if m.registry, err = registry.NewWithSecrets(hub, formats, hub.GetControllerOptions().MaxConcurrentReconciles, opts.ClusterProfiles, opts.Shard != nil, opts.AllowDuplicateClusters); err != nil {
		return nil, err
	}
	m.engager = engage.NewEngager(engage.Options{Logger: log.WithName("engager"), Observe: m.metrics.observeEngage})
	m.pool, err = member.NewPool(member.Options{
		Registry:  m.registry,
		Engage:    m.engager.Engage,
		Scheme:    hub.GetScheme(),
		Logger:    log.WithName("member"),
		Policy:    opts.KubeconfigPolicy,
		QPS:       opts.MemberQPS,
		Burst:     opts.MemberBurst,
		Configure: opts.ConfigureMember,
		Health:    opts.MemberHealth,
		MayWrite:  m.mayAct,

		AllowDuplicateClusters: opts.AllowDuplicateClusters,
	})
	if err != nil {
		return nil, err
	}
	runnables := []manager.Runnable{m.identity, m.pool}
	if opts.Shard != nil {
		so := *opts.Shard
		so.Namespace, so.Registry, so.Running, so.Warm = opts.Namespace, m.registry, m.pool.Holds, m.warm
		so.Scheme, so.HTTPClient, so.Logger = hub.GetScheme(), hub.GetHTTPClient(), log.WithName("shard")
		if m.replica, err = shard.New(cfg, so); err != nil {
			return nil, err
		}
		runnables = append(runnables, m.replica)
	}
	for _, r := range append(runnables,
		// The hub is engaged like a member, under the name "", for as
		// long as this replica leads.
		manager.RunnableFunc(func(ctx context.Context) error {
			m.engager.Serve(ctx, registry.HubName, hub)
			return nil
		}),
		lifecycle{m: m, log: log.WithName("members"), recorder: hub.GetEventRecorder("fleet-manager")},
	) {
		if err := hub.Add(r); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// setGCPercent sets the process's GC percent to percent, or
// DefaultGCPercent if 0, unless percent is negative or $GOGC is set.
func setGCPercent(percent int, log logr.Logger) {
	if _, set := os.LookupEnv("GOGC"); set || percent < 0 {
		return
	}
	if percent == 0 {
		percent = DefaultGCPercent
	}
	if old := debug.SetGCPercent(percent); old != percent {
		log.V(1).Info("Set the garbage collector's target percentage: set GOGC to choose another", "gcPercent", percent, "was", old)
	}
}

// addController registers a fleet controller and engages it.
func (m *Manager) addController(c *controller) {
	m.controllersMu.Lock()
	m.controllers = append(m.controllers, c)
	m.controllersMu.Unlock()
	m.engager.Add(c)
}

// ErrNotOwned is wrapped by GetCluster for a member another replica owns,
// or that this replica is still taking over.
var ErrNotOwned = errors.New("cluster not owned by this replica")

// GetCluster returns the cluster named clusterName: the hub for "", else
// the member, or an error wrapping member.ErrClusterNotFound, or
// ErrNotOwned when replicas share the fleet and this one does not own it.
func (m *Manager) GetCluster(_ context.Context, clusterName string) (cluster.Cluster, error) {
	if clusterName == registry.HubName {
		return m.Manager, nil
	}
	if err := m.checkOwned(clusterName); err != nil {
		return nil, err
	}
	return m.pool.Get(clusterName)
}

// GetRunningCluster returns the running cluster of member clusterName
// like GetCluster, but only while the member runs kubeconfig, byte for
// byte; otherwise an error wrapping member.ErrOtherKubeconfig: the pool
// has not caught up with the registration yet.
func (m *Manager) GetRunningCluster(clusterName string, kubeconfig []byte) (cluster.Cluster, error) {
	if err := m.checkOwned(clusterName); err != nil {
		return nil, err
	}
	return m.pool.GetRunning(clusterName, kubeconfig)
}

// checkOwned returns an error wrapping ErrNotOwned unless this replica
// owns registered member clusterName and can prove now that it holds its
// Lease.
func (m *Manager) checkOwned(clusterName string) error {
	c, ok := m.registry.Get(clusterName)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q", member.ErrClusterNotFound, clusterName)
	case c.Ownership == registry.Incoming:
		return fmt.Errorf("%w: %q: still taking it over", ErrNotOwned, clusterName)
	case !c.Owned() && c.Owner == "":
		return fmt.Errorf("%w: %q: no replica owns it now", ErrNotOwned, clusterName)
	case !c.Owned():
		return fmt.Errorf("%w: %q: replica %s owns it", ErrNotOwned, clusterName, c.Owner)
	}
	return m.mayAct(clusterName)
}

// mayAct returns an error wrapping ErrNotOwned while this replica
// cannot prove, by its clock now, that it holds its Lease
// (shard.Replica.Proved): it then acts on no member, whatever the
// registry says, until a handoff gives them back.
func (m *Manager) mayAct(clusterName string) error {
	if m.replica == nil || m.replica.Proved() {
		return nil
	}
	return fmt.Errorf("%w: %q: this replica cannot prove that it holds its Lease", ErrNotOwned, clusterName)
}

// Owns reports whether this replica does the work of cluster
// clusterName now: of a registered cluster, once it has taken it over
// and while it can prove that it holds its Lease; of a name no longer
// registered (what it left on the hub), if the name's owner among the
// live replicas is this one. A manager that works alone owns every
// cluster.
func (m *Manager) Owns(clusterName string) bool {
	if c, ok := m.registry.Get(clusterName); ok {
		return c.Owned() && m.mayAct(clusterName) == nil
	}
	return m.replica == nil || m.replica.Owns(clusterName)
}

// OwnsKey reports whether this replica is the one, among the live
// replicas, to do the hub work named key, such as writing a hub object's
// status that many members' results make up. Replicas pick key's owner
// as they pick a cluster's; while they change, two may briefly both
// think it theirs, so write with optimistic concurrency. A manager that
// works alone owns every key.
func (m *Manager) OwnsKey(key string) bool { return m.replica == nil || m.replica.Owns(key) }

// Replicas returns the replicas that share the fleet as this one sees
// them, itself included: the live ones that are not leaving. It is nil
// when this replica works alone, and while it is fenced or leaving.
func (m *Manager) Replicas() []string {
	if m.replica == nil {
		return nil
	}
	return m.replica.Replicas()
}

// Replica is this replica's part in a fleet shared by replicas; nil when
// it works alone.
func (m *Manager) Replica() *shard.Replica { return m.replica }

// ReplicaName names this replica when replicas share the fleet; "" when
// it works alone.
func (m *Manager) ReplicaName() string {
	if m.replica == nil {
		return ""
	}
	return m.replica.Name()
}

// warm reports whether a member taken over has synced every fleet
// controller's sources, or cannot now: it is not accepted, or is
// Disconnected.
func (m *Manager) warm(clusterName string) bool {
	c, ok := m.registry.Get(clusterName)
	if !ok || !c.Accepted() || c.State == fleetv1alpha1.MemberStateDisconnected {
		return true
	}
	engagements := m.engager.Engagements(clusterName)
	if engagements == nil {
		return false // not engaged yet
	}
	for _, e := range engagements {
		if !e.Engaged {
			return false
		}
	}
	return true
}

// GetClusterEventRecorder returns an event recorder named name for the cluster
// clusterName: Events it records about that cluster's objects are written
// to that cluster. "" is the hub.
func (m *Manager) GetClusterEventRecorder(ctx context.Context, clusterName, name string) (events.EventRecorder, error) {
	cl, err := m.GetCluster(ctx, clusterName)
	if err != nil {
		return nil, err
	}
	return cl.GetEventRecorder(name), nil
}

// MemberReadyOn returns a channel closed once member clusterName, running
// cl (the cluster it was engaged with), has been Ready: a probe succeeded
// while cl ran. It is nil when cl is not the member's cluster now.
func (m *Manager) MemberReadyOn(clusterName string, cl cluster.Cluster) <-chan struct{} {
	return m.pool.ReadyOn(clusterName, cl)
}

// MemberState returns the state of member clusterName, and false if no
// such member is registered, or runs on this replica.
func (m *Manager) MemberState(clusterName string) (fleetv1alpha1.MemberState, bool) {
	c, ok := m.registry.Get(clusterName)
	if !ok || !c.RunsHere() {
		return "", false
	}
	return c.State, true
}

// Registry returns the registry of the fleet's clusters: subscribe to it to
// follow every cluster's registration, labels and state.
func (m *Manager) Registry() *registry.Registry { return m.registry }

// Namespace returns the fleet namespace, which names the fleet.
func (m *Manager) Namespace() string { return m.namespace }

// KubeconfigPolicy returns the policy every member's kubeconfig meets.
func (m *Manager) KubeconfigPolicy() kubeconfig.Policy { return m.policy }

// MemberHealth returns how members are probed, defaults filled in.
func (m *Manager) MemberHealth() member.HealthOptions { return m.pool.HealthOptions() }

// Engagements returns where each fleet controller stands with cluster
// clusterName.
func (m *Manager) Engagements(clusterName string) []engage.Engagement {
	return m.engager.Engagements(clusterName)
}

// ClusterNames returns the names of the engaged members, sorted.
func (m *Manager) ClusterNames() []string {
	return slices.DeleteFunc(m.engager.Clusters(), func(name string) bool { return name == registry.HubName })
}

// GetFieldIndexer returns an indexer that adds each index to the hub and
// to every member, including members that join later.
func (m *Manager) GetFieldIndexer() client.FieldIndexer { return fleetIndexer{m} }

type fleetIndexer struct{ m *Manager }

func (f fleetIndexer) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return errors.Join(
		f.m.Manager.GetFieldIndexer().IndexField(ctx, obj, field, extract),
		f.m.pool.IndexField(ctx, obj, field, extract),
	)
}
