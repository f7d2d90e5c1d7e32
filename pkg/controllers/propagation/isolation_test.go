package propagation_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestFrozenMemberStallsNoOther freezes one member's API server (SIGSTOP)
// while a change of more Propagations than the controller has workers
// goes to 20 other members: each of them gets it before any request to
// the frozen member ends at its timeout. Probes that see the freeze
// would make the fleet hold the member's requests: here they are rare,
// standing for the seconds before they see it, and for a member whose
// trouble they do not see (its etcd frozen).
func TestFrozenMemberStallsNoOther(t *testing.T) {
	suite.Need(t)
	envs, err := controlplane.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := controlplane.Stop(envs); err != nil {
			t.Error(err)
		}
	})
	frozenKubeconfig, err := controlplane.AdminKubeconfig(envs[0], "fleet-manager")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := controlplane.APIServerPID(envs[0])
	if err != nil {
		t.Fatal(err)
	}

	const others = 20
	frozen := suite.Name("frozen")
	f := newFleetWith(t, &member.HealthOptions{Interval: 10 * time.Minute, ReviewInterval: 10 * time.Minute})
	f.registerKubeconfig(frozen, frozenKubeconfig, map[string]string{"env": "prod"})
	for i := range others {
		f.register(i%memberCount, fmt.Sprintf("member-%02d", i), map[string]string{"env": "prod"})
	}
	// One request per Propagation and member: the frozen member's could
	// hold every worker.
	names := make([]string, propagation.DefaultWorkers*3/2)
	for i := range names {
		names[i] = fmt.Sprintf("web-%d", i)
		f.configMap(names[i], map[string]string{"n": names[i]}, nil)
		f.propagation(names[i], func(p *fleetv1alpha1.Propagation) {
			p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: names[i]}}
		})
	}
	f.waitApplied(names, others+1, time.Minute)

	before := applies(t, frozen)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	})
	// One member's requests hold at most a quarter of the workers: the
	// others, given a change (the deletion policy, which every copy
	// carries), apply it while the frozen member's requests still hang.
	// Were every worker held, they would apply only once those end,
	// failed, at their 30 s timeout. The order is the evidence, not a
	// duration measured on shared cores.
	start := time.Now()
	f.setDeletion(names, fleetv1alpha1.DeletionOrphan)
	f.waitApplied(names, others, 2*time.Minute)
	if a := applies(t, frozen); a.failed > before.failed {
		t.Errorf("the others applied the change %s after it was made, only once an apply to the frozen member had ended at its timeout", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d Propagations changed in %d members in %s with one frozen", len(names), others, time.Since(start).Round(time.Millisecond))

	// The frozen member's applies end, failed, at their timeout, before
	// client-go's own HTTP/2 health check (30 s without a frame, then 15 s
	// for a PING's answer) would end them.
	poll.Until(t, "an apply to the frozen member failed", func() bool { return applies(t, frozen).failed > 0 })
	a := applies(t, frozen)
	if took := time.Duration((a.seconds - before.seconds) / float64(a.count-before.count) * float64(time.Second)); took > 35*time.Second {
		t.Errorf("an apply to the frozen member took %s, want at most 30 s and a little", took)
	} else {
		t.Logf("an apply to the frozen member failed after %s", took.Round(time.Millisecond))
	}
}

// applyFigures are a member's fleet_propagation_applies_total of failures,
// and its fleet_propagation_apply_duration_seconds count and sum.
type applyFigures struct {
	failed, seconds float64
	count           uint64
}

func applies(t *testing.T, member string) applyFigures {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var a applyFigures
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] != member {
				continue
			}
			switch mf.GetName() {
			case "fleet_propagation_applies_total":
				if labels["result"] == "failure" {
					a.failed = m.GetCounter().GetValue()
				}
			case "fleet_propagation_apply_duration_seconds":
				a.count, a.seconds = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return a
}

// setDeletion sets the deletion policy of the Propagations names.
func (f *testFleet) setDeletion(names []string, policy fleetv1alpha1.DeletionPolicy) {
	f.t.Helper()
	for _, name := range names {
		f.editPropagation(name, func(p *fleetv1alpha1.Propagation) { p.Spec.Deletion = policy })
	}
}

// waitApplied waits at most within until each Propagation of names
// reports its generation Applied in n members.
func (f *testFleet) waitApplied(names []string, n int32, within time.Duration) {
	f.t.Helper()
	applied := map[string]int32{}
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		done := 0
		for _, name := range names {
			p := &fleetv1alpha1.Propagation{}
			if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, p); err != nil {
				f.t.Fatal(err)
			}
			if p.Status.ObservedGeneration != p.Generation {
				applied[name] = 0
				continue
			}
			if applied[name] = p.Status.Applied; applied[name] == n {
				done++
			}
		}
		if done == len(names) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("not within %s: each Propagation Applied in %d members; Applied of its generation: %v", within, n, applied)
		}
	}
}
