package shard

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
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Defaults of Options.
const (
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	DefaultHandoffTimeout = 20 * time.Second
)

// busyPoll is how often a replica looks again while a handoff waits on
// its own members: to warm up, or to stop.
const busyPoll = 20 * time.Millisecond

// Options configure a Replica.
type Options struct {
	// Name names this replica, and its Lease: the pod's name. Required.
	Name string
	// Namespace is the fleet namespace, where the replicas' Leases are.
	// Required.
	Namespace string

	// LeaseDuration is how long the others wait, after they last saw a
	// replica's Lease change, before they take its members over.
	// RenewDeadline is how long a replica goes on working without a
	// renewal that succeeded: then it stops every member, well before
	// the others take them. RetryPeriod is how often it renews.
	// Default to DefaultLeaseDuration, DefaultRenewDeadline and
	// DefaultRetryPeriod; LeaseDuration > RenewDeadline > RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// HandoffTimeout bounds how long a handoff waits for the new owners
	// to warm up their members, and a leaving replica for its handoff.
	// Defaults to DefaultHandoffTimeout.
	HandoffTimeout time.Duration

	// Registry is where this replica's part is assigned: it must be
	// shared (registry.NewShared). Required.
	Registry *registry.Registry
	// Running reports whether a member of the cluster named still runs
	// here, or is stopping (member.Pool.Holds). Required.
	Running func(clusterName string) bool
	// Warm reports whether a member taken over has synced what this
	// replica's controllers watch, or cannot now (it is unreachable).
	// Nil: a member is warm once it runs.
	Warm func(clusterName string) bool

	// Scheme must know Leases; defaults to one that does.
	Scheme *runtime.Scheme
	// HTTPClient, if set, is the hub's HTTP client.
	HTTPClient *http.Client
	// Logger defaults to controller-runtime's, named "shard".
	Logger logr.Logger
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Metrics is where the replica's series are registered; defaults to
	// controller-runtime's registry.
	Metrics prometheus.Registerer
}

func (o *Options) setDefaults() error {
	switch {
	case len(validation.IsDNS1123Label(o.Name)) > 0:
		return fmt.Errorf("shard: Options.Name %q must be a DNS-1123 label, as a pod's name is", o.Name)
	case o.Namespace == "":
		return errors.New("shard: Options.Namespace is required")
	case o.Registry == nil || o.Running == nil:
		return errors.New("shard: Options.Registry and Options.Running are required")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.LeaseDuration%time.Second != 0 || !(o.LeaseDuration > o.RenewDeadline && o.RenewDeadline > o.RetryPeriod && o.RetryPeriod > 0) {
		return fmt.Errorf("shard: want whole seconds of LeaseDuration > RenewDeadline > RetryPeriod > 0, have %s, %s, %s", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	if o.HandoffTimeout == 0 {
		o.HandoffTimeout = DefaultHandoffTimeout
	}
	if o.Warm == nil {
		o.Warm = func(string) bool { return true }
	}
	if o.Scheme == nil {
		o.Scheme = runtime.NewScheme()
	}
	if err := coordinationv1.AddToScheme(o.Scheme); err != nil {
		return err
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logf.Log.WithName("shard")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Metrics == nil {
		o.Metrics = crmetrics.Registry
	}
	return nil
}

// Replica is this process's part in a fleet shared by replicas: it holds
// its Lease, follows the others', and assigns each cluster in the
// registry to the replica rendezvous hashing picks among the live ones,
// handing members over make-before-break (see the package doc).
type Replica struct {
	opts    Options
	log     logr.Logger
	cache   cache.Cache
	lease   *ownLease
	seen    *observations
	metrics *replicaMetrics
	// wake is poked by a Lease or a registration that changed.
	wake chan struct{}

	// The current view and when this replica first saw it; only the
	// loop's goroutine reads and writes them.
	view      []string
	id        string
	viewSince time.Time
	// joined is when the loop first saw its Lease written.
	joined time.Time
	// expiredOnHub holds, per replica, the version of its Lease that the
	// hub confirmed expired.
	expiredOnHub map[string]string

	// mu guards working: the view, when this replica is in it; nil while
	// it is fenced or leaving; validUntil, when it is fenced at the
	// latest unless its Lease is renewed; and provedUntil: validUntil
	// while its last pass did not fence, zero after one that did.
	mu          sync.Mutex
	working     []string
	validUntil  time.Time
	provedUntil time.Time
	// tenancies is what each live replica said of its tenancy mode, as
	// the last pass saw their Leases; nil before the first pass.
	tenancies map[string]string
}

var _ manager.LeaderElectionRunnable = (*Replica)(nil)

// New returns the replica opts describe, on the hub cfg points at.
func New(cfg *rest.Config, opts Options) (*Replica, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	httpClient := opts.HTTPClient
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	c, err := cache.New(cfg, cache.Options{
		HTTPClient:        httpClient,
		Scheme:            opts.Scheme,
		DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(labels.Set{ReplicaLabel: "true"})},
		},
	})
	if err != nil {
		return nil, err
	}
	writer, err := client.New(cfg, client.Options{HTTPClient: httpClient, Scheme: opts.Scheme})
	if err != nil {
		return nil, err
	}
	metrics, err := newReplicaMetrics(opts.Metrics, opts.Name)
	if err != nil {
		return nil, err
	}
	seen := &observations{clock: opts.Clock, seen: map[string]observation{}}
	return &Replica{
		opts:  opts,
		log:   opts.Logger.WithValues("replica", opts.Name),
		cache: c,
		lease: &ownLease{
			client: writer, clock: opts.Clock, observing: seen,
			key:    client.ObjectKey{Namespace: opts.Namespace, Name: opts.Name},
			holder: opts.Name + "_" + uuid.NewString(), duration: opts.LeaseDuration, deadline: opts.RenewDeadline,
			kick: make(chan struct{}, 1), sent: map[int64]time.Time{},
		},
		seen:         seen,
		metrics:      metrics,
		wake:         make(chan struct{}, 1),
		expiredOnHub: map[string]string{},
	}, nil
}

// Owns reports whether key's owner among the live replicas is this one,
// which is in their view (not fenced, not leaving) and whose renew
// deadline has not passed, even if its loop has not run since. Unlike a
// cluster's ownership in the registry, it is not handed over: use it for
// work that tolerates a second writer during a change, such as a status
// written with optimistic concurrency.
func (r *Replica) Owns(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.working != nil && r.opts.Clock.Now().Before(r.provedUntil) && ownerOf(key, r.working) == r.opts.Name
}

// Proved reports whether this replica may act now, by its clock: its
// last pass did not fence it, and the renewal that pass proved was sent
// less than RenewDeadline ago. It turns false at that deadline even if
// the loop has not run since (a paused process wakes up with it false),
// and stays false after a pass that fenced until a pass proves a renewal
// again. A leaving replica that still holds its Lease is proved: it hands
// its members over while they run. Gate every action on a member on it,
// at the moment it is taken, besides the member's ownership.
func (r *Replica) Proved() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opts.Clock.Now().Before(r.provedUntil)
}

// Replicas returns the live replicas that are not leaving, this one
// included, as this one sees them; nil while it is fenced or leaving.
func (r *Replica) Replicas() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.working)
}

// SetTenancy publishes on this replica's Lease (TenancyAnnotation) the
// tenancy mode it resolved, for the others to read with Tenancies.
func (r *Replica) SetTenancy(mode string) { r.lease.setTenancy(mode) }

// Tenancies returns, for every live replica as this one's last pass saw
// the Leases (leaving ones included: they still act on the members they
// hand over), the tenancy mode it published, "" for one that has not
// (it is starting, or runs a version that does not publish it). This
// replica is included, with what it asked for. Nil before the first pass
// and while this replica is fenced: it acts on no member then.
func (r *Replica) Tenancies() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.opts.Clock.Now().Before(r.provedUntil) {
		return nil
	}
	return maps.Clone(r.tenancies)
}

// Name returns the replica's name.
func (r *Replica) Name() string { return r.opts.Name }

// NeedLeaderElection is false: every replica takes part. It runs beside
// the member pool and stops before it, so that a replica leaving hands
// its members over while they still run.
func (*Replica) NeedLeaderElection() bool { return false }

// Start holds the Lease and assigns clusters until ctx ends; then it
// marks the Lease leaving, hands its members over (waiting at most
// HandoffTimeout), deletes the Lease and returns.
func (r *Replica) Start(ctx context.Context) error {
	// The Lease cache outlives ctx: the handoff after it reads Leases.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	informer, err := r.cache.GetInformer(cacheCtx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	poke := func(any) { r.poke() }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, _ any) { r.poke() }, DeleteFunc: poke,
	}); err != nil {
		return err
	}
	go func() { _ = r.cache.Start(cacheCtx) }()
	if !r.cache.WaitForCacheSync(ctx) {
		return nil // ctx ended
	}
	go r.registry(cacheCtx)
	renewCtx, stopRenewing := context.WithCancel(cacheCtx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		r.renew(renewCtx)
	}()

	r.loop(ctx, false)
	r.log.Info("Leaving: handing members over to the other replicas")
	leaving, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.HandoffTimeout)
	defer cancel()
	r.loop(leaving, true)
	r.releaseAll()
	stopRenewing()
	<-renewing
	if err := r.lease.release(context.WithoutCancel(ctx)); err != nil {
		r.log.Error(err, "Could not delete the replica's Lease: the others take over once it expires")
	}
	return nil
}

func (r *Replica) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// registry pokes the loop when a cluster name comes or goes.
func (r *Replica) registry(ctx context.Context) {
	r.opts.Registry.Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) {
		if e.Registered() || e.Removed() {
			r.poke()
		}
	})
}

// renew writes the Lease every RetryPeriod, and at once when the loop
// asks for new marks, until ctx ends. While the cache lags behind its
// writes it writes nothing (ownLease.lagging).
func (r *Replica) renew(ctx context.Context) {
	ticker := r.opts.Clock.NewTicker(r.opts.RetryPeriod)
	defer ticker.Stop()
	wasLagging := false
	for {
		lagging := r.lease.lagging(r.opts.Clock.Now())
		if lagging != wasLagging {
			if lagging {
				r.log.Info("The replica's Lease cache does not show its renewals: renewing no more until it does, so that the others take its members over")
			} else {
				r.log.Info("The replica's Lease cache caught up: renewing again")
			}
			wasLagging = lagging
		}
		if !lagging {
			if err := r.lease.write(ctx); err != nil && ctx.Err() == nil {
				r.log.V(1).Info("Could not renew the replica's Lease", "err", err.Error())
			}
		}
		r.poke()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-r.lease.kick:
		}
	}
}

// loop assigns clusters until ctx ends; leaving, it returns once this
// replica has released every member and told so.
func (r *Replica) loop(ctx context.Context, leaving bool) {
	idle := r.opts.Clock.NewTicker(r.opts.RetryPeriod / 2)
	defer idle.Stop()
	for {
		done, busy, wake := r.pass(ctx, leaving)
		if leaving && done {
			return
		}
		var poll, due <-chan time.Time
		if busy {
			poll = r.opts.Clock.After(busyPoll)
		}
		if !wake.IsZero() {
			due = r.opts.Clock.After(wake.Sub(r.opts.Clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-idle.C():
		case <-poll:
		case <-due:
		}
	}
}
