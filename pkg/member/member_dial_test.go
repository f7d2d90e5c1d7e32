package member

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

func TestClosingConnectionErrorIsNotRetried(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	for _, closing := range []bool{false, true} {
		local, err := net.Dial("tcp", listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		remote, err := listener.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conn := &notifyingConn{Conn: local, read: func(*notifyingConn) {}, closed: func(*notifyingConn) {}, closing: func() bool { return closing }}
		read := make(chan error)
		go func() {
			_, err := conn.Read(make([]byte, 1))
			read <- err
		}()
		_ = conn.Close()
		_ = remote.Close()
		err = <-read
		// client-go retries a GET after a second when an error looks like
		// a dropped connection, whatever its context.
		if retried := utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err); retried == closing {
			t.Errorf("closing=%t: read error %q looks like a dropped connection: %t", closing, err, retried)
		}
		_, err = conn.Write([]byte{0})
		if closing && !errors.Is(err, errClosing) {
			t.Errorf("closing: write error %v, want %v", err, errClosing)
		}
	}
}

func TestStoppedMemberRefusesToDial(t *testing.T) {
	m, listener := memberOnListener(t, nil)
	addr := listener.Addr().String()
	accepted := func() bool {
		t.Helper()
		_ = listener.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
		c, err := listener.Accept()
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}

	c, err := m.dialer.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if !accepted() {
		t.Fatal("the running member's dial reached nothing")
	}
	m.stop()
	// A teardown of a connection ends by allowing dials again; a stopped
	// member's must stay refused.
	m.closing.Store(true)
	m.closing.Store(false)
	if _, err := m.dialer.DialContext(t.Context(), "tcp", addr); !errors.Is(err, errClosing) {
		t.Fatalf("a stopped member dialled: %v, want %v", err, errClosing)
	}
	if accepted() {
		t.Fatal("a stopped member's dial reached the server")
	}
}

// newTestMember builds, without starting it, a member of pool named
// "member" whose kubeconfig points at server.
func newTestMember(t *testing.T, pool *Pool, server string) *member {
	t.Helper()
	kc := kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		cl.Server, cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = server, nil, true
	})
	creds, err := pool.parse(sha256.Sum256(kc), kc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMember("member", creds, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memberOnListener builds, without starting it, a member of a new pool on
// clk (nil: the real clock) whose server is a listener of its own, closed
// when the test ends.
func memberOnListener(t *testing.T, clk clock.WithTickerAndDelayedExecution) (*member, net.Listener) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	pool, err := NewPool(Options{Registry: NewObservedRegistry(nil), Engage: engageNothing, Policy: kubeconfigtest.Permissive, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return newTestMember(t, pool, "https://"+listener.Addr().String()), listener
}

// engageNothing engages a member with nothing.
func engageNothing(ctx context.Context, _ string, _ cluster.Cluster) <-chan struct{} {
	return ctx.Done()
}

// TestEstablishedConnections: a member's connection counts as established
// once it has been open for a probe timeout, and no longer once closed;
// with HTTP/2, closing a connection is not losing one (the connection
// pool tells of those), so a dial cut short by a probe's timeout does not
// make a member that is back reconnect.
func TestEstablishedConnections(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	m, listener := memberOnListener(t, clk)
	addr := listener.Addr().String()
	timeout := m.pool.opts.Health.Timeout
	if m.h2 == nil {
		t.Fatal("the member's transport keeps no track of its HTTP/2 connections")
	}
	c, err := m.dialer.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if m.establishedAt(clk.Now()) {
		t.Fatal("a connection just opened counts as established")
	}
	clk.Step(2 * timeout)
	if !m.establishedAt(clk.Now()) {
		t.Fatalf("a connection open for %s does not count as established", 2*timeout)
	}
	_ = c.Close()
	if m.establishedAt(clk.Now()) {
		t.Fatal("a closed connection counts as established")
	}
	if m.connLostAt.Load() != 0 {
		t.Fatal("closing a connection counted as losing one; with HTTP/2 only the connection pool tells")
	}
}

// TestHeardSince: the member is heard on a connection it had when a probe
// started, however young, through bytes read since or bytes received and
// not read yet; not through a connection opened since.
func TestHeardSince(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	m, listener := memberOnListener(t, clk)
	addr := listener.Addr().String()
	c, err := m.dialer.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server, err := listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	clk.Step(time.Millisecond) // the connection is a millisecond old
	start := clk.Now()
	if m.heardSince(start, start) {
		t.Fatal("heard from a member that sent nothing")
	}
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !m.heardSince(start, start) {
		if time.Now().After(deadline) {
			t.Fatal("a byte received and not read yet was not heard")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if !m.heardSince(start, start) {
		t.Fatal("a byte read on a connection a millisecond old was not heard")
	}
	if m.heardSince(start.Add(-time.Millisecond), start) {
		t.Fatal("heard on a connection opened after the probe started")
	}
	clk.Step(time.Millisecond)
	if m.heardSince(clk.Now(), clk.Now()) {
		t.Fatal("heard since a time after the last byte")
	}
}

// TestProbeCutByTheMembersOwnTeardownIsExcused: a review under way when
// the member closes its own connections (a Disconnected member's
// teardown, a rotation) fails with errClosing, which the prober excuses
// and retries soon, not with the error of a dropped connection, which
// would count as a failure and leave a Disconnected member an Interval
// before its next probe, though its server may be back.
func TestProbeCutByTheMembersOwnTeardownIsExcused(t *testing.T) {
	arrived := make(chan struct{}, 1)
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signal(arrived)
		<-r.Context().Done() // a frozen server: the review is never answered
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()
	pool, err := NewPool(Options{Registry: NewObservedRegistry(nil), Engage: engageNothing, Policy: kubeconfigtest.Permissive})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, server.URL)
	defer m.stop()

	reviewed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		reviewed <- m.review(ctx)
	}()
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the review never reached the server")
	}
	m.closeConnections()
	err = <-reviewed
	if !errors.Is(err, errClosing) {
		t.Fatalf("a review cut by the member's own teardown failed with %v, want %v", err, errClosing)
	}
}
