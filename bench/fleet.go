package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"sync/atomic"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// fleetConfig is what a bench fleet differs in.
type fleetConfig struct {
	// namespace is the hub namespace of the fleet's Secrets.
	namespace string
	// watch is the one namespace the members cache.
	watch string
	// clusterWide caches watch's objects with a field selector on their
	// namespace, in a cache of every namespace, instead of a cache of
	// watch alone.
	clusterWide bool
	// workers and work are the reconciler's concurrency and the time each
	// reconcile takes.
	workers int
	work    time.Duration
	// options adjust the fleet controller's options, such as its queue.
	options func(*fleet.ControllerOptions)
	// health overrides the member health options.
	health member.HealthOptions
	// refuseDuplicates turns the identity check on: no two names may
	// reach one member server at once.
	refuseDuplicates bool
	// trackRequests makes the recorder remember each request's first
	// reconcile; without it, it counts reconciles per cluster, so that a
	// memory measurement carries no map of every object.
	trackRequests bool
}

// cacheOnly limits o to the objects of namespace ns: with a field
// selector, in a cache of every namespace, as a controller that watches
// every namespace caches them, or with a cache of ns alone.
func cacheOnly(o *cache.Options, ns string, clusterWide bool) {
	if clusterWide {
		o.DefaultFieldSelector = fields.OneTermEqualSelector("metadata.namespace", ns)
		return
	}
	o.DefaultNamespaces = map[string]cache.Config{ns: {}}
}

// benchFleet is a running fleet manager with one ConfigMap controller
// whose reconciler records every request.
type benchFleet struct {
	mgr        *fleet.Manager
	controller string
	rec        *recorder
	cancel     context.CancelFunc
	done       chan error
}

// controllerIDs numbers the bench controllers: their names label metrics,
// which outlive each manager.
var controllerIDs atomic.Int32

// managerOptions are the options of a bench fleet manager of fleet
// namespace ns: no metrics or probe servers, logs only with $BENCH_LOG,
// and every name engaged, though many reach one member server (so no
// member reads its cluster's identity, which a fleet of distinct
// clusters does once per connection).
func managerOptions(ns string) fleet.Options {
	return fleet.Options{
		Options: manager.Options{
			Logger:                 fleetLogger(),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		},
		Namespace:              ns,
		AllowDuplicateClusters: true,
	}
}

// startFleet starts a fleet manager on the hub at cfg.
func startFleet(hub *rest.Config, cfg fleetConfig) (*benchFleet, error) {
	mgrOpts := managerOptions(cfg.namespace)
	mgrOpts.MemberHealth = cfg.health
	mgrOpts.AllowDuplicateClusters = !cfg.refuseDuplicates
	mgrOpts.ConfigureMember = func(_ string, o *cluster.Options) {
		cacheOnly(&o.Cache, cfg.watch, cfg.clusterWide)
		if os.Getenv("BENCH_LOG_REQUESTS") != "" && o.HTTPClient != nil {
			c := *o.HTTPClient
			c.Transport = loggedRequests{c.Transport}
			o.HTTPClient = &c
		}
	}
	mgr, err := fleet.New(hub, mgrOpts)
	if err != nil {
		return nil, err
	}
	if err := membercluster.Add(mgr, membercluster.Options{}); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("bench-%d", controllerIDs.Add(1))

	rec := newRecorder(cfg.work, cfg.trackRequests)
	opts := fleet.ControllerOptions{}
	opts.MaxConcurrentReconciles = max(cfg.workers, 1)
	if cfg.options != nil {
		cfg.options(&opts)
	}
	err = fleet.NewControllerManagedBy(mgr).
		Named(name).
		For(&corev1.ConfigMap{}).
		WatchClusters(fleet.Members).
		WithOptions(opts).
		Complete(rec)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &benchFleet{mgr: mgr, controller: name, rec: rec, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- mgr.Start(ctx) }()
	// Scenarios time the fleet, not its start: wait until the manager
	// runs its controllers.
	select {
	case <-mgr.Elected():
	case err := <-f.done:
		cancel()
		return nil, fmt.Errorf("fleet manager stopped: %w", err)
	}
	return f, nil
}

// fleetLogger discards the fleet's logs, unless $BENCH_LOG is set: then
// they go to stderr with times, to see where a scenario's time goes.
// Either way it counts the members' changes to Unhealthy
// (unhealthyTransitions).
func fleetLogger() logr.Logger {
	sink := &transitionCounter{}
	if os.Getenv("BENCH_LOG") != "" {
		sink.next = funcr.New(func(prefix, args string) {
			fmt.Fprintln(os.Stderr, time.Now().Format(logTime), prefix, args)
		}, funcr.Options{}).GetSink()
	}
	return logr.New(sink)
}

// unhealthyTransitions counts the changes of any member of any fleet in
// the process to Unhealthy, from the members' "Member state changed" log
// lines: every change is logged, however short the state lasts.
var unhealthyTransitions atomic.Int64

// transitionCounter is a log sink that counts members' changes to
// Unhealthy, and passes everything on to next, if not nil.
type transitionCounter struct {
	next logr.LogSink
}

func (c *transitionCounter) Init(info logr.RuntimeInfo) {
	if c.next != nil {
		c.next.Init(info)
	}
}

func (c *transitionCounter) Enabled(level int) bool {
	return level == 0 || (c.next != nil && c.next.Enabled(level))
}

func (c *transitionCounter) Info(level int, msg string, kv ...any) {
	if level == 0 && msg == "Member state changed" {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "to" && kv[i+1] == any(fleetv1alpha1.MemberStateUnhealthy) {
				unhealthyTransitions.Add(1)
			}
		}
	}
	if c.next != nil && c.next.Enabled(level) {
		c.next.Info(level, msg, kv...)
	}
}

func (c *transitionCounter) Error(err error, msg string, kv ...any) {
	if c.next != nil {
		c.next.Error(err, msg, kv...)
	}
}

func (c *transitionCounter) WithValues(kv ...any) logr.LogSink {
	if c.next == nil {
		return c
	}
	return &transitionCounter{next: c.next.WithValues(kv...)}
}

func (c *transitionCounter) WithName(name string) logr.LogSink {
	if c.next == nil {
		return c
	}
	return &transitionCounter{next: c.next.WithName(name)}
}

// stop stops the manager and waits until it has returned.
func (f *benchFleet) stop() error {
	f.cancel()
	return <-f.done
}

// recorder is a reconciler that takes a fixed time per request and
// remembers when each cluster, and if it tracks requests each request, was
// first reconciled. Reconciles wait while it is held.
type recorder struct {
	work  time.Duration
	track bool

	mu        sync.Mutex
	held      chan struct{} // closed on release; nil if never held
	first     map[fleet.Request]time.Time
	byCluster map[string]time.Time
	counts    map[string]int
	total     int
	firstAt   time.Time
	last      time.Time
}

func newRecorder(work time.Duration, track bool) *recorder {
	return &recorder{work: work, track: track, first: map[fleet.Request]time.Time{}, byCluster: map[string]time.Time{}, counts: map[string]int{}}
}

func (r *recorder) Reconcile(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	}
	now := time.Now()
	r.mu.Lock()
	if !r.track {
		r.counts[req.ClusterName]++
	} else if _, ok := r.first[req]; !ok {
		r.first[req] = now
		r.counts[req.ClusterName]++
	}
	if _, ok := r.byCluster[req.ClusterName]; !ok {
		r.byCluster[req.ClusterName] = now
	}
	if r.total == 0 {
		r.firstAt = now
	}
	r.total++
	r.last = now
	r.mu.Unlock()
	if r.work > 0 {
		time.Sleep(r.work)
	}
	return reconcile.Result{}, nil
}

// hold makes reconciles wait until release is called.
func (r *recorder) hold() (release func()) {
	held := make(chan struct{})
	r.mu.Lock()
	r.held = held
	r.mu.Unlock()
	return func() { close(held) }
}

// engaged returns when cluster's first request was reconciled.
func (r *recorder) engaged(clusterName string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.byCluster[clusterName]
	return t, ok
}

// reconciled returns when req was first reconciled.
func (r *recorder) reconciled(req fleet.Request) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.first[req]
	return t, ok
}

// settledClusters counts the clusters with at least objects reconciles
// (of distinct objects, if it tracks requests), and returns the time of the first and the latest
// reconcile.
func (r *recorder) settledClusters(objects int) (n int, first, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.counts {
		if c >= objects {
			n++
		}
	}
	return n, r.firstAt, r.last
}

// await polls done every millisecond until it reports true or timeout
// passes.
func await(what string, timeout time.Duration, done func() bool) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// awaitEngaged waits for cluster's first reconcile and returns its time.
func (f *benchFleet) awaitEngaged(clusterName string, timeout time.Duration) (time.Time, error) {
	var t time.Time
	err := await(clusterName+" engaged", timeout, func() bool {
		var ok bool
		t, ok = f.rec.engaged(clusterName)
		return ok
	})
	return t, err
}

// awaitReconciled waits for req's first reconcile and returns its time.
func (f *benchFleet) awaitReconciled(req fleet.Request, timeout time.Duration) (time.Time, error) {
	var t time.Time
	err := await(fmt.Sprintf("%s reconciled", req), timeout, func() bool {
		var ok bool
		t, ok = f.rec.reconciled(req)
		return ok
	})
	return t, err
}

// logTime stamps the bench's log lines to the microsecond: an
// engagement's steps are a millisecond or two apart.
const logTime = "15:04:05.000000"

// loggedRequests logs each request of a member's cluster to stderr, with
// its start and duration, and when its connection was asked for and got
// (after a dial and TLS handshake of its own, or another request's), it
// was written and its first byte came back, with $BENCH_LOG_REQUESTS set:
// to see where an engagement's time goes.
type loggedRequests struct{ next http.RoundTripper }

func (l loggedRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	step := func(what string) {
		fmt.Fprintln(os.Stderr, time.Now().Format(logTime), "request", req.Method, req.URL.Path, what)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn:              func(string) { step("asks for a connection") },
		GotConn:              func(i httptrace.GotConnInfo) { step(fmt.Sprintf("got a connection, reused=%t", i.Reused)) },
		TLSHandshakeStart:    func() { step("TLS handshake starts") },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { step("TLS handshake done") },
		WroteRequest:         func(httptrace.WroteRequestInfo) { step("written") },
		GotFirstResponseByte: func() { step("first byte") },
	}))
	resp, err := l.next.RoundTrip(req)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	fmt.Fprintln(os.Stderr, start.Format(logTime), "request", req.Method, req.URL.RequestURI(), status, err, "headers after", time.Since(start))
	return resp, err
}
