package fleet_test

import (
	"context"
	"fmt"
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
	"github.com/fleetkube/fleet-manager/internal/fleettest"
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

// lcConfigMap creates a ConfigMap, or leaves the one there, and deletes it
// when the test ends.
func lcConfigMap(t *testing.T, cl client.Client, namespace, name string) {
	t.Helper()
	fleettest.CreateNamespace(t, cl, namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := client.IgnoreAlreadyExists(cl.Create(t.Context(), cm)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(cl.Delete(context.Background(), cm)) })
}

// lcFanOut is a controller that maps every hub ConfigMap of namespace ns
// to a request for every member, and reconciles nothing else.
func lcFanOut(t *testing.T, f *fleettest.Fleet, name, ns string, r fleet.Reconciler) {
	t.Helper()
	key := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	err := fleet.NewControllerManagedBy(f.Manager).
		Named(name).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(nothing)).
		WatchesFleet(&corev1.ConfigMap{}, fleet.ToEveryMember(f.Manager, key), fleet.InClusters(fleet.Hub), fleet.WithPredicates(fleettest.InNamespace(ns))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
}

// engagedBy reports whether controller has an engagement, made or under
// way, with cluster name.
func engagedBy(f *fleettest.Fleet, name, controller string) bool {
	return slices.ContainsFunc(f.Manager.Engagements(name), func(e engage.Engagement) bool { return e.Aware == controller })
}

func TestMemberThatJoinsGetsExistingHubObjects(t *testing.T) {
	t.Parallel()
	const ns = "lc-join"
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	lcFanOut(t, f, "lc-join", ns, r)
	// The witness is engaged before the hub object exists: its request
	// shows that the hub's event was handled before the joiner joined.
	f.Register(t, "lc-join-witness", suite.Kubeconfigs[0])
	f.WaitEngaged(t, "lc-join-witness")
	lcConfigMap(t, suite.HubClient, ns, "existing")
	r.WaitFor(t, fleettest.Request("lc-join-witness", ns, "existing"))

	f.Register(t, "lc-joiner", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "lc-joiner")
	r.WaitFor(t, fleettest.Request("lc-joiner", ns, "existing"))
	if r.Has(fleettest.Request("", ns, "existing")) {
		t.Fatal("a request for a hub object fanned out to members went to the hub")
	}
	if n := r.Times(fleettest.Request("lc-join-witness", ns, "existing")); n != 1 {
		t.Fatalf("the witness got %d requests for the hub object, want 1: the joiner's replay reached another member", n)
	}
}

func TestMemberThatReconnectsGetsHubObjects(t *testing.T) {
	t.Parallel()
	const ns = "lc-reconnect"
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: fleettest.QuickHealth})
	r := &fleettest.Recorder{}
	lcFanOut(t, f, "lc-reconnect", ns, r)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.Register(t, "lc-returner", kc)
	f.Register(t, "lc-reconnect-witness", suite.Kubeconfigs[1])
	f.WaitState(t, "lc-returner", fleetv1alpha1.MemberStateReady)
	f.WaitEngaged(t, "lc-returner", "lc-reconnect-witness")
	lcConfigMap(t, suite.HubClient, ns, "before")
	r.WaitFor(t, fleettest.Request("lc-returner", ns, "before"), fleettest.Request("lc-reconnect-witness", ns, "before"))

	proxy.Down()
	f.WaitState(t, "lc-returner", fleetv1alpha1.MemberStateDisconnected)
	poll.Until(t, "lc-returner no longer engaged", func() bool { return !slices.Contains(f.Manager.ClusterNames(), "lc-returner") })
	lcConfigMap(t, suite.HubClient, ns, "while-away")
	before := &corev1.ConfigMap{}
	if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "before"}, before); err != nil {
		t.Fatal(err)
	}
	before.Data = map[string]string{"changed": "while-away"}
	if err := suite.HubClient.Update(t.Context(), before); err != nil {
		t.Fatal(err)
	}
	// The witness's request shows the hub's event was handled while the
	// returner was away, so only a replay can bring it the object.
	r.WaitFor(t, fleettest.Request("lc-reconnect-witness", ns, "while-away"))
	if r.Has(fleettest.Request("lc-returner", ns, "while-away")) {
		t.Fatal("a Disconnected member got a request")
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.WaitState(t, "lc-returner", fleetv1alpha1.MemberStateReady)
	r.WaitFor(t, fleettest.Request("lc-returner", ns, "while-away"))
}

func TestLabelChangeReachesClusterFilter(t *testing.T) {
	t.Parallel()
	const ns, memberName = "lc-gold", "lc-gold-member"
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	gold, witness := &fleettest.Recorder{}, &fleettest.Recorder{}
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("lc-gold-only").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace(ns))).
		WithClusterFilter(fleet.ClusterSelectorFilter(labels.SelectorFromSet(labels.Set{"tier": "gold"}))).
		Complete(gold)
	if err != nil {
		t.Fatal(err)
	}
	// The witness, with no filter, sees each ConfigMap as soon as the
	// filtered controller would have.
	f.WatchConfigMaps(t, "lc-gold-witness", ns, fleet.Members, witness)
	s := f.Register(t, memberName, suite.Kubeconfigs[1])
	f.WaitEngaged(t, memberName)
	lcConfigMap(t, suite.MemberClients[1], ns, "existing")
	witness.WaitFor(t, fleettest.Request(memberName, ns, "existing"))
	if engagedBy(f, memberName, "lc-gold-only") || gold.Has(fleettest.Request(memberName, ns, "existing")) {
		t.Fatal("a member without the label was engaged by the filtered controller")
	}

	setLabels := func(l map[string]string) {
		t.Helper()
		patch := client.MergeFrom(s.DeepCopy())
		s.Labels = l
		if err := suite.HubClient.Patch(t.Context(), s, patch); err != nil {
			t.Fatal(err)
		}
	}
	setLabels(map[string]string{registry.KubeconfigLabel: "true", "tier": "gold"})
	gold.WaitFor(t, fleettest.Request(memberName, ns, "existing"))
	poll.Until(t, "lc-gold-only engaged with "+memberName, func() bool { return engagedBy(f, memberName, "lc-gold-only") })
	lcConfigMap(t, suite.MemberClients[1], ns, "while-gold")
	gold.WaitFor(t, fleettest.Request(memberName, ns, "while-gold"))

	setLabels(map[string]string{registry.KubeconfigLabel: "true"})
	poll.Until(t, "lc-gold-only disengaged from "+memberName, func() bool { return !engagedBy(f, memberName, "lc-gold-only") })
	if !slices.Contains(f.Manager.ClusterNames(), memberName) || !engagedBy(f, memberName, "lc-gold-witness") {
		t.Fatal("a label change disengaged the member from every controller")
	}
	lcConfigMap(t, suite.MemberClients[1], ns, "after-gold")
	witness.WaitFor(t, fleettest.Request(memberName, ns, "after-gold"))
	time.Sleep(500 * time.Millisecond)
	if gold.Has(fleettest.Request(memberName, ns, "after-gold")) {
		t.Fatal("a member that lost the label was still reconciled by the filtered controller")
	}
}

func TestHoldWiredEndToEnd(t *testing.T) {
	const ns, memberName, ctrl = "lc-hold", "lc-holder", "lc-hold"
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{
			Interval:         200 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
			Timeout:          500 * time.Millisecond,
			FailureThreshold: 2,
			DisconnectAfter:  time.Hour, // Unhealthy for as long as the test wants
		}
	}})
	r := &fleettest.Recorder{}
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
	err := fleet.NewControllerManagedBy(f.Manager).
		Named(ctrl).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace(ns))).
		WithOptions(fleet.ControllerOptions{TypedOptions: crcontroller.TypedOptions[fleet.Request]{MaxConcurrentReconciles: 1}}).
		Complete(reconciler)
	if err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate) }) }
	t.Cleanup(release)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.Register(t, memberName, kc)
	f.WaitState(t, memberName, fleetv1alpha1.MemberStateReady)
	f.WaitEngaged(t, memberName)

	lcConfigMap(t, suite.MemberClients[0], ns, "first")
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the first request was not reconciled")
	}
	var queued []fleet.Request
	for i := range 5 {
		name := fmt.Sprintf("queued-%d", i)
		lcConfigMap(t, suite.MemberClients[0], ns, name)
		queued = append(queued, fleettest.Request(memberName, ns, name))
	}
	poll.Until(t, "the member's requests queued", func() bool { return queueDepth(t, ctrl, memberName) >= float64(len(queued)) })

	proxy.Down()
	f.WaitState(t, memberName, fleetv1alpha1.MemberStateUnhealthy)
	// The hold follows the registry's event; give it a moment.
	time.Sleep(300 * time.Millisecond)
	release()
	r.WaitFor(t, fleettest.Request(memberName, ns, "first"))
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if state, _ := f.Manager.MemberState(memberName); state != fleetv1alpha1.MemberStateUnhealthy {
			t.Fatalf("the member turned %s while the test needed it Unhealthy", state)
		}
		for _, req := range queued {
			if r.Has(req) {
				t.Fatalf("%s was reconciled while its member was Unhealthy", req)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.WaitState(t, memberName, fleetv1alpha1.MemberStateReady)
	r.WaitFor(t, queued...)
}

// lcMemberClustersGone waits until the named MemberClusters are deleted.
func lcMemberClustersGone(t *testing.T, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for !apierrors.IsNotFound(suite.HubClient.Get(context.Background(), types.NamespacedName{Name: name}, &fleetv1alpha1.MemberCluster{})) {
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
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.ConfigureMember = func(_ string, co *cluster.Options) {
			co.Cache.DefaultNamespaces = map[string]cache.Config{ns: {}}
		}
	}})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "lc-fifty", ns, fleet.Members, r)
	lcConfigMap(t, suite.MemberClients[0], ns, "marker")
	lcConfigMap(t, suite.MemberClients[1], ns, "marker")

	// One member stays, so that what the hub starts for the first member
	// (the MemberCluster controller's handler, the event broadcaster)
	// predates the baseline.
	keep := f.Register(t, "lc-fifty-keep", suite.Kubeconfigs[0])
	r.WaitFor(t, fleettest.Request("lc-fifty-keep", ns, "marker"))
	poll.Until(t, "MemberCluster lc-fifty-keep Ready, written by this fleet", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		return suite.HubClient.Get(t.Context(), types.NamespacedName{Name: "lc-fifty-keep"}, mc) == nil &&
			mc.Spec.SecretRef.Namespace == f.Namespace && mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	f.Manager.GetEventRecorder("warm-up").Eventf(keep, nil, corev1.EventTypeNormal, "WarmUp", "Test", "before the goroutine baseline")
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)
	hubWorkers := goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority")
	start := time.Now()

	names := make([]string, count)
	secrets := make([]*corev1.Secret, count)
	for i := range count {
		names[i] = fmt.Sprintf("lc-fifty-%02d", i)
		secrets[i] = f.Register(t, names[i], suite.Kubeconfigs[i%len(suite.Kubeconfigs)])
	}
	poll.Until(t, "every member's marker reconciled", func() bool {
		for _, name := range names {
			if !r.Has(fleettest.Request(name, ns, "marker")) {
				return false
			}
		}
		return true
	})
	if engaged := f.Manager.ClusterNames(); len(engaged) != count+1 {
		t.Fatalf("%d members engaged, want %d", len(engaged), count+1)
	}
	t.Logf("%d members reconciled in %s, %d sockets open (%d before)", count, time.Since(start).Round(time.Millisecond), poll.OpenSockets(t), sockets)

	removal := time.Now()
	for _, s := range secrets {
		if err := suite.HubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "every member disengaged", func() bool {
		return slices.Equal(f.Manager.ClusterNames(), []string{"lc-fifty-keep"})
	})
	for _, name := range names {
		if _, err := f.Manager.GetCluster(t.Context(), name); err == nil {
			t.Fatalf("removed member %s still has a cluster", name)
		}
		if _, ok := f.Manager.MemberState(name); ok {
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
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	var running atomic.Bool
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.WatchConfigMaps(t, "in-flight", "lc-inflight", fleet.Members, fleet.ReconcilerFunc(func(context.Context, fleet.Request) (reconcile.Result, error) {
		running.Store(true)
		defer running.Store(false)
		once.Do(func() { close(started) })
		<-release // ignores its context
		return reconcile.Result{}, nil
	}))
	secret := f.Register(t, "lc-inflight", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "lc-inflight", "slow")
	select {
	case <-started:
	case <-time.After(poll.Timeout):
		t.Fatal("the reconcile never started")
	}
	if err := suite.HubClient.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	disengaged := func() bool { return f.Logs.Find("Disengaged member", `"cluster"="lc-inflight"`) }
	poll.Until(t, "the member leaving", func() bool { return !slices.Contains(f.Manager.ClusterNames(), "lc-inflight") })
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
