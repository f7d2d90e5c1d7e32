package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// member is one registered member cluster. It owns its transport and its
// prober for its whole life, and a connection (its cluster.Cluster and
// engagement) while it is connected.
type member struct {
	name string
	// config is what the member's clients are built from: the server and
	// client settings of its kubeconfig, with the member's transport in
	// place of TLS and credentials, so none of them can bypass it.
	config     *rest.Config
	httpClient *http.Client
	dialer     *connrotation.Dialer
	log        logr.Logger
	pool       *Pool
	// review and ping are the member's two probes; ping is nil when its
	// transport keeps no track of its HTTP/2 connection.
	review probeFunc
	ping   probeFunc
	// h2 is the pool of its HTTP/2 connections, nil without HTTP/2.
	h2 *trackingPool

	// creds are the current credentials, replaced by rotate.
	creds atomic.Pointer[credentials]
	// reviewedWith are the credentials current when the last review
	// started: those it was sent with, or older.
	reviewedWith atomic.Pointer[credentials]
	// clusterID identifies the cluster the member reaches, once it read
	// it (see admit); guarded by the pool's mu.
	clusterID string

	// conn is the current connection, nil while there is none.
	conn  atomic.Pointer[connection]
	state atomic.Value // fleetv1alpha1.MemberState
	// backMu guards back, closed once the member is back, nil while it is
	// not Unhealthy (see away).
	backMu sync.Mutex
	back   chan struct{}
	// silent is whether the member is Unhealthy for not answering (a
	// timeout, a refused connection), not for answering with errors: only
	// then is any byte it sends its return (see heard).
	silent atomic.Bool

	// reconnect wakes run, which reconnects once successes has grown since
	// the last connection ended: a wake-up left over from earlier, such as
	// one from a success during the backoff wait, reconnects nothing.
	reconnect chan struct{}
	// prober probes the member from the start of run to its end.
	prober atomic.Pointer[prober]
	// successes counts the probes that succeeded.
	successes atomic.Uint64
	// connectingSince is when the latest connection began, before its
	// cluster was built, in Unix nanoseconds of the pool's clock.
	connectingSince atomic.Int64

	// connsMu guards conns, the member's open network connections.
	connsMu sync.Mutex
	conns   map[*notifyingConn]struct{}

	// connLostAt is when an established network connection of the member
	// was last lost (see connClosed), in Unix nanoseconds of the pool's
	// clock, or 0. A probe that succeeds while Ready clears it only if the
	// probe started after that loss: a probe that was under way when the
	// connections dropped proves nothing.
	connLostAt atomic.Int64
	// closing is set while a connection is torn down: dials fail.
	closing atomic.Bool
	// stopped is set by stop and never cleared: once the member is
	// stopped, dials fail for ever, even those of a client that outlived
	// it.
	stopped atomic.Bool

	// startOnce makes start idempotent; cancel and done are set by start.
	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// connection is one life of a member's cluster.Cluster.
type connection struct {
	cluster cluster.Cluster
	// ctx is the connection's context; informers are its informers' share
	// of the initial syncs, which knows whether they are busy.
	ctx       context.Context
	informers *memberSyncs
	// end ends the connection, with errDisconnected or errRefreshed as the
	// prober decides.
	end context.CancelCauseFunc
	// ended is closed once the connection ended: its cache stops.
	ended <-chan struct{}

	// ready is closed once the member has been Ready on this connection:
	// a probe succeeded while its cluster ran.
	ready     chan struct{}
	readyOnce sync.Once

	// indexMu guards indexed, the number of the pool's indexes applied to
	// this connection's cache.
	indexMu sync.Mutex
	indexed int
}

func newMember(name string, creds *credentials, p *Pool) (*member, error) {
	m := &member{
		name:      name,
		log:       p.opts.Logger.WithValues("cluster", name),
		pool:      p,
		reconnect: make(chan struct{}, 1),
		done:      make(chan struct{}),
		conns:     map[*notifyingConn]struct{}{},
	}
	m.creds.Store(creds)
	m.state.Store(fleetv1alpha1.MemberStatePending)
	m.dialer = m.newDialer(p.opts.Policy.DialControl)
	rt, err := m.newTransport(creds.config)
	if err != nil {
		return nil, kubeconfig.Refuse("KubeconfigInvalid", "cannot build a transport: %s", kubeconfig.Scrub(err))
	}
	// With the transport set and no TLS or credentials, rest uses it as it
	// is instead of building another.
	m.config = rest.AnonymousClientConfig(creds.config)
	m.config.TLSClientConfig = rest.TLSClientConfig{}
	m.config.Dial, m.config.Proxy = nil, nil
	m.config.Transport = rt
	m.config.QPS, m.config.Burst = p.opts.QPS, p.opts.Burst
	if m.httpClient, err = rest.HTTPClientFor(m.config); err != nil {
		return nil, kubeconfig.Refuse("KubeconfigInvalid", "cannot build a transport: %s", kubeconfig.Scrub(err))
	}
	// Probes speak protobuf: at 250 a second in a fleet of 1,000, JSON's
	// encoding and decoding are a cost of their own.
	probeConfig := rest.CopyConfig(m.config)
	probeConfig.ContentType = runtime.ContentTypeProtobuf
	// Probes are paced by the prober; a client-side rate limiter would
	// only fail a probe whose goroutine started late, before it asks the
	// member anything ("would exceed context deadline").
	probeConfig.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	reviews, err := authenticationv1client.NewForConfigAndClient(probeConfig, m.httpClient)
	if err != nil {
		return nil, kubeconfig.Refuse("KubeconfigInvalid", "cannot build a client: %s", kubeconfig.Scrub(err))
	}
	// A SelfSubjectReview needs valid credentials, unlike /readyz, so a
	// member whose credentials were revoked is not reported healthy. It
	// goes through the same transport as the cache, so it sees the same
	// credentials after a rotation. Between reviews, a PING on the HTTP/2
	// connection the cache's watches use proves the member alive.
	m.review = func(ctx context.Context) error {
		m.reviewedWith.Store(m.creds.Load())
		_, err := reviews.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}
	if m.h2 != nil {
		m.ping = m.h2.ping
	}
	return m, nil
}

func (m *member) newCluster(informers *memberSyncs) (cluster.Cluster, error) {
	opts := &m.pool.opts
	return cluster.New(m.config, func(o *cluster.Options) {
		o.Scheme = opts.Scheme
		o.Logger = m.log
		o.HTTPClient = m.httpClient
		o.Cache.DefaultTransform = cache.TransformStripManagedFields()
		o.Cache.ReaderFailOnMissingInformer = true
		o.Cache.NewInformer = informers.newInformer
		o.MapperProvider = func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
			next, err := newMapper(cfg, httpClient)
			return withCoreMappings{next}, err
		}
		if opts.Configure != nil {
			opts.Configure(m.name, o)
		}
	})
}

// start runs the member under a context derived from ctx.
func (m *member) start(ctx context.Context) {
	m.startOnce.Do(func() {
		ctx, m.cancel = context.WithCancel(ctx)
		go m.run(ctx)
	})
}

// run connects the member, and connects it again after each
// disconnection once a probe succeeds after it (a success reported while
// or before the connection ended does not count), with capped, jittered
// exponential backoff between attempts. The prober runs throughout.
func (m *member) run(ctx context.Context) {
	defer close(m.done)
	opts := &m.pool.opts
	m.connectingSince.Store(opts.Clock.Now().UnixNano()) // before the first probe
	p := &prober{
		clock:         opts.Clock,
		health:        &health{opts: opts.Health, state: fleetv1alpha1.MemberStateConnecting},
		review:        m.review,
		ping:          m.ping,
		connected:     func() bool { return m.conn.Load() != nil },
		heardSince:    m.heardSince,
		startedAt:     func() time.Time { return time.Unix(0, m.connectingSince.Load()) },
		establishedAt: m.establishedAt,
		report:        m.report,
	}
	m.prober.Store(p)
	p.start(ctx)
	defer p.stop()

	backoff := *opts.ReconnectBackoff
	refreshed := false
	for {
		m.setState(fleetv1alpha1.MemberStateConnecting)
		connectedAt := m.successes.Load()
		var err error
		refreshed, err = m.connect(ctx, refreshed)
		if err != nil {
			m.log.Error(err, "Connecting member failed")
		}
		if ctx.Err() != nil {
			return
		}
		if refreshed {
			continue
		}
		// The connection has ended: only a probe that succeeds from now
		// on reconnects the member. One that had worked, Ready at its
		// end or with a probe that succeeded while it ran, is followed at
		// once; backoff spaces connections that never worked.
		since := m.successes.Load()
		worked := m.State() == fleetv1alpha1.MemberStateReady || since > connectedAt
		if worked {
			backoff = *opts.ReconnectBackoff
		}
		m.setState(fleetv1alpha1.MemberStateDisconnected)
		// A probe cut by the teardown was excused, to be retried a
		// RetryInterval later; the teardown is over: probe now, so that a
		// server thawed as its member was torn down is found back at once.
		m.wake()
		for m.successes.Load() == since {
			select {
			case <-ctx.Done():
				return
			case <-m.reconnect:
			}
		}
		if worked {
			m.log.Info("Reconnecting member")
			continue
		}
		delay := backoff.Step()
		m.log.Info("Reconnecting member", "after", delay)
		t := opts.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// connect starts a connection: the cluster's identity first (admit: a
// name another keeps is not engaged), then indexes, its engagement and
// the cluster, which runs in the calling goroutine. A member whose last
// probe succeeded is Ready as its cluster starts; a refresh, the
// connection of a member that is back, asks for a probe at once, which
// makes it Ready. It returns once ctx ends, the cluster fails, or the
// prober disconnects or refreshes the member (refreshed is then true),
// and everything the connection started has ended and its network
// connections are closed.
func (m *member) connect(ctx context.Context, refresh bool) (refreshed bool, err error) {
	m.connectingSince.Store(m.pool.opts.Clock.Now().UnixNano())
	admitted, err := m.admit(ctx)
	if err != nil {
		return false, err
	}
	if !admitted {
		// Another name keeps the cluster: the registry refused this one,
		// and the pool removes it.
		<-ctx.Done()
		return false, nil
	}
	informers := m.pool.initialSyncs.forMember(m.awaitFirstDial, m.away)
	cl, err := m.newCluster(informers)
	if err != nil {
		return false, fmt.Errorf("creating cluster: %w", err)
	}
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	conn := &connection{cluster: cl, ctx: ctx, informers: informers, end: end, ended: ctx.Done(), ready: make(chan struct{})}
	if err := conn.applyIndexes(ctx, m.pool.indexesSnapshot()); err != nil {
		m.log.Error(err, "Applying field indexes")
	}
	m.connLostAt.Store(0)
	m.conn.Store(conn)
	if refresh {
		m.wake()
	} else if p := m.prober.Load(); p != nil && p.promote() {
		// Its last probe succeeded (that is what reconnects it): it is
		// Ready now, not at its next probe, up to an Interval later.
		m.setState(fleetv1alpha1.MemberStateReady)
	}
	defer func() {
		m.conn.Store(nil)
		m.closeConnections()
	}()
	// Once the connection ends, until everything it started has ended,
	// its network connections are closed and new dials refused, so that
	// requests that ignore cancellation, such as discovery, end now rather
	// than at their timeouts.
	closed := make(chan struct{})
	context.AfterFunc(ctx, func() {
		defer close(closed)
		m.closing.Store(true)
		m.shutConnections()
	})

	m.log.Info("Engaging member")
	disengaged := m.pool.opts.Engage(ctx, m.name, cl)
	// The cache's informers log through the context's logger (client-go's
	// "watch ended with error"): the member's, with its cluster key.
	clusterErr := cl.Start(logr.NewContext(ctx, m.log))
	end(clusterErr)
	switch context.Cause(ctx) {
	case errDisconnected:
		m.log.Info("Disconnecting member: probes kept failing", "disconnectAfter", m.pool.opts.Health.DisconnectAfter)
	case errRefreshed:
		// An informer that lost its watch while the member was away slept
		// in backoff of up to 30 s, or the member's identity could not be
		// confirmed: a new connection lists again now.
		m.log.Info("Reconnecting member: it is back, and lost its connections while away")
		refreshed = true
	}
	<-disengaged
	<-closed
	m.closing.Store(false)
	m.log.Info("Disengaged member")
	return refreshed, clusterErr
}

// errDisconnected and errRefreshed are why the prober ends a connection.
var (
	errDisconnected = errors.New("member disconnected: probes kept failing")
	errRefreshed    = errors.New("member back after losing its connections")
)

// wake asks the prober for a probe at once.
func (m *member) wake() {
	if p := m.prober.Load(); p != nil {
		p.wake()
	}
}

// report takes each probe's result from the prober. A member is
// Disconnected only once its connection is torn down, so the prober's
// verdict is passed to run, which records it then. A member back from
// Unhealthy that lost a connection while away keeps its connection only
// if its informers waited for it (see keeps); it is refreshed otherwise,
// and stays Unhealthy until its new cluster starts. Its held informers'
// calls go out as it leaves Unhealthy, or as it sends anything (heard).
func (m *member) report(result registry.ProbeResult, state fleetv1alpha1.MemberState) {
	if conn := m.conn.Load(); state == fleetv1alpha1.MemberStateDisconnected && conn != nil {
		conn.end(errDisconnected)
		state = m.State()
	}
	if conn := m.conn.Load(); result.Err == nil && conn != nil && m.State() == fleetv1alpha1.MemberStateUnhealthy &&
		m.connLostAt.Load() != 0 && !m.keeps(conn) {
		conn.end(errRefreshed)
		// Ready once its new cluster starts: no work flows to the one
		// ending, which may have read another cluster.
		state = m.State()
	}
	if result.Err == nil {
		m.successes.Add(1)
		signal(m.reconnect)
	}
	if c := m.reviewedWith.Load(); c != nil {
		result.Kubeconfig = c.fingerprint
	}
	old := m.state.Swap(state)
	if result.Err == nil && old == fleetv1alpha1.MemberStateReady {
		// A blip: the informers retry soon enough.
		if lost := m.connLostAt.Load(); lost != 0 && lost < result.Time.UnixNano() {
			m.connLostAt.CompareAndSwap(lost, 0)
		}
	}
	m.silent.Store(result.Err != nil && !answered(result.Err))
	m.setAway(state == fleetv1alpha1.MemberStateUnhealthy)
	if old != state {
		kv := []any{"from", old, "to", state}
		if result.Err != nil {
			kv = append(kv, "probeError", SafeError(result.Err))
		}
		m.log.Info("Member state changed", kv...)
	}
	m.pool.report(m.name, state, &result)
	m.noteReady(state)
}

// keeps reports whether conn may go on after the member's return with
// connections lost: each of its informers is watching, or waiting in a
// call (held, or a handshake that waited through the freeze), so none
// sleeps in backoff; and the member reaches the cluster it was admitted
// for (a server replaced while away is not taken for the old one). With
// the identity check off, or only the address's hash for identity,
// nothing vouches for the cluster: it never keeps.
func (m *member) keeps(conn *connection) bool {
	if conn.informers.idle() {
		return false
	}
	m.pool.mu.Lock()
	admitted := m.clusterID
	m.pool.mu.Unlock()
	// With the identity check off nothing was read at admission (""),
	// with kube-system unreadable only the address: neither vouches that
	// the address still reaches the same cluster.
	if admitted == "" || strings.HasPrefix(admitted, addressIdentity) {
		return false
	}
	id, err := m.identify(conn.ctx)
	return err == nil && id == admitted
}

// away returns a channel closed once m is back, or nil while m is not
// Unhealthy: its informers' calls wait for it (see memberSyncs).
func (m *member) away() <-chan struct{} {
	m.backMu.Lock()
	defer m.backMu.Unlock()
	return m.back
}

// setAway records whether m is away, and lets its informers' held calls
// go once it is not.
func (m *member) setAway(away bool) {
	m.backMu.Lock()
	defer m.backMu.Unlock()
	switch {
	case away && m.back == nil:
		m.back = make(chan struct{})
	case !away && m.back != nil:
		close(m.back)
		m.back = nil
	}
}

func (m *member) setState(s fleetv1alpha1.MemberState) {
	m.setAway(s == fleetv1alpha1.MemberStateUnhealthy)
	if old := m.state.Swap(s); old != s {
		m.log.Info("Member state changed", "from", old, "to", s)
		m.pool.report(m.name, s, nil)
	}
	m.noteReady(s)
}

// noteReady tells the current connection, if any, that m is in state s,
// once the pool has published it.
func (m *member) noteReady(s fleetv1alpha1.MemberState) {
	if conn := m.conn.Load(); conn != nil && s == fleetv1alpha1.MemberStateReady {
		conn.readyOnce.Do(func() { close(conn.ready) })
	}
}

// State returns the member's current state.
func (m *member) State() fleetv1alpha1.MemberState { return m.state.Load().(fleetv1alpha1.MemberState) }

// over reports whether the connection ended.
func (c *connection) over() bool {
	select {
	case <-c.ended:
		return true
	default:
		return false
	}
}

// applyIndexes applies the indexes this connection has not seen yet. The
// pool's list only grows, so a count is enough to know which those are.
func (c *connection) applyIndexes(ctx context.Context, all []index) error {
	c.indexMu.Lock()
	defer c.indexMu.Unlock()
	var errs []error
	for ; c.indexed < len(all); c.indexed++ {
		ix := all[c.indexed]
		if err := c.cluster.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			errs = append(errs, fmt.Errorf("index %s on %T: %w", ix.field, ix.obj, err))
		}
	}
	return errors.Join(errs...)
}

// stop cancels the member and waits until everything it started has
// ended, then closes its connections. From then on its dialer refuses:
// a client of the member that outlives it cannot reach the member again.
func (m *member) stop() {
	m.stopped.Store(true)
	m.startOnce.Do(func() { close(m.done) }) // never started: nothing to wait for
	if m.cancel != nil {
		m.cancel()
	}
	<-m.done
	m.closeConnections()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
