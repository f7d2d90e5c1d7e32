package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"golang.org/x/net/http2"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/connrotation"
)

// ErrConnectionRefused is the error of a request to a member that refused
// the connection: a member that went down, say.
var ErrConnectionRefused = errors.New("connection refused")

// newDialer returns m's dialer. A dialer of its own keeps m's connections
// from being shared with other members and lets m close every one; control
// checks each resolved address against the policy.
func (m *member) newDialer(control func(network, address string, c syscall.RawConn) error) *connrotation.Dialer {
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: control}).DialContext
	return connrotation.NewDialer(func(ctx context.Context, network, address string) (net.Conn, error) {
		if m.refusing() {
			return nil, errClosing
		}
		c, err := dial(ctx, network, address)
		if errors.Is(err, syscall.ECONNREFUSED) {
			// Without its errno: on ECONNREFUSED client-go's streaming list
			// sleeps out its retry backoff (up to 30 s) without heeding
			// cancellation, holding up the teardown of a member that went
			// away; other errors take paths that stop at once.
			return nil, fmt.Errorf("dial %s %s: %w", network, address, ErrConnectionRefused)
		}
		if err != nil {
			return nil, err
		}
		if m.stopped.Load() {
			// stop may have closed every connection while this one was
			// dialled.
			_ = c.Close()
			return nil, errClosing
		}
		nc := &notifyingConn{Conn: c, opened: m.pool.opts.Clock.Now(), read: m.heard, closed: m.connClosed, closing: m.refusing}
		nc.readAt.Store(math.MinInt64)
		m.connsMu.Lock()
		m.conns[nc] = struct{}{}
		m.connsMu.Unlock()
		return nc, nil
	})
}

// newTransport builds m's round tripper from cfg, which it leaves alone.
// The transport dials through m's dialer. For a rotatable cfg, the token
// and client certificate are left out of the transport's config and read
// from m.creds instead: the token by a token source at every request, the
// certificate at every TLS handshake.
//
// The member builds its http.Transport itself rather than through
// client-go's TLS transport cache: that cache would key it by m's dialer
// and certificate callback, which reach the transport again, and such an
// entry's cleanup keeps the member, and its whole fleet, from ever being
// collected.
func (m *member) newTransport(cfg *rest.Config) (http.RoundTripper, error) {
	cfg = rest.CopyConfig(cfg)
	var cert *transport.GetCertHolder
	if rotatable(cfg) {
		if cfg.BearerToken != "" {
			cfg.BearerToken = ""
			cfg.Wrap(transport.TokenSourceWrapTransport(tokenSource{&m.creds}))
		}
		if len(cfg.CertData) > 0 {
			cfg.CertData, cfg.KeyData = nil, nil
			cert = &transport.GetCertHolder{GetCert: func() (*tls.Certificate, error) { return m.creds.Load().cert, nil }}
		}
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, err
	}
	if cert != nil {
		tc.TLS.GetCertHolder = cert
	}
	tlsOnly := *tc // the TLS config reads it at every handshake
	tlsConfig, err := transport.TLSConfigFor(&tlsOnly)
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if tc.Proxy != nil {
		proxy = tc.Proxy
	}
	// As client-go's cache would build it.
	t := utilnet.SetOldTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         m.dialer.DialContext,
		DisableCompression:  tc.DisableCompression,
	})
	if err := m.configureHTTP2(t); err != nil {
		return nil, err
	}
	tc.Transport = t
	if m.h2 != nil {
		tc.Transport = &firstConnection{next: t, connected: m.h2.connected, slot: m.h2.dialling}
	}
	if !tc.DisableCompression {
		tc.Transport = watchGzip{next: tc.Transport}
	}
	tc.TLS, tc.Proxy = transport.TLSConfig{}, nil
	rt, err := transport.New(tc)
	if err != nil || m.pool.opts.MayWrite == nil {
		return rt, err
	}
	return gatedWrites{name: m.name, mayWrite: m.pool.opts.MayWrite, next: rt}, nil
}

// firstConnection lets one request at a time dial while a member has no
// connection, until it got one: the requests a member starts with, its
// first probe, its identity and its cache's first lists, then share one
// HTTP/2 connection and one TLS handshake, where each would dial its own
// (http.Transport learns that a connection speaks HTTP/2 only once its
// handshake is done) and all but one would be thrown away. A request
// waits at most until its context ends; one whose dial fails lets the
// next dial, so a member that does not answer delays only its own
// requests, as much as their own dials would.
type firstConnection struct {
	next      http.RoundTripper
	connected func() bool
	slot      chan struct{}
}

func (f *firstConnection) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.connected() {
		return f.next.RoundTrip(req)
	}
	select {
	case f.slot <- struct{}{}:
	case <-req.Context().Done():
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes it, even on error
		}
		return nil, req.Context().Err()
	}
	var once sync.Once
	release := func() { once.Do(func() { <-f.slot }) }
	defer release()
	if f.connected() {
		release()
		return f.next.RoundTrip(req)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { release() },
	}))
	return f.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go find the transport underneath.
func (f *firstConnection) WrappedRoundTripper() http.RoundTripper { return f.next }

// connected reports whether p holds an HTTP/2 connection, open, that a
// request used.
func (p *trackingPool) connected() bool {
	cc := p.last.Load()
	return cc != nil && !cc.State().Closed
}

// awaitFirstDial returns once no request of m dials its first connection:
// at once if m has a connection or none is being dialled, else once that
// dial got its connection or failed, or ctx ended. An informer waits so
// before it takes its turn to fill (initialSyncs): a turn is then spent
// on a list, not on a TLS handshake that another request started.
func (m *member) awaitFirstDial(ctx context.Context) error {
	if m.h2 == nil || m.h2.connected() {
		return nil
	}
	select {
	case m.h2.dialling <- struct{}{}:
		<-m.h2.dialling
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gatedWrites asks mayWrite before it sends a request that could change
// the member, at the last moment the process decides it.
type gatedWrites struct {
	name     string
	mayWrite func(clusterName string) error
	next     http.RoundTripper
}

func (g gatedWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if changes(req) {
		if err := g.mayWrite(g.name); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper closes it, even on error
			}
			return nil, fmt.Errorf("member %s: request not sent: %w", g.name, err)
		}
	}
	return g.next.RoundTrip(req)
}

// changes reports whether req could change the member: any method but
// GET, HEAD and OPTIONS, except the create of a review (TokenReview,
// SelfSubjectReview, SubjectAccessReview...), which persists nothing.
func changes(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	case http.MethodPost:
		return !strings.HasSuffix(req.URL.Path, "reviews")
	}
	return true
}

// WrappedRoundTripper lets client-go find the transport under the gate
// (utilnet.RoundTripperWrapper), as it does under its own wrappers.
func (g gatedWrites) WrappedRoundTripper() http.RoundTripper { return g.next }

// configureHTTP2 enables HTTP/2 on t as client-go does, with its
// connection health check, unless DISABLE_HTTP2 is set, and keeps track
// of the HTTP/2 connection m's requests use, for m's probes to PING.
func (m *member) configureHTTP2(t *http.Transport) error {
	if os.Getenv("DISABLE_HTTP2") != "" {
		return nil
	}
	// A stream's unread bytes are bounded, where HTTP/2's default lets
	// each buffer 4 MiB: when every member lists at once, faster than the
	// process decodes, the lists would wait in buffers, and the peak heap,
	// which the process keeps long after, grows with the members.
	t.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: streamReceiveBuffer}
	t2, err := http2.ConfigureTransports(t)
	if err != nil {
		return err
	}
	t2.ReadIdleTimeout, t2.PingTimeout = 30*time.Second, 15*time.Second
	if t2.ConnPool != nil {
		m.h2 = &trackingPool{ClientConnPool: t2.ConnPool, lost: m.connLost, dialling: make(chan struct{}, 1)}
		t2.ConnPool = m.h2
	}
	return nil
}

// streamReceiveBuffer is the most a member's HTTP/2 stream, such as a
// watch, buffers unread: 256 KiB, 25 MB/s at a 10 ms round trip.
const streamReceiveBuffer = 256 << 10

// trackingPool is an HTTP/2 connection pool that remembers the
// connection it last handed out, until that connection dies, and tells
// lost of each connection that dies or is going away.
type trackingPool struct {
	http2.ClientConnPool
	last atomic.Pointer[http2.ClientConn]
	lost func()
	// dialling is full while a request dials the first connection
	// (firstConnection).
	dialling chan struct{}
}

func (p *trackingPool) GetClientConn(req *http.Request, addr string) (*http2.ClientConn, error) {
	cc, err := p.ClientConnPool.GetClientConn(req, addr)
	if err == nil && p.last.Load() != cc {
		p.last.Store(cc)
	}
	return cc, err
}

func (p *trackingPool) MarkDead(cc *http2.ClientConn) {
	p.last.CompareAndSwap(cc, nil)
	p.lost()
	p.ClientConnPool.MarkDead(cc)
}

// ping sends a PING on the connection p last handed out, and waits for
// its answer. It fails with errNoConnection at once if there is none.
func (p *trackingPool) ping(ctx context.Context) error {
	cc := p.last.Load()
	if cc == nil || cc.State().Closed {
		return errNoConnection
	}
	return cc.Ping(ctx)
}

// errNoConnection fails the PING of a member with no HTTP/2 connection.
var errNoConnection = errors.New("no HTTP/2 connection to ping")

// heard is told of every read of bytes from the member, on c. An
// Unhealthy member that answers anything, a watch event, a list, a late
// probe, is probed at once: its return is noticed without waiting for the
// next probe; and, if it was Unhealthy for not answering at all, its
// informers' held calls go out at once (see memberSyncs), ahead of the
// probe's answer. Bytes of a member that answers with errors are not its
// return: its calls stay held until it leaves Unhealthy.
func (m *member) heard(c *notifyingConn) {
	c.readAt.Store(m.pool.opts.Clock.Now().UnixNano())
	if m.State() == fleetv1alpha1.MemberStateUnhealthy {
		if m.silent.Load() {
			m.setAway(false)
		}
		m.wake()
	}
}

// heardSince reports whether m's server sent anything since since, on a
// network connection opened before openedBefore and still open: any byte
// it sends, on a watch, a list or a probe, shows the server alive. That
// is a byte read since, or one received and not read yet: a process
// starved of CPU reads its sockets late, and a probe's timeout may fire
// before its answer, waiting in the socket, is read. A connection opened
// since does not count: what a new connection reads first is its
// handshake, which a proxy in front of a dead server would answer too.
func (m *member) heardSince(openedBefore, since time.Time) bool {
	m.connsMu.Lock()
	defer m.connsMu.Unlock()
	for c := range m.conns {
		if c.opened.Before(openedBefore) && (c.readAt.Load() >= since.UnixNano() || unread(c.Conn)) {
			return true
		}
	}
	return false
}

// connClosed is told of the close of c. Without HTTP/2, an established
// connection, one open for more than a probe timeout, is lost when it
// closes; with HTTP/2, the connection pool tells which are lost: one
// closed during its dial or handshake, say by a probe's timeout, carried
// no watch.
func (m *member) connClosed(c *notifyingConn) {
	m.connsMu.Lock()
	delete(m.conns, c)
	m.connsMu.Unlock()
	if m.h2 == nil && m.pool.opts.Clock.Since(c.opened) > m.pool.opts.Health.Timeout {
		m.connLost()
	}
}

// connLost records that an established connection of m was lost.
func (m *member) connLost() { m.connLostAt.Store(m.pool.opts.Clock.Now().UnixNano()) }

// establishedAt reports whether m had a network connection at t opened
// more than a probe timeout before, and still open.
func (m *member) establishedAt(t time.Time) bool {
	before := t.Add(-m.pool.opts.Health.Timeout)
	m.connsMu.Lock()
	defer m.connsMu.Unlock()
	for c := range m.conns {
		if !c.opened.After(before) {
			return true
		}
	}
	return false
}

// refusing reports whether m's dials fail: while a connection is torn
// down, and for ever once m is stopped.
func (m *member) refusing() bool { return m.closing.Load() || m.stopped.Load() }

func (m *member) closeConnections() {
	m.shutConnections()
	m.httpClient.CloseIdleConnections()
}

// shutConnections closes every network connection of m, marked as closed
// by m itself: a request under way on one, such as a probe, then fails
// with errClosing, which proves nothing of the member, rather than with
// the error of a connection the member dropped.
func (m *member) shutConnections() {
	m.connsMu.Lock()
	for c := range m.conns {
		c.shut.Store(true)
	}
	m.connsMu.Unlock()
	m.dialer.CloseAll()
}

// errClosing fails the dials of a member whose connection is torn down,
// or that is stopped.
var errClosing = errors.New("member connection closing")

// notifyingConn is a network connection that tells when it is read and
// when it is closed.
// Once its member's connection is closing, or its member is stopped or
// closed it, it fails reads and writes with errClosing: client-go takes the error of a
// closed connection for a dropped one and retries a GET after a second,
// without heeding cancellation, which would hold up the teardown of a hung
// member.
type notifyingConn struct {
	net.Conn
	opened  time.Time
	read    func(*notifyingConn)
	closed  func(*notifyingConn)
	closing func() bool
	// readAt is when the connection last read anything, in Unix
	// nanoseconds of the pool's clock; math.MinInt64 before its first.
	readAt atomic.Int64
	// shut is set once the member closes the connection itself.
	shut atomic.Bool
}

func (c *notifyingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read(c)
	}
	return n, c.describe(err)
}

func (c *notifyingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.describe(err)
}

// describe returns errClosing for an error of a closing connection, or
// of one the member closed.
func (c *notifyingConn) describe(err error) error {
	if err != nil && (c.closing() || c.shut.Load()) {
		return errClosing
	}
	return err
}

func (c *notifyingConn) Close() error {
	c.closed(c)
	return c.Conn.Close()
}
