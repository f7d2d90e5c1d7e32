package member

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// backAfterLosingConnections sets m up as Unhealthy with a connection
// lost while away, whose one informer waits in a held call, reports a
// probe success, and returns whether the connection was ended to
// reconnect, and the state reported.
func backAfterLosingConnections(t *testing.T, m *member) (reconnected bool, state fleetv1alpha1.MemberState) {
	t.Helper()
	m.state.Store(fleetv1alpha1.MemberStateUnhealthy)
	ctx, end := context.WithCancelCause(t.Context())
	defer end(nil)
	informers := newInitialSyncs(1, time.Hour).forMember(m.awaitFirstDial, m.away)
	informers.informers = append(informers.informers, &gatedListerWatcher{})
	informers.informers[0].busy.Add(1) // waiting in a held call
	m.conn.Store(&connection{ctx: ctx, informers: informers, end: end, ended: ctx.Done(), ready: make(chan struct{})})
	m.connLostAt.Store(time.Now().UnixNano())
	m.report(registry.ProbeResult{Time: time.Now()}, fleetv1alpha1.MemberStateReady)
	return context.Cause(ctx) == errRefreshed, m.State()
}

// namespaceServer answers every request with a kube-system Namespace of
// uid.
func namespaceServer(t *testing.T, uid string) *httptest.Server {
	t.Helper()
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system","uid":%q}}`, uid)
	}))
	t.Cleanup(server.Close)
	return server
}

// TestReplacedClusterAtTheSameAddressIsNotResumed: a member back from
// Unhealthy after losing its connections, whose address now reaches
// another cluster (another kube-system UID), is reconnected rather than
// resumed, whether or not duplicate clusters are allowed: its cache read
// the cluster that was there, and resuming its watches at their
// resourceVersions on another cluster would keep that cluster's objects
// in it. With AllowDuplicateClusters the admitted identity is not read at
// admission, so the one read at the first connection is what the return
// must match.
func TestReplacedClusterAtTheSameAddressIsNotResumed(t *testing.T) {
	t.Parallel()
	for _, allowDuplicates := range []bool{false, true} {
		t.Run(fmt.Sprintf("AllowDuplicateClusters=%v", allowDuplicates), func(t *testing.T) {
			t.Parallel()
			pool := newQuietPool(t, allowDuplicates)
			m := newTestMember(t, pool, namespaceServer(t, "the-replacement").URL)
			m.clusterID = "the-admitted-one"
			reconnected, state := backAfterLosingConnections(t, m)
			if !reconnected {
				t.Error("a member back at an address that now reaches another cluster kept its cluster, and resumes its watches there")
			}
			if state == fleetv1alpha1.MemberStateReady {
				t.Error("a member back at an address that now reaches another cluster is Ready with the old cluster's cache")
			}
		})
	}
}

// TestMemberBackWithItsIdentityUnreadableIsReconnected: a member whose
// identity read fails at its return (the API server answers it with an
// error) is not taken for the cluster it was: it is reconnected, and not
// Ready until its new cluster starts.
func TestMemberBackWithItsIdentityUnreadableIsReconnected(t *testing.T) {
	t.Parallel()
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "etcdserver: leader changed", http.StatusInternalServerError)
	}))
	t.Cleanup(server.Close)
	pool := newQuietPool(t, false)
	m := newTestMember(t, pool, server.URL)
	m.clusterID = "the-admitted-one"
	reconnected, state := backAfterLosingConnections(t, m)
	if !reconnected {
		t.Error("a member whose identity could not be read at its return kept its cluster")
	}
	if state == fleetv1alpha1.MemberStateReady {
		t.Error("a member whose identity could not be read at its return is Ready")
	}
}

// statusServer answers every request with a Status of code, as an API
// server answers a read of kube-system that RBAC forbids (403) or of a
// cluster without it (404).
func statusServer(t *testing.T, code int) *httptest.Server {
	t.Helper()
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","code":%d}`, code)
	}))
	t.Cleanup(server.Close)
	return server
}

// TestReplacedClusterAtTheSameAddressIsNotResumedWhenKubeSystemIsUnreadable:
// a member whose credentials may not read kube-system (403), or whose
// cluster has none (404), is identified by its server URL and CA. At its
// return after losing its connections, that identity is the same
// whatever cluster now answers at the address, so it vouches for none:
// the member is reconnected, as with the identity check off, and not
// Ready with the cache of the cluster that was there.
func TestReplacedClusterAtTheSameAddressIsNotResumedWhenKubeSystemIsUnreadable(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			pool := newQuietPool(t, false)
			m := newTestMember(t, pool, statusServer(t, code).URL)
			admitted, err := m.identify(t.Context())
			if err != nil {
				t.Fatalf("identity at admission: %v, want the URL and CA's hash", err)
			}
			m.clusterID = admitted
			// The address now reaches another cluster, which answers
			// the same.
			reconnected, state := backAfterLosingConnections(t, m)
			if !reconnected {
				t.Error("a member identified by its URL and CA kept its cluster at its return: another cluster at that address would be taken for the old one")
			}
			if state == fleetv1alpha1.MemberStateReady {
				t.Error("a member identified by its URL and CA is Ready at its return with the cache of the cluster that was there")
			}
		})
	}
}

// TestMemberBackWhoseKubeSystemIsNowUnreadableIsReconnected: a member
// admitted with its kube-system UID whose address answers, at its return,
// that kube-system is forbidden (403) or missing (404) reaches another
// cluster, or one whose rights changed: the fallback identity is not the
// UID admitted, and the member is reconnected.
func TestMemberBackWhoseKubeSystemIsNowUnreadableIsReconnected(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			pool := newQuietPool(t, false)
			m := newTestMember(t, pool, statusServer(t, code).URL)
			m.clusterID = "the-admitted-one"
			reconnected, state := backAfterLosingConnections(t, m)
			if !reconnected {
				t.Error("a member whose kube-system became unreadable kept its cluster at its return")
			}
			if state == fleetv1alpha1.MemberStateReady {
				t.Error("a member whose kube-system became unreadable is Ready at its return")
			}
		})
	}
}

// TestFlappingMemberHoldsNoCallOnceBack: a member flapping between
// Unhealthy and back (a failed probe, a byte, a success, in any order, from
// many goroutines) never leaves an informer's call held once it is back,
// and a call made while it is away is held.
func TestFlappingMemberHoldsNoCallOnceBack(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	pool := newQuietPool(t, false)
	m := newTestMember(t, pool, "https://127.0.0.1:1")
	syncs := newInitialSyncs(4, time.Hour).forMember(func(context.Context) error { return nil }, m.away)
	var listed sync.WaitGroup
	const calls = 200
	listed.Add(calls)
	syncs.newInformer(&toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			listed.Done()
			return &metav1.List{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	g := syncs.informers[0]
	var flapping sync.WaitGroup
	for i := range 4 {
		flapping.Add(1)
		go func() {
			defer flapping.Done()
			for j := range 500 {
				switch (i + j) % 3 {
				case 0:
					m.setAway(true)
				case 1:
					m.setAway(false)
				default:
					m.heard(&notifyingConn{})
				}
			}
		}()
	}
	// The informer never runs, so a turn taken is held until ctx ends.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := g.ListWithContext(ctx, metav1.ListOptions{})
			errs <- err
		}()
	}
	flapping.Wait()
	m.setAway(false) // back
	done := make(chan struct{})
	go func() { listed.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d calls still held 30 s after the member is back", syncs.held.Load())
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	m.setAway(true)
	go func() { _, _ = g.ListWithContext(ctx, metav1.ListOptions{}) }()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	for syncs.held.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// TestCompressedWatchEventArrivesBeforeItsGzipMemberEnds: a server that
// compresses a whole watch as one gzip member, flushing after each event
// (Go's and many proxies' gzip middleware), has each event read as it is
// flushed, not once the member ends.
func TestCompressedWatchEventArrivesBeforeItsGzipMemberEnds(t *testing.T) {
	t.Parallel()
	first, second := []byte(`{"type":"ADDED"}`+"\n"), []byte(`{"type":"DELETED"}`+"\n")
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		gw := gzip.NewWriter(w)
		_, _ = gw.Write(first)
		_ = gw.Flush()
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = gw.Write(second)
		_ = gw.Close()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	client := &http.Client{Transport: watchGzip{next: srv.Client().Transport}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(srv.URL + "/api/v1/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len(first))
	read := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, got); read <- err }()
	select {
	case err := <-read:
		if err != nil || !bytes.Equal(got, first) {
			t.Fatalf("read %q, %v; want the first event", got, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first event, flushed, was not read within 30 s: it waits for its gzip member's end")
	}
	releaseOnce.Do(func() { close(release) })
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(rest, second) {
		t.Fatalf("then read %q, %v; want the second event and the end", rest, err)
	}
}

// TestWatchStoppedWhileAnEventIsReadEndsTheRead: a compressed watch
// closed while its reader is inside a gzip member (its header and part of
// an event came) ends the read with an error, races nothing, and leaves no
// goroutine.
func TestWatchStoppedWhileAnEventIsReadEndsTheRead(t *testing.T) {
	t.Parallel()
	var part bytes.Buffer
	gw := gzip.NewWriter(&part)
	_, _ = gw.Write(bytes.Repeat([]byte("x"), 4096))
	_ = gw.Flush() // a member begun, not ended
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(part.Bytes())
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: watchGzip{next: srv.Client().Transport}}
	t.Cleanup(client.CloseIdleConnections)
	for range 20 {
		resp, err := client.Get(srv.URL + "/api/v1/configmaps?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		if _, err := io.ReadFull(resp.Body, got); err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() { _, err := resp.Body.Read(got); read <- err }() // waits inside the member
		_ = resp.Body.Close()
		select {
		case err := <-read:
			if err == nil {
				t.Fatal("a read of a closed watch returned no error")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a read of a closed watch did not end within 30 s")
		}
	}
}

// TestMemberUnhealthyForAnsweringErrorsHoldsItsInformersCalls: a member
// Unhealthy because its API server answers its probes with errors (here a
// 500 to every request), not because it is silent, holds its informers'
// new list and watch calls until it is back (members.md: "Unhealthy for
// another reason ... new list and watch calls wait until it is back or
// Disconnected, as its work does"): each probe's error answer is a byte
// from the member, but not its return.
func TestMemberUnhealthyForAnsweringErrorsHoldsItsInformersCalls(t *testing.T) {
	t.Parallel()
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","code":500}`)
	}))
	t.Cleanup(server.Close)
	probed := make(chan fleetv1alpha1.MemberState, 1000)
	pool, err := NewPool(Options{
		Registry: NewObservedRegistry(func(_ string, s fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
			if probe != nil {
				probed <- s
			}
		}),
		Engage:                 engageNothing,
		Logger:                 logr.Discard(),
		Policy:                 kubeconfigtest.Permissive,
		Health:                 HealthOptions{Interval: 100 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: 10 * time.Second, FailureThreshold: 1, DisconnectAfter: time.Hour},
		AllowDuplicateClusters: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, server.URL)
	ctx, cancel := context.WithCancel(t.Context())
	m.start(ctx)
	t.Cleanup(func() { cancel(); m.stop() })
	deadline := time.After(30 * time.Second)
	for s := fleetv1alpha1.MemberStateConnecting; s != fleetv1alpha1.MemberStateUnhealthy; {
		select {
		case s = <-probed:
		case <-deadline:
			t.Fatal("not Unhealthy within 30 s")
		}
	}

	syncs := newInitialSyncs(1, time.Hour).forMember(func(context.Context) error { return nil }, m.away)
	sent := make(chan struct{})
	syncs.newInformer(&toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			close(sent)
			return &metav1.List{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	go func() { _, _ = syncs.informers[0].ListWithContext(ctx, metav1.ListOptions{}) }()
	// Three more probes, each answered with an error while the list waits.
	for range 3 {
		select {
		case s := <-probed:
			if s != fleetv1alpha1.MemberStateUnhealthy {
				t.Fatalf("a member whose probes are answered with errors is %s", s)
			}
		case <-sent:
			t.Fatal("an informer's list went out while its member was Unhealthy, its probes answered with errors: the error's bytes were taken for its return")
		case <-deadline:
			t.Fatal("no probe within 30 s")
		}
	}
	select {
	case <-sent:
		t.Fatal("an informer's list went out while its member was Unhealthy, its probes answered with errors: the error's bytes were taken for its return")
	default:
	}
}

// TestDisconnectAfterDefaultsToThreeMinutesAndASilentStartIsExcused30s:
// by default a member is Disconnected after 3 minutes of failed probes,
// and a member that never answered since it started is excused 30 s at
// most, also under a longer --disconnect-after; a shorter one excuses
// half of it.
func TestDisconnectAfterDefaultsToThreeMinutesAndASilentStartIsExcused30s(t *testing.T) {
	t.Parallel()
	d := DefaultHealthOptions()
	if d.DisconnectAfter != 3*time.Minute {
		t.Errorf("DisconnectAfter defaults to %s, want 3m", d.DisconnectAfter)
	}
	var zero HealthOptions
	zero.setDefaults()
	if zero.DisconnectAfter != 3*time.Minute {
		t.Errorf("DisconnectAfter left unset becomes %s, want 3m", zero.DisconnectAfter)
	}
	for _, c := range []struct{ disconnectAfter, grace time.Duration }{
		{3 * time.Minute, 30 * time.Second},
		{time.Hour, 30 * time.Second},
		{time.Minute, 30 * time.Second},
		{20 * time.Second, 10 * time.Second},
	} {
		o := HealthOptions{DisconnectAfter: c.disconnectAfter}
		o.setDefaults()
		if got := o.startGrace(); got != c.grace {
			t.Errorf("with --disconnect-after=%s a silent start is excused %s, want %s", c.disconnectAfter, got, c.grace)
		}
	}
}

// TestThousandMembersUnhealthyAtOnceReleaseEveryHeldCall: 1,000 members
// Unhealthy at once, each with an informer waiting in a held call, add
// nothing but those waits, and once back every call goes out, leaving
// no goroutine behind.
func TestThousandMembersUnhealthyAtOnceReleaseEveryHeldCall(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const members = 1000
	pool := newQuietPool(t, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var sent sync.WaitGroup
	var out atomic.Int32
	sent.Add(members)
	ms := make([]*member, members)
	syncs := make([]*memberSyncs, members)
	for i := range ms {
		ms[i] = &member{pool: pool}
		ms[i].setAway(true)
		syncs[i] = pool.initialSyncs.forMember(func(context.Context) error { return nil }, ms[i].away)
		// The informers synced before their members went away: they take
		// no turn to fill (their informers do not run here, so the test
		// says so this way).
		syncs[i].markSlow()
		syncs[i].newInformer(&toolscache.ListWatch{
			ListFunc: func(metav1.ListOptions) (runtime.Object, error) { return &metav1.List{}, nil },
			WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
				out.Add(1)
				sent.Done()
				return watch.NewFake(), nil
			},
		}, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	}
	watches := make(chan watch.Interface, members)
	for _, s := range syncs {
		go func() {
			w, _ := s.informers[0].WatchWithContext(ctx, metav1.ListOptions{})
			watches <- w
		}()
	}
	for _, s := range syncs {
		for s.held.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n := out.Load(); n != 0 {
		t.Fatalf("%d watches went out while their members were away", n)
	}
	start := time.Now()
	for _, m := range ms {
		m.setAway(false)
	}
	done := make(chan struct{})
	go func() { sent.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("not every held watch went out within a minute of the members' return")
	}
	t.Logf("1,000 held watches out %s after the return", time.Since(start))
	for range members {
		if w := <-watches; w != nil {
			w.Stop()
		}
	}
	for _, s := range syncs {
		if s.idle() {
			continue
		}
		t.Fatal("an informer whose watch stopped is still busy")
	}
	cancel()
}
