package member

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// TestMemberFrozenDuringItsIdentityReadIsNotEngaged: with duplicate
// clusters refused, a member whose server hangs on the identity read is
// not engaged when the read times out; it connects again, and is engaged
// only once a read has answered.
func TestMemberFrozenDuringItsIdentityReadIsNotEngaged(t *testing.T) {
	t.Parallel()
	var reads, answered atomic.Int32
	firstEnded := make(chan struct{})
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/namespaces/kube-system" {
			w.WriteHeader(http.StatusCreated) // a probe's SelfSubjectReview
			fmt.Fprint(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","status":{"userInfo":{"username":"member"}}}`)
			return
		}
		if reads.Add(1) == 1 { // frozen, until the reader gives up
			<-r.Context().Done()
			close(firstEnded)
			return
		}
		answered.Add(1)
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system","uid":"a8d1e0c4"}}`)
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	t.Cleanup(server.Close)

	engaged := make(chan int32, 10)
	pool, err := NewPool(Options{
		Registry: NewObservedRegistry(nil),
		Engage: func(ctx context.Context, _ string, _ cluster.Cluster) <-chan struct{} {
			engaged <- answered.Load()
			return ctx.Done()
		},
		Logger: logr.Discard(),
		Policy: kubeconfigtest.Permissive,
		Health: HealthOptions{
			Interval:         50 * time.Millisecond,
			RetryInterval:    50 * time.Millisecond,
			Timeout:          200 * time.Millisecond, // bounds the identity read too
			FailureThreshold: 1000,
			DisconnectAfter:  time.Hour,
		},
		ReconnectBackoff: &wait.Backoff{Duration: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, server.URL)
	ctx, cancel := context.WithCancel(t.Context())
	m.start(ctx)
	t.Cleanup(func() { cancel(); m.stop() })

	select {
	case <-firstEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen identity read never ended")
	}
	select {
	case n := <-engaged:
		if n == 0 {
			t.Fatal("engaged without an identity: the frozen read's timeout let the member in")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("not engaged after the server answered the identity read; %d reads", reads.Load())
	}
}

// TestIdentityIsReadFromTheServersCache: the identity read asks for
// resourceVersion 0, which an API server answers from its watch cache,
// without a read of etcd: kube-system's UID never changes, and the read
// delays every engagement with the identity check on.
func TestIdentityIsReadFromTheServersCache(t *testing.T) {
	t.Parallel()
	asked := make(chan string, 1)
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- r.URL.Query().Get("resourceVersion"):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system","uid":"a8d1e0c4"}}`)
	}))
	t.Cleanup(server.Close)
	pool, err := NewPool(Options{
		Registry: NewObservedRegistry(nil),
		Engage:   func(ctx context.Context, _ string, _ cluster.Cluster) <-chan struct{} { return ctx.Done() },
		Logger:   logr.Discard(),
		Policy:   kubeconfigtest.Permissive,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMember(t, pool, server.URL)
	t.Cleanup(m.stop)
	id, err := m.identify(t.Context())
	if err != nil || id != "a8d1e0c4" {
		t.Fatalf("identify: %q, %v; want the UID", id, err)
	}
	if rv := <-asked; rv != "0" {
		t.Errorf("the identity read asked resourceVersion %q, want 0 (the server's cache)", rv)
	}
}
