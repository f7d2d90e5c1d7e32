package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
)

// shardLease is the replicas' Lease duration (whole seconds): 3 s with a
// 2 s renew deadline fenced the replicas again and again on a loaded
// machine (load average 100 on 2 cores).
const shardLease = 8 * time.Second

// startReplica starts replica name of the team's fleet (`run --shard`).
func (tm *team) startReplica(name string) *fleetbinary.Process {
	tm.t.Helper()
	return startManager(tm.t, tm.fleetNS, name, "--shard", "--replica-name="+name,
		fmt.Sprintf("--shard-lease-duration=%s", shardLease), "--shard-renew-deadline=5s", "--shard-retry-period=1s")
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
	t.Parallel()
	quote(t)
	tm := newFleet(t)
	replicas := map[string]*fleetbinary.Process{}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		replicas[name] = tm.startReplica(name)
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
	replicas[victim] = tm.startReplica(victim)
	tm.waitRollout("of revision 2 complete", complete(2))
	t.Logf("revision 2 complete %s after the kill (Lease %s)", time.Since(killed).Round(time.Millisecond), shardLease)
	s.stopSampling()
	samples = s.taken()
	if order := checkOneAtATime(t, samples, "2", 1, minSuccessTime); len(order) != len(members) {
		t.Errorf("%d of %d members took revision 2", len(order), len(members))
	}
	checkGivenFirst(t, samples, "2", 2)

}
