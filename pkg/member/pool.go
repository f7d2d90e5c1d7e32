package member

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

var (
	// ErrClusterNotFound is returned for a cluster name that no member
	// holds.
	ErrClusterNotFound = errors.New("cluster not found")
	// ErrClusterNotConnected is returned for a member that is registered
	// but has no running cluster, such as a Disconnected one.
	ErrClusterNotConnected = errors.New("cluster not connected")
	// ErrOtherKubeconfig is returned by GetRunning for a member that runs
	// another kubeconfig than the one asked for: the pool has not caught
	// up with the registration yet.
	ErrOtherKubeconfig = errors.New("cluster runs another kubeconfig")
)

// EngageFunc hands a starting member to the rest of the manager for as
// long as ctx lasts. It returns at once, with a channel that closes once
// ctx has ended and everything it started for the member has stopped.
type EngageFunc func(ctx context.Context, clusterName string, cl cluster.Cluster) (disengaged <-chan struct{})

// Options configure every member of a Pool.
type Options struct {
	// Registry is followed: a member runs for each cluster it accepts,
	// with the cluster's kubeconfig. Each member's state and probes, and
	// each kubeconfig the pool refuses, are recorded there. Required.
	Registry Registry

	// Engage is called once the member's cache has its indexes, before its
	// cluster starts. Required.
	Engage EngageFunc

	// Scheme maps Go types to kinds in every member. Defaults to client-go's
	// scheme.
	Scheme *runtime.Scheme

	// Logger is the base logger; each member adds the key "cluster".
	// Defaults to controller-runtime's logger.
	Logger logr.Logger

	// Policy decides which kubeconfigs are accepted. The zero value is the
	// strictest policy.
	Policy kubeconfig.Policy

	// QPS and Burst limit each member's client. Default to 50 and 100.
	QPS   float32
	Burst int

	// Health sets how members are probed and when they turn Unhealthy and
	// Disconnected.
	Health HealthOptions

	// MayWrite, if set, is asked before each request that could change a
	// member is sent: any but a GET, HEAD or OPTIONS, or a review (a
	// create of a *reviews resource, which persists nothing, as the
	// probe's SelfSubjectReview). An error refuses the request: it is
	// returned, wrapped, and nothing is sent. A replica that shares the
	// fleet refuses so while it cannot prove that it holds its Lease.
	MayWrite func(clusterName string) error

	// ReconnectBackoff spaces out the attempts to connect a Disconnected
	// member again. Defaults to 1s doubling to 1m, with 20% jitter; a
	// connection that became Ready resets it.
	ReconnectBackoff *wait.Backoff

	// Metrics is where the members' series are registered. Defaults to
	// controller-runtime's registry, which a manager serves.
	Metrics prometheus.Registerer

	// Clock times probes and reconnections. Defaults to the real clock.
	Clock clock.WithTickerAndDelayedExecution

	// AllowDuplicateClusters, LOW LEVEL PRIMITIVE, engages every name,
	// even names whose members reach one cluster. By default (false) each
	// member reads its cluster's identity before it is engaged, and of
	// the names that reach one cluster only the one registered first is
	// engaged: two names would each delete from the cluster what the
	// other put there. Set it only where one API server stands for many
	// clusters on purpose, as in load tests, and no controller removes
	// from a member what its name does not select.
	AllowDuplicateClusters bool

	// Configure, if set, adjusts each member's cluster.Options after the
	// pool's defaults: its own HTTP client, managedFields stripped from
	// cached objects, and ReaderFailOnMissingInformer, so that reading a kind
	// no controller watches fails instead of starting an informer in every
	// member (use GetAPIReader for such reads). It is called once per member
	// with fresh options, so maps it sets are never shared between members.
	Configure func(clusterName string, o *cluster.Options)
}

func (o *Options) setDefaults() error {
	if o.Registry == nil {
		return errors.New("member pool: Options.Registry is required")
	}
	if o.Engage == nil {
		return errors.New("member pool: Options.Engage is required")
	}
	if o.Scheme == nil {
		o.Scheme = clientgoscheme.Scheme
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logf.Log.WithName("pool")
	}
	if o.QPS == 0 {
		o.QPS = 50
	}
	if o.Burst == 0 {
		o.Burst = 100
	}
	o.Health.setDefaults()
	if o.ReconnectBackoff == nil {
		o.ReconnectBackoff = &wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 7, Cap: time.Minute}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Metrics == nil {
		o.Metrics = crmetrics.Registry
	}
	return nil
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// Pool holds the running members by name. Members set before Start wait
// for it; members set after it start at once. When Start's context ends,
// every member is stopped and Start returns.
//
// The pool never holds its lock during network I/O or while a member stops.
type Pool struct {
	opts    Options
	metrics *poolMetrics
	// initialSyncs bounds how many of the members' informers fill at once.
	initialSyncs *initialSyncs

	// mu guards everything below.
	mu      sync.Mutex
	ctx     context.Context // nil until Start
	stopped bool
	members map[string]*member
	// stopping counts the members of each name that were removed and
	// have not stopped yet.
	stopping map[string]int
	// leaving are the members removed that have not stopped yet; left is
	// closed, and replaced, each time one has stopped.
	leaving map[*member]struct{}
	left    chan struct{}
	indexes []index
}

var _ manager.LeaderElectionRunnable = (*Pool)(nil)

// NewPool returns an empty pool.
func NewPool(opts Options) (*Pool, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	metrics, err := newPoolMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	return &Pool{opts: opts, metrics: metrics, initialSyncs: newInitialSyncs(initialSyncSlots, initialSyncHold),
		members: map[string]*member{}, stopping: map[string]int{},
		leaving: map[*member]struct{}{}, left: make(chan struct{})}, nil
}

// Start starts the members already set and follows the registry until
// ctx ends; then it stops every member and returns.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.ctx != nil {
		p.mu.Unlock()
		return errors.New("member pool: already started")
	}
	p.ctx = ctx
	for _, m := range p.members {
		m.start(ctx)
	}
	p.mu.Unlock()

	p.follow(ctx)

	p.mu.Lock()
	p.stopped = true
	members := p.members
	p.members = map[string]*member{}
	p.mu.Unlock()
	stopAll(members)
	for name := range members {
		p.metrics.forget(name)
	}
	return nil
}

// report takes every state of member name, and each probe with the state
// it led to (probe is nil for changes no probe made, such as Connecting):
// the registry records them and the metrics count them. It is called from
// the member's goroutines.
func (p *Pool) report(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
	p.opts.Registry.ObserveState(name, state, probe)
	p.metrics.observe(name, state, probe)
}

// HealthOptions returns the pool's health options, defaults filled in.
func (p *Pool) HealthOptions() HealthOptions { return p.opts.Health }

// NeedLeaderElection is true: only the leader runs member caches. When
// replicas share the fleet, there is no leader: each runs the members the
// registry says it owns.
func (p *Pool) NeedLeaderElection() bool { return true }

// Set adds the member reg registers. A member of that name whose
// kubeconfig differs only in its bearer token or client certificate keeps
// running with the new credentials: its cache is kept, and its connections
// are closed so that every client reconnects with them. A member with any
// other difference, such as its server or CA, is replaced: it is stopped,
// then the new one starts. The same kubeconfig again does nothing. A
// kubeconfig that is refused removes the member of that name, so what runs
// is always what is registered.
func (p *Pool) Set(reg registry.Registration) error {
	name := reg.ClusterName
	if err := registry.ValidateName(name); err != nil {
		return &kubeconfig.RefusedError{Reason: "InvalidClusterName", Message: err.Error()}
	}
	fingerprint := sha256.Sum256(reg.Kubeconfig)
	p.mu.Lock()
	old := p.members[name]
	p.mu.Unlock()
	if old != nil && old.creds.Load().fingerprint == fingerprint {
		return nil
	}

	creds, err := p.parse(fingerprint, reg.Kubeconfig)
	if err != nil {
		p.Remove(name)
		return err
	}
	if old != nil && old.rotate(creds) {
		return nil
	}
	m, err := newMember(name, creds, p)
	if err != nil {
		p.Remove(name)
		return err
	}

	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		m.stop()
		return errors.New("member pool: stopped")
	}
	old = p.members[name]
	p.members[name] = m
	if old == nil {
		p.metrics.add(name, m.State())
	} else {
		p.metrics.observe(name, m.State(), nil)
	}
	p.mu.Unlock()

	if old != nil {
		m.log.Info("Replacing member")
		old.stop()
	}
	p.mu.Lock()
	// Start only if m is still the member of that name: a concurrent Set or
	// Remove may have replaced it while old stopped.
	if p.ctx != nil && p.members[name] == m {
		m.start(p.ctx)
	}
	p.mu.Unlock()
	return nil
}

// parse checks kubeconfig against the policy and reads its credentials.
func (p *Pool) parse(fingerprint [sha256.Size]byte, kubeconfig []byte) (*credentials, error) {
	cfg, err := p.opts.Policy.Parse(kubeconfig)
	if err != nil {
		return nil, err
	}
	return newCredentials(fingerprint, cfg)
}

// Remove stops and forgets the member name. It returns once everything the
// member started has ended and its connections are closed, and reports
// whether there was such a member.
func (p *Pool) Remove(name string) bool {
	p.mu.Lock()
	m, ok := p.members[name]
	delete(p.members, name)
	if ok {
		p.stopping[name]++
		p.leaving[m] = struct{}{}
	}
	p.mu.Unlock()
	if ok {
		m.stop()
		p.mu.Lock()
		if p.stopping[name]--; p.stopping[name] == 0 {
			delete(p.stopping, name)
		}
		delete(p.leaving, m)
		close(p.left)
		p.left = make(chan struct{})
		if _, back := p.members[name]; !back {
			p.metrics.forget(name)
		}
		p.mu.Unlock()
	}
	return ok
}

// Holds reports whether a member of that name runs, or was removed and
// has not stopped yet: false means nothing of it is left.
func (p *Pool) Holds(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, running := p.members[name]
	return running || p.stopping[name] > 0
}

// Get returns the running cluster of member name, or an error wrapping
// ErrClusterNotFound or ErrClusterNotConnected.
func (p *Pool) Get(name string) (cluster.Cluster, error) {
	p.mu.Lock()
	m, ok := p.members[name]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrClusterNotFound, name)
	}
	if conn := m.conn.Load(); conn != nil {
		return conn.cluster, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrClusterNotConnected, name)
}

// ReadyOn returns a channel closed once member name, running cl, has been
// Ready: a probe succeeded while cl ran. It is nil when cl is not the
// member's cluster now.
func (p *Pool) ReadyOn(name string, cl cluster.Cluster) <-chan struct{} {
	p.mu.Lock()
	m, ok := p.members[name]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if conn := m.conn.Load(); conn != nil && conn.cluster == cl {
		return conn.ready
	}
	return nil
}

// GetRunning returns the running cluster of member name like Get, but
// only while the member runs kubeconfig, byte for byte: built from it, or
// rotated to it in place. Otherwise it returns an error wrapping
// ErrOtherKubeconfig.
func (p *Pool) GetRunning(name string, kubeconfig []byte) (cluster.Cluster, error) {
	p.mu.Lock()
	m, ok := p.members[name]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrClusterNotFound, name)
	}
	if m.creds.Load().fingerprint != sha256.Sum256(kubeconfig) {
		return nil, fmt.Errorf("%w: %q", ErrOtherKubeconfig, name)
	}
	if conn := m.conn.Load(); conn != nil {
		return conn.cluster, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrClusterNotConnected, name)
}

// State returns the state of member name, and false if there is no such
// member.
func (p *Pool) State(name string) (fleetv1alpha1.MemberState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.members[name]; ok {
		return m.State(), true
	}
	return "", false
}

// Names returns the names of all members, sorted.
func (p *Pool) Names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.members))
}

// IndexField adds a field index to every member: the current ones now, and
// each later one before it is engaged. It returns the errors of current
// members, joined; a later member logs its own.
func (p *Pool) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	p.indexes = append(p.indexes, index{obj: obj, field: field, extract: extract})
	all := slices.Clone(p.indexes)
	members := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		members = append(members, m)
	}
	p.mu.Unlock()

	var errs []error
	for _, m := range members {
		conn := m.conn.Load()
		if conn == nil {
			continue // its next connection applies every index
		}
		if err := conn.applyIndexes(ctx, all); err != nil {
			if conn.over() {
				continue // it left or reconnects: its next connection applies every index
			}
			errs = append(errs, fmt.Errorf("cluster %q: %w", m.name, err))
		}
	}
	return errors.Join(errs...)
}

// otherMember returns the name of a member other than m, running or
// stopping, whose cluster's identity is id; "" if there is none. The
// caller holds p.mu.
func (p *Pool) otherMember(m *member, id string) string {
	for _, o := range p.members {
		if o != m && o.name != m.name && o.clusterID == id {
			return o.name
		}
	}
	for o := range p.leaving {
		if o.name != m.name && o.clusterID == id {
			return o.name
		}
	}
	return ""
}

func (p *Pool) indexesSnapshot() []index {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.indexes)
}

// stopAll stops members in parallel, so one slow member doesn't hold up
// the rest.
func stopAll(members map[string]*member) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(m.stop)
	}
	wg.Wait()
}
