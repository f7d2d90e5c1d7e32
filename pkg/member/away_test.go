package member_test

import (
	"fmt"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestMemberBackAfterLosingItsConnectionsKeepsItsCache: a member whose
// connections were cut while it was away (Unhealthy), and whose informers
// waited for its return in held calls rather than sleeping in backoff,
// keeps its cluster at its return: the same engagement, its watch resumed,
// and an object created then reconciled, with no second list of a new
// cluster. Not parallel: envtest's AddUser is not safe for concurrent use.
func TestMemberBackAfterLosingItsConnectionsKeepsItsCache(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy := fleettest.ViaProxy(t, kubeconfig(t, members[0]))
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage: w.engage,
		Health: member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 1, DisconnectAfter: time.Hour},
	})
	const name = "away"
	if err := pool.Set(registry.Registration{ClusterName: name, Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State(name); return s }
	ns := fmt.Sprintf("away-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "before", nil)
	for r := w.next(t); r.ClusterName != name || r.Name != "before"; r = w.next(t) {
	}
	poll.Until(t, "Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })

	proxy.Down() // every connection cut, dials refused
	poll.Until(t, "Unhealthy", func() bool { return state() == fleetv1alpha1.MemberStateUnhealthy })
	poll.Until(t, "the informer's call held", func() bool { return member.InformerCallsHeld(pool, name) > 0 })
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	createConfigMap(t, memberClients[0], ns, "after", nil)
	for r := w.next(t); r.ClusterName != name || r.Name != "after"; r = w.next(t) {
	}
	t.Logf("reconciled %s after the return", time.Since(start))
	select {
	case <-w.engaged:
		t.Fatal("the member was engaged again at its return: its cluster was torn down and built anew, though its informer waited for it")
	default:
	}
	poll.Until(t, "Ready again", func() bool { return state() == fleetv1alpha1.MemberStateReady })
}
