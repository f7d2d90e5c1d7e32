package member_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// These tests are an outside review of the gated initial cache fills
// (initialsync.go). They share no state with each other but members[0],
// and run one at a time: envtest's AddUser is not safe for concurrent
// use (see TestStalledMembersDoNotHoldUpAnothersInitialSync).

// initialRequest reports whether req is an informer's initial request of
// a kind: a LIST, or a watch that asks for the initial objects.
func initialRequest(req *http.Request) bool {
	q := req.URL.Query()
	return req.Method == http.MethodGet && (q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true")
}

// reviewTransport answers a member's requests as the test says: it may
// fail the member's first initial ConfigMap request at once, or hold
// every initial request of the listed kinds unanswered until it is
// cancelled, as a frozen server does.
type reviewTransport struct {
	next http.RoundTripper
	// failFirst fails the first initial ConfigMap request.
	failFirst bool
	failed    *atomic.Bool
	failures  *atomic.Int32
	// stall holds the initial requests of every kind whose plural path
	// ends in one of these.
	stall   []string
	stalled *atomic.Int32
}

func (t reviewTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !initialRequest(req) {
		return t.next.RoundTrip(req)
	}
	if t.failFirst && strings.HasSuffix(req.URL.Path, "/configmaps") && t.failed.CompareAndSwap(false, true) {
		t.failures.Add(1)
		return nil, errors.New("review: the member refused its first list")
	}
	for _, kind := range t.stall {
		if strings.HasSuffix(req.URL.Path, "/"+kind) {
			t.stalled.Add(1)
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
	}
	return t.next.RoundTrip(req)
}

// roomyWatcher is a watcher whose engagements never block the pool, for
// tests of more members than newWatcher's channel holds.
func roomyWatcher(n int) *watcher {
	return &watcher{queue: priorityqueue.New[engage.Request]("review"), engaged: make(chan engagement, n)}
}

// TestFailedOrRemovedMembersLeakNoInitialSyncSlot: 25 members whose
// first initial list fails and 25 frozen members removed while they wait
// for a turn or hold one; then a healthy member still fills and is
// reconciled within seconds, every slot is given back once all synced
// (InitialSyncSlotsHeld reaches 0), and removing everyone leaves no
// goroutine. It fails if a failed request, a context that ends, or a
// removal keeps its slot: the healthy member would wait forever, or the
// held count would stay above 0.
func TestFailedOrRemovedMembersLeakNoInitialSyncSlot(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	var stalled, failures atomic.Int32
	var mu sync.Mutex
	firstFailed := map[string]*atomic.Bool{}
	w := roomyWatcher(64)
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage:                 w.engage,
		AllowDuplicateClusters: true,
		Configure: func(name string, o *cluster.Options) {
			c := *o.HTTPClient
			switch {
			case strings.HasPrefix(name, "removed-"):
				c.Transport = reviewTransport{next: c.Transport, stall: []string{"configmaps"}, stalled: &stalled}
			case strings.HasPrefix(name, "failing-"):
				mu.Lock()
				firstFailed[name] = &atomic.Bool{}
				f := firstFailed[name]
				mu.Unlock()
				c.Transport = reviewTransport{next: c.Transport, failFirst: true, failed: f, failures: &failures}
			}
			o.HTTPClient = &c
		},
	})
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)
	ns := fmt.Sprintf("review-leak-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "answered", nil)

	for i := range 25 {
		if err := pool.Set(registry.Registration{ClusterName: fmt.Sprintf("removed-%d", i), Kubeconfig: kc}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the frozen members hold every slot", func() bool { return stalled.Load() >= 4 })
	// Within their first turn (1 s): most frozen members still wait for one.
	waiting := 25 - int(stalled.Load())
	for i := range 25 {
		pool.Remove(fmt.Sprintf("removed-%d", i))
	}
	for i := range 25 {
		if err := pool.Set(registry.Registration{ClusterName: fmt.Sprintf("failing-%d", i), Kubeconfig: kc}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "every failing member's first list failed", func() bool { return failures.Load() == 25 })
	start := time.Now()
	if err := pool.Set(registry.Registration{ClusterName: "answering", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	for r := w.next(t); r.ClusterName != "answering" || r.Name != "answered"; r = w.next(t) {
	}
	took := time.Since(start)
	t.Logf("healthy member reconciled %s after registration; %d frozen members were removed while waiting for a turn, %d first lists failed", took, waiting, failures.Load())
	if waiting < 10 {
		t.Errorf("only %d frozen members were removed while waiting for a turn: the attack did not happen", waiting)
	}
	if took > 10*time.Second {
		t.Errorf("the healthy member was reconciled %s after its registration, want within seconds", took)
	}
	poll.Until(t, "every slot given back once the members synced", func() bool { return member.InitialSyncSlotsHeld(pool) == 0 })
	for _, name := range pool.Names() {
		pool.Remove(name)
	}
	waitForBaseline(t, baseline, sockets)
}

// cuttingTransport lets the test end a member's watches, and answers the
// next watch after that with 410 Gone, as a member does whose watch
// cache has moved on while it was away: the informer must list again.
type cuttingTransport struct {
	next     http.RoundTripper
	mu       *sync.Mutex
	bodies   *[]io.Closer
	expire   *atomic.Bool
	relisted *atomic.Int32
	armed    *atomic.Bool
}

func (t cuttingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/configmaps") {
		return t.next.RoundTrip(req)
	}
	if t.armed.Load() && initialRequest(req) {
		t.relisted.Add(1)
	}
	q := req.URL.Query()
	if q.Get("watch") == "true" && q.Get("sendInitialEvents") != "true" && t.expire.CompareAndSwap(true, false) {
		body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}`
		return &http.Response{StatusCode: http.StatusGone, Status: "410 Gone", Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && q.Get("watch") == "true" {
		t.mu.Lock()
		*t.bodies = append(*t.bodies, resp.Body)
		t.mu.Unlock()
	}
	return resp, err
}

// TestReListAfterReconnectIsNotGated: a member whose cache synced
// lists again after its watch ended and the server answered 410 Gone,
// while every initial-sync slot of the pool is taken (as by members
// engaging at the manager's start). Its re-list goes through, and a
// ConfigMap created then is reconciled. It fails if the re-list waited
// for a turn: no re-list request would be sent while the slots are taken.
func TestReListAfterReconnectIsNotGated(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	var mu sync.Mutex
	var bodies []io.Closer
	var expire, armed atomic.Bool
	var relisted atomic.Int32
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage:                 w.engage,
		AllowDuplicateClusters: true,
		Configure: func(_ string, o *cluster.Options) {
			c := *o.HTTPClient
			c.Transport = cuttingTransport{next: c.Transport, mu: &mu, bodies: &bodies, expire: &expire, relisted: &relisted, armed: &armed}
			o.HTTPClient = &c
		},
	})
	ns := fmt.Sprintf("review-relist-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "before", nil)
	if err := pool.Set(registry.Registration{ClusterName: "relisting", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	for r := w.next(t); r.Name != "before"; r = w.next(t) {
	}
	poll.Until(t, "the informer's slot given back after its sync", func() bool { return member.InitialSyncSlotsHeld(pool) == 0 })
	giveBack := member.TakeAllInitialSyncSlots(pool)
	defer giveBack()

	armed.Store(true)
	expire.Store(true)
	mu.Lock()
	for _, b := range bodies {
		_ = b.Close()
	}
	bodies = nil
	mu.Unlock()
	poll.Until(t, "the member listed again while every slot was taken", func() bool { return relisted.Load() > 0 })
	createConfigMap(t, memberClients[0], ns, "after", nil)
	for r := w.next(t); r.Name != "after"; r = w.next(t) {
	}
}

// manyKinds are the core kinds a frozen member's informers ask for in
// TestOneFrozenMemberHoldsUpAnotherNoLongerThanTheBound: a
// controller of the fleet watches several kinds in every member.
var manyKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "Secret"}, {Version: "v1", Kind: "Service"}, {Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "Endpoints"}, {Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "PersistentVolumeClaim"},
	{Version: "v1", Kind: "ReplicationController"}, {Version: "v1", Kind: "LimitRange"}, {Version: "v1", Kind: "ResourceQuota"},
	{Version: "v1", Kind: "PodTemplate"}, {Version: "v1", Kind: "Event"}, {Version: "v1", Kind: "ConfigMap"},
}

// TestOneFrozenMemberHoldsUpAnotherNoLongerThanTheBound: one
// member, frozen during its initial lists, whose engagement starts
// informers of 12 kinds (as the fleet's controllers do, one per kind
// they copy or watch); a healthy member registered once the frozen
// one's requests hold the slots should be reconciled within the bound
// (1 s) and a second of slack. A frozen member holds a turn per informer:
// it fails when one frozen member delays another by more than the bound
// (12 informers, 4 slots: about 3 s).
func TestOneFrozenMemberHoldsUpAnotherNoLongerThanTheBound(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	var stalled atomic.Int32
	w := newWatcher()
	defer w.queue.ShutDown()
	stallAll := []string{"secrets", "services", "serviceaccounts", "endpoints", "pods", "persistentvolumeclaims",
		"replicationcontrollers", "limitranges", "resourcequotas", "podtemplates", "events", "configmaps"}
	pool := startPool(t, member.Options{
		Engage: func(ctx context.Context, name string, cl cluster.Cluster) <-chan struct{} {
			if name != "frozen" {
				return w.engage(ctx, name, cl)
			}
			for _, gvk := range manyKinds {
				obj, err := cl.GetScheme().New(gvk)
				if err != nil {
					panic(err)
				}
				if _, err := cl.GetCache().GetInformer(ctx, obj.(client.Object), cache.BlockUntilSynced(false)); err != nil {
					panic(err)
				}
			}
			return ctx.Done()
		},
		AllowDuplicateClusters: true,
		Configure: func(name string, o *cluster.Options) {
			if name == "frozen" {
				c := *o.HTTPClient
				c.Transport = reviewTransport{next: c.Transport, stall: stallAll, stalled: &stalled}
				o.HTTPClient = &c
				o.Cache.ReaderFailOnMissingInformer = false
			}
		},
	})
	ns := fmt.Sprintf("review-frozen-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "answered", nil)
	if err := pool.Set(registry.Registration{ClusterName: "frozen", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the frozen member's requests hold every slot", func() bool { return stalled.Load() >= 4 })
	start := time.Now()
	if err := pool.Set(registry.Registration{ClusterName: "answering", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	for r := w.next(t); r.ClusterName != "answering" || r.Name != "answered"; r = w.next(t) {
	}
	took := time.Since(start)
	t.Logf("reconciled %s after registration, behind one frozen member with %d stalled initial requests", took, stalled.Load())
	if took > 2*time.Second {
		t.Errorf("one frozen member (%d initial requests unanswered) delayed another member's first reconcile by %s, more than the 1 s bound a member holds its turn", stalled.Load(), took)
	}
}
