package fleet_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The tests of a member's life as the registry publishes it: hub objects
// reach members that join or come back, label changes reach cluster
// filters, an Unhealthy member's work is held, and many members come and
// go without leaving anything behind.

// lcFleet is a test's fleet and the members it registered.
type lcFleet struct {
	*fleetEnv
	mu      sync.Mutex
	members []string
}

// lcStartFleet starts a fleet as startFleetWith does. When the test ends,
// once the fleet's manager has stopped, it deletes the MemberClusters of
// the members registered with lcRegister: they are cluster-scoped, and a
// manager that stopped may leave them behind, where they would take the
// name from the fleet of a later test.
func lcStartFleet(t *testing.T, configure func(o *fleet.Options)) *lcFleet {
	t.Helper()
	if hub == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
	f := &lcFleet{}
	// Registered before the manager's cleanup, so it runs after it.
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, name := range f.members {
			mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := client.IgnoreNotFound(hubClient.Delete(context.Background(), mc)); err != nil {
				t.Errorf("deleting MemberCluster %s: %v", name, err)
			}
		}
	})
	f.fleetEnv = startFleetWith(t, configure)
	return f
}

// lcRegister registers cluster name with a native Secret carrying extra
// labels, and deletes the Secret when the test ends.
func lcRegister(t *testing.T, f *lcFleet, name string, kubeconfig []byte, extra map[string]string) *corev1.Secret {
	t.Helper()
	l := map[string]string{registry.KubeconfigLabel: "true"}
	maps.Copy(l, extra)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: l},
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	}
	f.mu.Lock()
	f.members = append(f.members, name)
	f.mu.Unlock()
	if err := hubClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(hubClient.Delete(context.Background(), s)) })
	return s
}

// lcConfigMap creates a ConfigMap, or leaves the one there, and deletes it
// when the test ends.
func lcConfigMap(t *testing.T, cl client.Client, namespace, name string) {
	t.Helper()
	createNamespace(t, cl, namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := client.IgnoreAlreadyExists(cl.Create(t.Context(), cm)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(cl.Delete(context.Background(), cm)) })
}

// lcFanOut is a controller that maps every hub ConfigMap of namespace ns
// to a request for every member, and reconciles nothing else.
func lcFanOut(t *testing.T, f *lcFleet, name, ns string, r fleet.Reconciler) {
	t.Helper()
	key := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	err := fleet.NewControllerManagedBy(f.mgr).
		Named(name).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(nothing)).
		WatchesFleet(&corev1.ConfigMap{}, fleet.ToEveryMember(f.mgr, key), fleet.InClusters(fleet.Hub), fleet.WithPredicates(inNamespace(ns))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
}

// engagedBy reports whether controller has an engagement, made or under
// way, with cluster name.
func engagedBy(f *lcFleet, name, controller string) bool {
	return slices.ContainsFunc(f.mgr.Engagements(name), func(e engage.Engagement) bool { return e.Aware == controller })
}

func TestMemberThatJoinsGetsExistingHubObjects(t *testing.T) {
	const ns = "lc-join"
	f := lcStartFleet(t, nil)
	r := &recorder{}
	lcFanOut(t, f, "lc-join", ns, r)
	// The witness is engaged before the hub object exists: its request
	// shows that the hub's event was handled before the joiner joined.
	lcRegister(t, f, "lc-join-witness", kubeconfigs[0], nil)
	f.waitEngaged(t, "lc-join-witness")
	lcConfigMap(t, hubClient, ns, "existing")
	r.waitFor(t, request("lc-join-witness", ns, "existing"))

	lcRegister(t, f, "lc-joiner", kubeconfigs[1], nil)
	f.waitEngaged(t, "lc-joiner")
	r.waitFor(t, request("lc-joiner", ns, "existing"))
	if r.has(request("", ns, "existing")) {
		t.Fatal("a request for a hub object fanned out to members went to the hub")
	}
	if n := r.times(request("lc-join-witness", ns, "existing")); n != 1 {
		t.Fatalf("the witness got %d requests for the hub object, want 1: the joiner's replay reached another member", n)
	}
}

func TestMemberThatReconnectsGetsHubObjects(t *testing.T) {
	const ns = "lc-reconnect"
	f := lcStartFleet(t, quickHealth)
	r := &recorder{}
	lcFanOut(t, f, "lc-reconnect", ns, r)
	kc, proxy := viaProxy(t, kubeconfigs[0])
	lcRegister(t, f, "lc-returner", kc, nil)
	lcRegister(t, f, "lc-reconnect-witness", kubeconfigs[1], nil)
	f.waitState(t, "lc-returner", member.StateReady)
	f.waitEngaged(t, "lc-returner", "lc-reconnect-witness")
	lcConfigMap(t, hubClient, ns, "before")
	r.waitFor(t, request("lc-returner", ns, "before"), request("lc-reconnect-witness", ns, "before"))

	proxy.Down()
	f.waitState(t, "lc-returner", member.StateDisconnected)
	poll.Until(t, "lc-returner no longer engaged", func() bool { return !slices.Contains(f.mgr.ClusterNames(), "lc-returner") })
	lcConfigMap(t, hubClient, ns, "while-away")
	before := &corev1.ConfigMap{}
	if err := hubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "before"}, before); err != nil {
		t.Fatal(err)
	}
	before.Data = map[string]string{"changed": "while-away"}
	if err := hubClient.Update(t.Context(), before); err != nil {
		t.Fatal(err)
	}
	// The witness's request shows the hub's event was handled while the
	// returner was away, so only a replay can bring it the object.
	r.waitFor(t, request("lc-reconnect-witness", ns, "while-away"))
	if r.has(request("lc-returner", ns, "while-away")) {
		t.Fatal("a Disconnected member got a request")
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, "lc-returner", member.StateReady)
	r.waitFor(t, request("lc-returner", ns, "while-away"))
}

func TestLabelChangeReachesClusterFilter(t *testing.T) {
	const ns, memberName = "lc-gold", "lc-gold-member"
	f := lcStartFleet(t, nil)
	gold, witness := &recorder{}, &recorder{}
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("lc-gold-only").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(inNamespace(ns))).
		WithClusterFilter(fleet.ClusterSelectorFilter(labels.SelectorFromSet(labels.Set{"tier": "gold"}))).
		Complete(gold)
	if err != nil {
		t.Fatal(err)
	}
	// The witness, with no filter, sees each ConfigMap as soon as the
	// filtered controller would have.
	watchConfigMaps(t, f.fleetEnv, "lc-gold-witness", ns, fleet.Members, witness)
	s := lcRegister(t, f, memberName, kubeconfigs[1], nil)
	f.waitEngaged(t, memberName)
	lcConfigMap(t, memberClients[1], ns, "existing")
	witness.waitFor(t, request(memberName, ns, "existing"))
	if engagedBy(f, memberName, "lc-gold-only") || gold.has(request(memberName, ns, "existing")) {
		t.Fatal("a member without the label was engaged by the filtered controller")
	}

	setLabels := func(l map[string]string) {
		t.Helper()
		patch := client.MergeFrom(s.DeepCopy())
		s.Labels = l
		if err := hubClient.Patch(t.Context(), s, patch); err != nil {
			t.Fatal(err)
		}
	}
	setLabels(map[string]string{registry.KubeconfigLabel: "true", "tier": "gold"})
	gold.waitFor(t, request(memberName, ns, "existing"))
	poll.Until(t, "lc-gold-only engaged with "+memberName, func() bool { return engagedBy(f, memberName, "lc-gold-only") })
	lcConfigMap(t, memberClients[1], ns, "while-gold")
	gold.waitFor(t, request(memberName, ns, "while-gold"))

	setLabels(map[string]string{registry.KubeconfigLabel: "true"})
	poll.Until(t, "lc-gold-only disengaged from "+memberName, func() bool { return !engagedBy(f, memberName, "lc-gold-only") })
	if !slices.Contains(f.mgr.ClusterNames(), memberName) || !engagedBy(f, memberName, "lc-gold-witness") {
		t.Fatal("a label change disengaged the member from every controller")
	}
	lcConfigMap(t, memberClients[1], ns, "after-gold")
	witness.waitFor(t, request(memberName, ns, "after-gold"))
	time.Sleep(500 * time.Millisecond)
	if gold.has(request(memberName, ns, "after-gold")) {
		t.Fatal("a member that lost the label was still reconciled by the filtered controller")
	}
}

func TestHoldWiredEndToEnd(t *testing.T) {
	const ns, memberName, ctrl = "lc-hold", "lc-holder", "lc-hold"
	f := lcStartFleet(t, func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{
			Interval:         200 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
			Timeout:          500 * time.Millisecond,
			FailureThreshold: 2,
			DisconnectAfter:  time.Hour, // Unhealthy for as long as the test wants
		}
	})
	r := &recorder{}
	gate, blocked := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		if req.Name == "first" && first.CompareAndSwap(false, true) {
			close(blocked)
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return r.Reconcile(ctx, req)
	})
	err := fleet.NewControllerManagedBy(f.mgr).
		Named(ctrl).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(inNamespace(ns))).
		WithOptions(fleet.ControllerOptions{TypedOptions: crcontroller.TypedOptions[fleet.Request]{MaxConcurrentReconciles: 1}}).
		Complete(reconciler)
	if err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate) }) }
	t.Cleanup(release)
	kc, proxy := viaProxy(t, kubeconfigs[0])
	lcRegister(t, f, memberName, kc, nil)
	f.waitState(t, memberName, member.StateReady)
	f.waitEngaged(t, memberName)

	lcConfigMap(t, memberClients[0], ns, "first")
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the first request was not reconciled")
	}
	var queued []fleet.Request
	for i := range 5 {
		name := fmt.Sprintf("queued-%d", i)
		lcConfigMap(t, memberClients[0], ns, name)
		queued = append(queued, request(memberName, ns, name))
	}
	poll.Until(t, "the member's requests queued", func() bool { return queueDepth(t, ctrl, memberName) >= float64(len(queued)) })

	proxy.Down()
	f.waitState(t, memberName, member.StateUnhealthy)
	// The hold follows the registry's event; give it a moment.
	time.Sleep(300 * time.Millisecond)
	release()
	r.waitFor(t, request(memberName, ns, "first"))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if state, _ := f.mgr.MemberState(memberName); state != member.StateUnhealthy {
			t.Fatalf("the member turned %s while the test needed it Unhealthy", state)
		}
		for _, req := range queued {
			if r.has(req) {
				t.Fatalf("%s was reconciled while its member was Unhealthy", req)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, memberName, member.StateReady)
	r.waitFor(t, queued...)
}

// lcMemberClustersGone waits until the named MemberClusters are deleted.
func lcMemberClustersGone(t *testing.T, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for !apierrors.IsNotFound(hubClient.Get(context.Background(), types.NamespacedName{Name: name}, &fleetv1alpha1.MemberCluster{})) {
			if time.Now().After(deadline) {
				t.Errorf("MemberCluster %s was not deleted after its Secret", name)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestFiftyMembers(t *testing.T) {
	const ns, count = "fifty", 50
	// Each member caches only the test's namespace, so that 50 members
	// do not each hold the member API servers' every ConfigMap.
	f := lcStartFleet(t, func(o *fleet.Options) {
		o.ConfigureMember = func(_ string, co *cluster.Options) {
			co.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}}
		}
	})
	r := &recorder{}
	watchConfigMaps(t, f.fleetEnv, "lc-fifty", ns, fleet.Members, r)
	lcConfigMap(t, memberClients[0], ns, "marker")
	lcConfigMap(t, memberClients[1], ns, "marker")

	// One member stays, so that what the hub starts for the first member
	// (the MemberCluster controller's handler, the event broadcaster)
	// predates the baseline.
	keep := lcRegister(t, f, "lc-fifty-keep", kubeconfigs[0], nil)
	r.waitFor(t, request("lc-fifty-keep", ns, "marker"))
	poll.Until(t, "MemberCluster lc-fifty-keep Ready, written by this fleet", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		return hubClient.Get(t.Context(), types.NamespacedName{Name: "lc-fifty-keep"}, mc) == nil &&
			mc.Spec.SecretRef.Namespace == f.namespace && mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	f.mgr.GetEventRecorder("warm-up").Eventf(keep, nil, corev1.EventTypeNormal, "WarmUp", "Test", "before the goroutine baseline")
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)
	hubWorkers := goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority")
	start := time.Now()

	names := make([]string, count)
	secrets := make([]*corev1.Secret, count)
	for i := range count {
		names[i] = fmt.Sprintf("lc-fifty-%02d", i)
		secrets[i] = lcRegister(t, f, names[i], kubeconfigs[i%len(kubeconfigs)], nil)
	}
	poll.Until(t, "every member's marker reconciled", func() bool {
		for _, name := range names {
			if !r.has(request(name, ns, "marker")) {
				return false
			}
		}
		return true
	})
	if engaged := f.mgr.ClusterNames(); len(engaged) != count+1 {
		t.Fatalf("%d members engaged, want %d", len(engaged), count+1)
	}
	t.Logf("%d members reconciled in %s, %d sockets open (%d before)", count, time.Since(start).Round(time.Millisecond), poll.OpenSockets(t), sockets)

	removal := time.Now()
	for _, s := range secrets {
		if err := hubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "every member disengaged", func() bool {
		return slices.Equal(f.mgr.ClusterNames(), []string{"lc-fifty-keep"})
	})
	for _, name := range names {
		if _, err := f.mgr.GetCluster(t.Context(), name); err == nil {
			t.Fatalf("removed member %s still has a cluster", name)
		}
		if _, ok := f.mgr.MemberState(name); ok {
			t.Fatalf("removed member %s still has a state", name)
		}
	}
	var leaked error
	var open int
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaked, open = goleak.Find(baseline, hubWorkers, goleak.IgnoreTopFunction("time.Sleep")), poll.OpenSockets(t)
		// A couple of sockets of slack: the hub's client may open a
		// connection of its own meanwhile.
		if leaked == nil && open <= sockets+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after removing %d members: %d sockets open, %d before; goroutines: %v", count, open, sockets, leaked)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lcMemberClustersGone(t, names...)
	t.Logf("%d members removed, goroutines and sockets (%d, %d before) back in %s", count, open, sockets, time.Since(removal).Round(time.Millisecond))
}

// TestRemovalWaitsForReconcilesInFlight checks that a removed member is
// disengaged only once its reconciles in flight have returned, also one
// that ignores its context, so that nothing it started outlives it.
func TestRemovalWaitsForReconcilesInFlight(t *testing.T) {
	f := startFleet(t)
	var running atomic.Bool
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	watchConfigMaps(t, f, "in-flight", "lc-inflight", fleet.Members, fleet.ReconcilerFunc(func(context.Context, fleet.Request) (reconcile.Result, error) {
		running.Store(true)
		defer running.Store(false)
		once.Do(func() { close(started) })
		<-release // ignores its context
		return reconcile.Result{}, nil
	}))
	secret := f.register(t, "lc-inflight", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "lc-inflight", "slow")
	select {
	case <-started:
	case <-time.After(poll.Timeout):
		t.Fatal("the reconcile never started")
	}
	if err := hubClient.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	disengaged := func() bool { return f.logs.find("Disengaged member", `"cluster"="lc-inflight"`) }
	poll.Until(t, "the member leaving", func() bool { return !slices.Contains(f.mgr.ClusterNames(), "lc-inflight") })
	time.Sleep(500 * time.Millisecond)
	if disengaged() {
		t.Fatal("the member was disengaged while its reconcile was running")
	}
	close(release)
	poll.Until(t, "the member disengaged", disengaged)
	if running.Load() {
		t.Fatal("the reconcile was still running when the member was disengaged")
	}
}
