package fleet_test

import (
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/internal/poll"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/cluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// quickHealth makes members fail and recover within seconds.
func quickHealth(o *fleet.Options) {
	o.MemberHealth = cluster.HealthOptions{
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

func (f *fleetEnv) waitState(t *testing.T, name string, want cluster.State) {
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
	f.waitState(t, "flaky", cluster.StateReady)
	createConfigMap(t, memberClients[0], "flaky", "before")
	r.waitFor(t, request("flaky", "flaky", "before"))

	proxy.Down()
	f.waitState(t, "flaky", cluster.StateUnhealthy)
	reconciledWhileUp := r.count()
	f.waitState(t, "flaky", cluster.StateDisconnected)
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
	f.waitState(t, "flaky", cluster.StateReady)
	r.waitFor(t, request("flaky", "flaky", "while-down"))
	createConfigMap(t, memberClients[0], "flaky", "after")
	r.waitFor(t, request("flaky", "flaky", "after"))
}

// A member back from an outage that broke its watches lists again at once
// instead of waiting out the informers' backoff, and what changed while it
// was away is reconciled.
func TestMemberBackFromUnhealthyListsAgain(t *testing.T) {
	f := startFleetWith(t, func(o *fleet.Options) {
		o.MemberHealth = cluster.HealthOptions{
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
	f.waitState(t, "away", cluster.StateUnhealthy)
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
	if state, _ := f.mgr.MemberState("hung"); state == cluster.StateReady {
		t.Fatal("a member that never answers is Ready")
	}
	f.waitState(t, "hung", cluster.StateUnhealthy)
}
