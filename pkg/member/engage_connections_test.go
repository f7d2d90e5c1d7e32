package member_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/registry"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestEngagementDialsOnce: a member's first requests, its probe, the read
// of its identity and its cache's first list and watch, all start at once
// and share one connection, so an engagement costs one TLS handshake.
func TestEngagementDialsOnce(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	proxy := newCountingProxy(t, members[0].Config.Host)
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + proxy.addr
	}
	if kc, err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}

	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})
	ns := fmt.Sprintf("dial-once-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "one", nil)
	if err := pool.Set(registry.Registration{ClusterName: "dial-once", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	for r := w.next(t); r.Name != "one"; r = w.next(t) {
	}
	poll.Until(t, "the member Ready", func() bool {
		s, _ := pool.State("dial-once")
		return s == fleetv1alpha1.MemberStateReady
	})
	if n := proxy.accepted.Load(); n != 1 {
		t.Fatalf("the engagement opened %d connections to the member, want 1", n)
	}
}

// countingProxy forwards TCP connections to a server and counts them.
type countingProxy struct {
	addr     string
	accepted atomic.Int32
}

func newCountingProxy(t *testing.T, server string) *countingProxy {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if target == "" {
		target = server
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(out, in); _ = out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); _ = in.Close() })
		}
	})
	return p
}

// TestMemberStillDiallingHoldsNoTurnToFill: 12 members whose first
// connection hangs in its TLS handshake (a server that accepts and never
// answers), each engaged with its informer started, then a member that
// answers: it is reconciled within a second. An informer waits for its
// member's first dial before it takes a turn to fill its cache, so a turn
// is spent on a list, not on a handshake. It fails if an informer takes
// its turn first: the dialling members hold the 4 turns a second each
// (the bound), and the answering member waits 2 to 3 s behind them.
func TestMemberStillDiallingHoldsNoTurnToFill(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	silent := newSilentServer(t)
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + silent.addr
	}
	dialling, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}

	const stuck = 12
	w := roomyWatcher(stuck + 1)
	defer w.queue.ShutDown()
	// The dialling members' probes wait for their handshakes for the
	// whole test, rather than the default 800 ms.
	pool := startPool(t, member.Options{Engage: w.engage, AllowDuplicateClusters: true, Health: member.HealthOptions{Timeout: time.Minute}})
	ns := fmt.Sprintf("dialling-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "answered", nil)
	for i := range stuck {
		if err := pool.Set(registry.Registration{ClusterName: fmt.Sprintf("dialling-%d", i), Kubeconfig: dialling}); err != nil {
			t.Fatal(err)
		}
	}
	for range stuck {
		<-w.engaged
	}
	poll.Until(t, "every dialling member's handshake under way", func() bool { return silent.accepted.Load() >= stuck })

	start := time.Now()
	if err := pool.Set(registry.Registration{ClusterName: "answering", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	for r := w.next(t); r.ClusterName != "answering" || r.Name != "answered"; r = w.next(t) {
	}
	took := time.Since(start)
	t.Logf("reconciled %s after registration, beside %d members still dialling", took, stuck)
	if took > time.Second {
		t.Errorf("the answering member was reconciled %s after its registration, behind %d members still dialling, want within a second", took, stuck)
	}
}

// silentServer accepts TCP connections, counts them and never answers,
// as a frozen API server does, until the test ends.
type silentServer struct {
	addr     string
	accepted atomic.Int32
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	return s
}
