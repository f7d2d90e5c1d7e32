package member_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// awayHealth makes a member Unhealthy within a second of losing its
// server, and never Disconnected within a test.
var awayHealth = member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 1, DisconnectAfter: time.Hour}

// cutUntilHeld takes the member's proxy down and waits until the member
// is Unhealthy with an informer's call held.
func cutUntilHeld(t *testing.T, pool *member.Pool, name string, proxy *controlplane.Proxy) {
	t.Helper()
	proxy.Down()
	poll.Until(t, "Unhealthy", func() bool { s, _ := pool.State(name); return s == fleetv1alpha1.MemberStateUnhealthy })
	poll.Until(t, "the informer's call held", func() bool { return member.InformerCallsHeld(pool, name) > 0 })
}

// TestObjectsChangedWhileAwayAreInTheKeptCacheAtReturn: a member that
// keeps its cluster at its return (its watches resumed at their
// resourceVersion) holds no stale object: one deleted while it was away is
// gone from its cache, one changed there has its new content, and one
// created there is in it, all without a new cluster.
func TestObjectsChangedWhileAwayAreInTheKeptCacheAtReturn(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage, Health: awayHealth})
	const name = "stale"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	e := <-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	ns := fmt.Sprintf("stale-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "deleted", nil)
	createConfigMap(t, memberClients[0], ns, "changed", nil)
	for r := w.next(t); r.ClusterName != name || r.Name != "changed"; r = w.next(t) {
	}
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })

	cutUntilHeld(t, pool, name, proxy)
	ctx := t.Context()
	if err := memberClients[0].Delete(ctx, configMap(ns, "deleted")); err != nil {
		t.Fatal(err)
	}
	changed := configMap(ns, "changed")
	if err := memberClients[0].Get(ctx, client.ObjectKeyFromObject(changed), changed); err != nil {
		t.Fatal(err)
	}
	changed.Data = map[string]string{"while": "away"}
	if err := memberClients[0].Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, memberClients[0], ns, "created", nil)
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "Ready again", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	reader := e.cl.GetCache()
	poll.Until(t, "the deleted object gone from the kept cache", func() bool {
		return apierrors.IsNotFound(reader.Get(ctx, client.ObjectKeyFromObject(configMap(ns, "deleted")), &corev1.ConfigMap{}))
	})
	poll.Until(t, "the changed object's new content in the kept cache", func() bool {
		var got corev1.ConfigMap
		return reader.Get(ctx, client.ObjectKeyFromObject(changed), &got) == nil && got.Data["while"] == "away"
	})
	poll.Until(t, "the created object in the kept cache", func() bool {
		return reader.Get(ctx, client.ObjectKeyFromObject(configMap(ns, "created")), &corev1.ConfigMap{}) == nil
	})
	select {
	case <-w.engaged:
		t.Fatal("the member was engaged again: the kept cache was not what was checked")
	default:
	}
}

func configMap(namespace, name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = namespace, name
	return cm
}

// TestRemovingAnUnhealthyMemberWithHeldCallsLeavesNothingRunning: a
// member removed while Unhealthy, its informers waiting in held calls,
// leaves no goroutine and no socket behind.
func TestRemovingAnUnhealthyMemberWithHeldCallsLeavesNothingRunning(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage, Health: awayHealth})
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)
	const name = "removed-away"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	cutUntilHeld(t, pool, name, proxy)
	if !pool.Remove(name) {
		t.Fatal("Remove reported no member")
	}
	waitForBaseline(t, baseline, sockets)
}

// TestFlappingMemberEndsReadyWithItsCacheConverged: a member whose
// connections are cut again and again, sometimes before its return is
// even noticed, while objects are created and deleted on it, ends Ready
// with a cache holding exactly what its server holds, and its work flows.
func TestFlappingMemberEndsReadyWithItsCacheConverged(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage, Health: awayHealth})
	const name = "flapping"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	ctx := t.Context()
	ns := fmt.Sprintf("flapping-%d", time.Now().UnixNano())
	const flaps = 6
	for i := range flaps {
		proxy.Down()
		poll.Until(t, "Unhealthy", func() bool { return state() == fleetv1alpha1.MemberStateUnhealthy })
		createConfigMap(t, memberClients[0], ns, fmt.Sprintf("during-%d", i), nil)
		if i > 0 {
			if err := memberClients[0].Delete(ctx, configMap(ns, fmt.Sprintf("during-%d", i-1))); err != nil {
				t.Fatal(err)
			}
		}
		if err := proxy.Up(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // else cut again at once, its return maybe not noticed
			poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })
		}
	}
	poll.Until(t, "Ready at last", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	createConfigMap(t, memberClients[0], ns, "final", nil)
	for r := w.next(t); r.ClusterName != name || r.Name != "final"; r = w.next(t) {
	}
	cl, err := pool.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the cache holds what the server holds", func() bool {
		var got corev1.ConfigMapList
		if err := cl.GetCache().List(ctx, &got, client.InNamespace(ns)); err != nil {
			return false
		}
		names := map[string]bool{}
		for _, cm := range got.Items {
			names[cm.Name] = true
		}
		return len(names) == 2 && names[fmt.Sprintf("during-%d", flaps-1)] && names["final"]
	})
}

// TestDisconnectedMemberFreesItsClusterAndHeldCalls: a member Unhealthy
// with its informers' calls held, Disconnected once --disconnect-after
// passes, ends those calls and frees its cluster: nothing of its
// connection keeps running, only the member's own loop, which waits for a
// probe to succeed.
func TestDisconnectedMemberFreesItsClusterAndHeldCalls(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	health := awayHealth
	health.DisconnectAfter = 3 * time.Second
	pool := startPool(t, member.Options{Engage: w.engage, Health: health})
	baseline := goleak.IgnoreCurrent()
	const name = "disconnected"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	cutUntilHeld(t, pool, name, proxy)
	poll.Until(t, "Disconnected", func() bool { return state() == fleetv1alpha1.MemberStateDisconnected })
	var leaked error
	for range 100 {
		leaked = goleak.Find(baseline, goleak.IgnoreTopFunction("time.Sleep"),
			goleak.IgnoreAnyFunction("github.com/fleetkube/fleet-manager/pkg/registry.(*Subscription).Next"),
			goleak.IgnoreAnyFunction("github.com/fleetkube/fleet-manager/pkg/member.(*member).run"))
		if leaked == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if leaked != nil {
		t.Fatalf("a Disconnected member left its connection's goroutines running: %v", leaked)
	}
}

// TestStoppingWithHeldCallsStopsPromptlyAndLeavesNothing: the manager
// stopping while a member is Unhealthy, its informers' calls held, stops
// at once (the held calls end with their context), leaving no goroutine
// and no socket.
func TestStoppingWithHeldCallsStopsPromptlyAndLeavesNothing(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)
	pool, err := member.NewPool(member.Options{Registry: member.NewObservedRegistry(nil), Engage: w.engage, Health: awayHealth})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pool.Start(ctx) }()
	const name = "stopping"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	cutUntilHeld(t, pool, name, proxy)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pool did not stop within 30 s of its context's end, a member's informer calls held")
	}
	t.Logf("stopped %s after the context ended", time.Since(start))
	waitForBaseline(t, baseline, sockets)
}
