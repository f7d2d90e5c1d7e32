package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

func TestMemberGoesDownAndComesBack(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: fleettest.QuickHealth})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "flaky", "flaky", fleet.Members, r)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.Register(t, "flaky", kc)
	f.WaitState(t, "flaky", fleetv1alpha1.MemberStateReady)
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "flaky", "before")
	r.WaitFor(t, fleettest.Request("flaky", "flaky", "before"))

	proxy.Down()
	f.WaitState(t, "flaky", fleetv1alpha1.MemberStateUnhealthy)
	reconciledWhileUp := r.Count()
	f.WaitState(t, "flaky", fleetv1alpha1.MemberStateDisconnected)
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "flaky", "while-down")
	if _, err := f.Manager.GetCluster(t.Context(), "flaky"); err == nil {
		t.Fatal("a Disconnected member still has a cluster")
	}
	if n := r.Count(); n != reconciledWhileUp {
		t.Fatalf("%d reconciles ran while the member was down", n-reconciledWhileUp)
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.WaitState(t, "flaky", fleetv1alpha1.MemberStateReady)
	r.WaitFor(t, fleettest.Request("flaky", "flaky", "while-down"))
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "flaky", "after")
	r.WaitFor(t, fleettest.Request("flaky", "flaky", "after"))
}

// A member back from an outage that broke its watches lists again at once
// instead of waiting out the informers' backoff, and what changed while it
// was away is reconciled.
func TestMemberBackFromUnhealthyListsAgain(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{
			Interval:         200 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
			Timeout:          500 * time.Millisecond,
			FailureThreshold: 2,
			DisconnectAfter:  time.Hour,
		}
	}})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "away", "away", fleet.Members, r)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.Register(t, "away", kc)
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "away", "before")
	r.WaitFor(t, fleettest.Request("away", "away", "before"))

	proxy.Down()
	f.WaitState(t, "away", fleetv1alpha1.MemberStateUnhealthy)
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "away", "while-away")
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, fleettest.Request("away", "away", "while-away"))
	// The informers' own retry may bring the object before the probe that
	// reconnects the member; both happen.
	poll.Until(t, "the member reconnects on its return", func() bool {
		return f.Logs.Find("Reconnecting member: it is back", `"cluster"="away"`)
	})
}

func TestHungMemberDelaysOnlyItself(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: fleettest.QuickHealth})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "hung", "hung", fleet.Members, r)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	proxy.Hang(true)
	f.Register(t, "hung", kc)
	f.Register(t, "responsive", suite.Kubeconfigs[0])

	fleettest.CreateConfigMap(t, suite.MemberClients[0], "hung", "works")
	r.WaitFor(t, fleettest.Request("responsive", "hung", "works"))
	if state, _ := f.Manager.MemberState("hung"); state == fleetv1alpha1.MemberStateReady {
		t.Fatal("a member that never answers is Ready")
	}
	// From the log: fleettest.QuickHealth disconnects it 2 seconds after its first
	// failed probe, which a loaded machine's poll can miss in its state.
	poll.Until(t, "hung Unhealthy", func() bool { return unhealthy(f, "hung") != "" })
}

// unhealthy returns the log line of member name's first change to
// Unhealthy in f, with the probe error that made it, or "".
func unhealthy(f *fleettest.Fleet, name string) string {
	return f.Logs.First(`"cluster"="`+name+`"`, `"msg"="Member state changed"`, `"to"="Unhealthy"`)
}

// busyReconciler takes work per request and counts the requests.
type busyReconciler struct {
	work time.Duration
	done atomic.Int64
}

func (r *busyReconciler) Reconcile(context.Context, fleet.Request) (reconcile.Result, error) {
	time.Sleep(r.work)
	r.done.Add(1)
	return reconcile.Result{}, nil
}

// A member flooded with 3,000 creates, whose 2 workers are busy with them,
// is never Unhealthy with the default probe settings (a probe timeout of
// 5 ms fails it).
func TestFloodedMemberStaysReady(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &busyReconciler{work: time.Millisecond}
	opts := fleet.ControllerOptions{}
	opts.MaxConcurrentReconciles = 2
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("flooded").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace("flooded"))).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "flooded", suite.Kubeconfigs[1])
	f.WaitState(t, "flooded", fleetv1alpha1.MemberStateReady)
	fleettest.CreateNamespace(t, suite.MemberClients[1], "flooded")
	t.Cleanup(func() { deleteConfigMaps(t, suite.MemberClients[1], "flooded") })

	const objects = 3000
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < objects; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "flooded", Name: fmt.Sprintf("cm-%04d", i)}}
				if err := suite.MemberClients[1].Create(t.Context(), cm); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	poll.Until(t, "every create reconciled", func() bool { return r.done.Load() >= objects })
	if line := unhealthy(f, "flooded"); line != "" {
		t.Fatalf("a member busy with a flood of creates was marked Unhealthy: %s", line)
	}
}

// A member whose watch carries up to 10,000 events a minute is never
// Unhealthy with the default probe settings. The rate is what the member's
// API server takes: a loaded machine's takes fewer (CI's took 3,632), so
// the test asks for a tenth of it at least, and logs what it carried.
func TestMemberWithBusyWatchStaysReady(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &busyReconciler{}
	f.WatchConfigMaps(t, "chatty", "chatty", fleet.Members, r)
	f.Register(t, "chatty", suite.Kubeconfigs[1])
	f.WaitState(t, "chatty", fleetv1alpha1.MemberStateReady)
	t.Cleanup(func() { deleteConfigMaps(t, suite.MemberClients[1], "chatty") })

	// Patches go out on a ticker through several writers, each to a
	// ConfigMap of its own, so that a slow API server on a loaded machine
	// still sees the rate: patches of one object wait for each other.
	const perMinute, lasting, writers = 10000, 15 * time.Second, 8
	for w := range writers {
		fleettest.CreateConfigMap(t, suite.MemberClients[1], "chatty", fmt.Sprintf("ticker-%d", w))
	}
	tick := time.NewTicker(time.Minute / perMinute)
	defer tick.Stop()
	var sent atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(lasting)
	for w := range writers {
		wg.Go(func() {
			for time.Now().Before(end) {
				<-tick.C
				n := sent.Add(1)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "chatty", Name: fmt.Sprintf("ticker-%d", w)}}
				patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, n))
				if err := suite.MemberClients[1].Patch(t.Context(), cm, patch); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rate := float64(sent.Load()) / lasting.Minutes()
	t.Logf("the watch carried %.0f events a minute", rate)
	if rate < perMinute/10 {
		t.Fatalf("the watch carried %.0f events a minute, not %d", rate, perMinute/10)
	}
	if line := unhealthy(f, "chatty"); line != "" {
		t.Fatalf("a member whose watch carries %.0f events a minute was marked Unhealthy: %s", rate, line)
	}
}

// deleteConfigMaps deletes the ConfigMaps of namespace ns, so that a
// test's load does not weigh on the lists of later tests.
func deleteConfigMaps(t *testing.T, cl client.Client, ns string) {
	if err := cl.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
		t.Error(err)
	}
}
