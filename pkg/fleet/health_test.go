package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/poll"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// quickHealth makes members fail and recover within seconds.
func quickHealth(o *fleet.Options) {
	o.MemberHealth = member.HealthOptions{
		Interval:         200 * time.Millisecond,
		Timeout:          500 * time.Millisecond,
		FailureThreshold: 2,
		DisconnectAfter:  2 * time.Second,
	}
}

// viaProxy returns kubeconfig with its server moved to a proxy in front
// of it, which the test can take down and up again.
func viaProxy(t *testing.T, kubeconfig []byte) ([]byte, *controlplane.Proxy) {
	t.Helper()
	out, proxy, err := controlplane.ViaProxy(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return out, proxy
}

func (f *fleetEnv) waitState(t *testing.T, name string, want member.State) {
	t.Helper()
	poll.Until(t, name+" "+string(want), func() bool {
		got, _ := f.mgr.MemberState(name)
		return got == want
	})
}

func TestMemberGoesDownAndComesBack(t *testing.T) {
	f := startFleetWith(t, quickHealth)
	r := &recorder{}
	watchConfigMaps(t, f, "flaky", "flaky", fleet.Members, r)
	kc, proxy := viaProxy(t, kubeconfigs[0])
	f.register(t, "flaky", kc)
	f.waitState(t, "flaky", member.StateReady)
	createConfigMap(t, memberClients[0], "flaky", "before")
	r.waitFor(t, request("flaky", "flaky", "before"))

	proxy.Down()
	f.waitState(t, "flaky", member.StateUnhealthy)
	reconciledWhileUp := r.count()
	f.waitState(t, "flaky", member.StateDisconnected)
	createConfigMap(t, memberClients[0], "flaky", "while-down")
	if _, err := f.mgr.GetCluster(t.Context(), "flaky"); err == nil {
		t.Fatal("a Disconnected member still has a cluster")
	}
	if n := r.count(); n != reconciledWhileUp {
		t.Fatalf("%d reconciles ran while the member was down", n-reconciledWhileUp)
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, "flaky", member.StateReady)
	r.waitFor(t, request("flaky", "flaky", "while-down"))
	createConfigMap(t, memberClients[0], "flaky", "after")
	r.waitFor(t, request("flaky", "flaky", "after"))
}

// A member back from an outage that broke its watches lists again at once
// instead of waiting out the informers' backoff, and what changed while it
// was away is reconciled.
func TestMemberBackFromUnhealthyListsAgain(t *testing.T) {
	f := startFleetWith(t, func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{
			Interval:         200 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
			Timeout:          500 * time.Millisecond,
			FailureThreshold: 2,
			DisconnectAfter:  time.Hour,
		}
	})
	r := &recorder{}
	watchConfigMaps(t, f, "away", "away", fleet.Members, r)
	kc, proxy := viaProxy(t, kubeconfigs[0])
	f.register(t, "away", kc)
	createConfigMap(t, memberClients[0], "away", "before")
	r.waitFor(t, request("away", "away", "before"))

	proxy.Down()
	f.waitState(t, "away", member.StateUnhealthy)
	createConfigMap(t, memberClients[0], "away", "while-away")
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, request("away", "away", "while-away"))
	// The informers' own retry may bring the object before the probe that
	// reconnects the member; both happen.
	poll.Until(t, "the member reconnects on its return", func() bool {
		return f.logs.find("Reconnecting member: it is back", `"cluster"="away"`)
	})
}

func TestHungMemberDelaysOnlyItself(t *testing.T) {
	f := startFleetWith(t, quickHealth)
	r := &recorder{}
	watchConfigMaps(t, f, "hung", "hung", fleet.Members, r)
	kc, proxy := viaProxy(t, kubeconfigs[1])
	proxy.Hang(true)
	f.register(t, "hung", kc)
	f.register(t, "responsive", kubeconfigs[0])

	createConfigMap(t, memberClients[0], "hung", "works")
	r.waitFor(t, request("responsive", "hung", "works"))
	if state, _ := f.mgr.MemberState("hung"); state == member.StateReady {
		t.Fatal("a member that never answers is Ready")
	}
	// From the log: quickHealth disconnects it 2 seconds after its first
	// failed probe, which a loaded machine's poll can miss in its state.
	poll.Until(t, "hung Unhealthy", func() bool { return f.unhealthy("hung") != "" })
}

// unhealthy returns the log line of member name's first change to
// Unhealthy in f, with the probe error that made it, or "".
func (f *fleetEnv) unhealthy(name string) string {
	return f.logs.first(`"cluster"="`+name+`"`, `"msg"="Member state changed"`, `"to"="Unhealthy"`)
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
	f := startFleet(t)
	r := &busyReconciler{work: time.Millisecond}
	opts := fleet.ControllerOptions{}
	opts.MaxConcurrentReconciles = 2
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("flooded").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(inNamespace("flooded"))).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "flooded", kubeconfigs[1])
	f.waitState(t, "flooded", member.StateReady)
	createNamespace(t, memberClients[1], "flooded")
	t.Cleanup(func() { deleteConfigMaps(t, memberClients[1], "flooded") })

	const objects = 3000
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < objects; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "flooded", Name: fmt.Sprintf("cm-%04d", i)}}
				if err := memberClients[1].Create(t.Context(), cm); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	poll.Until(t, "every create reconciled", func() bool { return r.done.Load() >= objects })
	if line := f.unhealthy("flooded"); line != "" {
		t.Fatalf("a member busy with a flood of creates was marked Unhealthy: %s", line)
	}
}

// A member whose watch carries up to 10,000 events a minute is never
// Unhealthy with the default probe settings. The rate is what the member's
// API server takes: a loaded machine's takes fewer (CI's took 3,632), so
// the test asks for a tenth of it at least, and logs what it carried.
func TestMemberWithBusyWatchStaysReady(t *testing.T) {
	f := startFleet(t)
	r := &busyReconciler{}
	watchConfigMaps(t, f, "chatty", "chatty", fleet.Members, r)
	f.register(t, "chatty", kubeconfigs[1])
	f.waitState(t, "chatty", member.StateReady)
	t.Cleanup(func() { deleteConfigMaps(t, memberClients[1], "chatty") })

	// Patches go out on a ticker through several writers, each to a
	// ConfigMap of its own, so that a slow API server on a loaded machine
	// still sees the rate: patches of one object wait for each other.
	const perMinute, lasting, writers = 10000, 15 * time.Second, 8
	for w := range writers {
		createConfigMap(t, memberClients[1], "chatty", fmt.Sprintf("ticker-%d", w))
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
				if err := memberClients[1].Patch(t.Context(), cm, patch); err != nil {
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
	if line := f.unhealthy("chatty"); line != "" {
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
