package propagation

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestWatchOfAFrozenClusterGivesUp watches a kind in a cluster that
// accepts connections and never answers, as a frozen API server does,
// twice at once: both calls fail once syncTimeout has passed, as an error
// to retry, and one informer asked the cluster, once.
func TestWatchOfAFrozenClusterGivesUp(t *testing.T) {
	t.Parallel()
	frozen := listenAndHang(t)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	mapper.Add(gvk, meta.RESTScopeNamespace)
	c, err := cache.New(&rest.Config{Host: "http://" + frozen.addr}, cache.Options{
		Scheme: scheme, Mapper: mapper, DefaultNamespaces: map[string]cache.Config{"team": {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchedKinds{
		cluster: "member frozen", cache: c, mapper: mapper, selector: labels.Everything(), namespace: "team",
		// The check's list is answered: it is the informer's that hangs.
		reader: fake.NewClientBuilder().WithScheme(scheme).Build(), running: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w.run(ctx)

	deadline, cancelDeadline := context.WithTimeout(ctx, syncTimeout+15*time.Second)
	defer cancelDeadline()
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = w.watch(deadline, gvk) })
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err == nil || deadline.Err() != nil {
			t.Fatalf("watch = %v after %s, want an error before %s", err, took, syncTimeout+15*time.Second)
		}
	}
	if n := frozen.accepted(); n != 1 {
		t.Errorf("%d connections to the cluster, want 1: one informer", n)
	}
	if kinds := w.watched(); len(kinds) != 0 {
		t.Errorf("watched = %v, want none: the informer has not synced", kinds)
	}
	t.Logf("watch gave up after %s: %v", took.Round(time.Millisecond), errs[0])
}

// hangingListener accepts connections and never answers.
type hangingListener struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
}

func listenAndHang(t *testing.T) *hangingListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hangingListener{addr: l.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			_ = c.Close()
		}
	})
	return h
}

func (h *hangingListener) accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}
