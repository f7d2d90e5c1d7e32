package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// newQuietPool returns a pool whose members engage nothing and log
// nothing.
func newQuietPool(t *testing.T, allowDuplicates bool) *Pool {
	t.Helper()
	pool, err := NewPool(Options{Registry: NewObservedRegistry(nil), Engage: engageNothing, Logger: logr.Discard(), Policy: kubeconfigtest.Permissive, AllowDuplicateClusters: allowDuplicates})
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestInformerCallsWaitForTheMembersReturn: while the member is away, an
// informer's list and watch send nothing and wait, busy, until it is
// back or their context ends (then they fail, leaving nothing running);
// an informer whose watch was stopped and that is in no call is idle.
func TestInformerCallsWaitForTheMembersReturn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // after cancel: nothing left waiting
	back := make(chan struct{})
	away := back
	syncs := newInitialSyncs(1, time.Hour).forMember(func(context.Context) error { return nil }, func() <-chan struct{} { return away })
	sent := make(chan string, 10)
	lw := &toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			sent <- "list"
			return &metav1.List{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			sent <- "watch"
			return watch.NewFake(), nil
		},
	}
	syncs.newInformer(lw, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	g := syncs.informers[0]
	if !syncs.idle() {
		t.Fatal("an informer in no call and not watching is not idle")
	}

	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan error)
	go func() {
		_, err := g.ListWithContext(ctx, metav1.ListOptions{})
		ended <- err
	}()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if syncs.idle() {
		t.Error("an informer waiting in a held call is idle")
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("a held list whose context ended returned %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	watched := make(chan watch.Interface)
	go func() {
		w, err := g.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
		}
		watched <- w
	}()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case what := <-sent:
		t.Fatalf("a %s was sent while the member was away", what)
	default:
	}
	away = nil
	close(back) // the member is back
	w := <-watched
	if what := <-sent; what != "watch" {
		t.Fatalf("sent %s at the return, want the held watch", what)
	}
	if syncs.idle() {
		t.Error("a watching informer is idle")
	}
	w.Stop()
	w.Stop()
	if !syncs.idle() {
		t.Error("an informer whose watch stopped, in no call, is not idle")
	}
	cancel()
}

// TestMemberBackWithAnotherIdentityIsReconnected: a member back from
// Unhealthy after losing its connections, whose informers all waited for
// it, keeps its connection only if its cluster's identity is unchanged;
// another cluster behind the same address (a kube-system Namespace of
// another UID) reconnects it, so that it is admitted again.
func TestMemberBackWithAnotherIdentityIsReconnected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		uid       string
		refreshed bool
	}{{"admitted", false}, {"another", true}} {
		server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system","uid":%q}}`, c.uid)
		}))
		defer server.Close()
		pool := newQuietPool(t, false)
		m := newTestMember(t, pool, server.URL)
		m.clusterID = "admitted"
		m.state.Store(fleetv1alpha1.MemberStateUnhealthy)
		ctx, end := context.WithCancelCause(t.Context())
		informers := newInitialSyncs(1, time.Hour).forMember(m.awaitFirstDial, m.away)
		informers.informers = append(informers.informers, &gatedListerWatcher{})
		informers.informers[0].busy.Add(1) // waiting in a held call
		m.conn.Store(&connection{ctx: ctx, informers: informers, end: end, ended: ctx.Done(), ready: make(chan struct{})})
		m.connLostAt.Store(time.Now().UnixNano())

		m.report(registry.ProbeResult{Time: time.Now()}, fleetv1alpha1.MemberStateReady)
		if refreshed := context.Cause(ctx) == errRefreshed; refreshed != c.refreshed {
			t.Errorf("back with identity %q: reconnected %v, want %v", c.uid, refreshed, c.refreshed)
		}
		want := fleetv1alpha1.MemberStateReady
		if c.refreshed {
			want = fleetv1alpha1.MemberStateUnhealthy // until its new cluster starts
		}
		if got := m.State(); got != want {
			t.Errorf("back with identity %q: %s, want %s", c.uid, got, want)
		}
		end(nil)
	}
}

// TestHeldCallsGoOutAtTheMembersFirstByte: an Unhealthy member's held
// informer calls go out as soon as it sends anything, not only once the
// probe its byte asks for succeeds (a round trip later on a just-thawed
// server).
func TestHeldCallsGoOutAtTheMembersFirstByte(t *testing.T) {
	t.Parallel()
	pool := newQuietPool(t, false)
	m := newTestMember(t, pool, "https://127.0.0.1:1")
	m.state.Store(fleetv1alpha1.MemberStateUnhealthy)
	m.silent.Store(true) // its probes timed out
	m.setAway(true)
	syncs := newInitialSyncs(1, time.Hour).forMember(m.awaitFirstDial, m.away)
	listed := make(chan struct{})
	syncs.newInformer(&toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			close(listed)
			return &metav1.List{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = syncs.informers[0].ListWithContext(ctx, metav1.ListOptions{}) }()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	m.heard(&notifyingConn{})
	select {
	case <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("the held list did not go out at the member's first byte")
	}
}
