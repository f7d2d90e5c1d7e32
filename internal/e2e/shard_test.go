package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
)

// shardHub serializes the sharded tests: each runs three replicas over
// the nine member API servers.
var shardHub sync.Mutex

// shardLease is the replicas' Lease duration (whole seconds).
const shardLease = 3 * time.Second

// replica is one `fleet-manager run --shard` process.
type replica struct {
	name string
	*fleetbinary.Process
}

// startReplica starts replica name of fleet ns on the hub; it is
// killed when the test ends, if still running.
func startReplica(t *testing.T, ns, name string) *replica {
	t.Helper()
	p, err := fleetbinary.Start(binary, filepath.Join(t.TempDir(), name+".log"), runArgs(hubKubeconfigs[0], ns, t.TempDir(),
		"--shard", "--replica-name="+name, fmt.Sprintf("--shard-lease-duration=%s", shardLease), "--shard-renew-deadline=2s", "--shard-retry-period=250ms")...)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, Process: p}
	t.Cleanup(func() {
		if !r.Exited() {
			r.Kill()
		}
		if err := r.Check(); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
		if t.Failed() {
			out, _ := r.Output()
			t.Logf("replica %s's last lines:\n%s", name, lines(out, 60))
		}
	})
	return r
}

// newShardTeam makes a team in a fleet namespace of its own, for
// replicas the test starts.
func newShardTeam(t *testing.T) *team {
	t.Helper()
	suite.Need(t)
	shardHub.Lock()
	t.Cleanup(shardHub.Unlock)
	hub := suite.HubClient
	tm := &team{t: t, hub: hub, fleetNS: suite.Name("shard-fleet"), ns: suite.Name("shard-team"), members: map[string]int{}}
	fleettest.CreateNamespace(t, hub, tm.fleetNS)
	fleettest.CreateNamespace(t, hub, tm.ns)
	return tm
}

// owner returns the replica that owns member, as its MemberCluster says.
func (tm *team) owner(member string) string {
	tm.t.Helper()
	mc := &fleetv1alpha1.MemberCluster{}
	if err := tm.hub.Get(tm.t.Context(), types.NamespacedName{Name: member}, mc); err != nil {
		tm.t.Fatal(err)
	}
	return mc.Status.Replica
}

// TestShardedRolloutKeepsItsGuardThroughASIGKILL runs three replicas
// (`run --shard`) over nine members and a Progressive Propagation of
// maxConcurrency 1: its first revision, and a second during which the
// replica that owns the next member is SIGKILLed and restarted, each go
// one member at a time, each member past minSuccessTime before the next,
// whichever replica owns it.
func TestShardedRolloutKeepsItsGuardThroughASIGKILL(t *testing.T) {
	quote(t)
	tm := newShardTeam(t)
	replicas := map[string]*replica{}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		replicas[name] = startReplica(t, tm.fleetNS, name)
	}
	var members []string
	for i := range 9 {
		members = append(members, tm.register(i, fmt.Sprintf("m%d", i), nil))
	}
	owners := map[string]bool{}
	for _, m := range members {
		o := tm.owner(m)
		if replicas[o] == nil {
			t.Fatalf("%s is owned by %q, no replica", m, o)
		}
		owners[o] = true
	}
	if len(owners) < 2 {
		t.Fatalf("one replica owns every member (%v): the test would prove nothing of sharing", owners)
	}

	tm.setConfigMap("web", "1")
	s := tm.sample("web", members...)
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(1) })
	tm.waitRollout("of revision 1 complete", complete(1))
	s.stopSampling()
	samples := s.taken()
	if order := checkOneAtATime(t, samples, "1", 1, minSuccessTime); len(order) != len(members) {
		t.Errorf("%d of %d members took revision 1", len(order), len(members))
	}
	checkGivenFirst(t, samples, "1", 1)

	s = tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	// Mid-rollout: two members have revision 2; kill the owner of the
	// next one in order that has not, and start it again.
	var next string
	pollUntil(t, "two members at revision 2", func() bool {
		n := 0
		next = ""
		for _, m := range members {
			if tm.valueIn(m, "web") == "2" {
				n++
			} else if next == "" {
				next = m
			}
		}
		return n >= 2 && next != ""
	})
	victim := tm.owner(next)
	replicas[victim].Kill()
	killed := time.Now()
	t.Logf("SIGKILLed %s, owner of %s, the next member in order", victim, next)
	replicas[victim] = startReplica(t, tm.fleetNS, victim)
	tm.waitRollout("of revision 2 complete", complete(2))
	t.Logf("revision 2 complete %s after the kill (Lease %s)", time.Since(killed).Round(time.Millisecond), shardLease)
	s.stopSampling()
	samples = s.taken()
	if order := checkOneAtATime(t, samples, "2", 1, minSuccessTime); len(order) != len(members) {
		t.Errorf("%d of %d members took revision 2", len(order), len(members))
	}
	checkGivenFirst(t, samples, "2", 2)

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range replicas {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		if err := replicas[n].Stop(); err != nil {
			out, _ := replicas[n].Output()
			t.Errorf("replica %s exited with %v:\n%s", n, err, lines(out, 40))
		}
	}
}
