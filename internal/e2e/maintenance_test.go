package e2e

import (
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// waitTimeout is how long pollUntil waits: rollouts of minSuccessTime
// per member, on cores other tests' API servers and managers load.
const waitTimeout = 3 * time.Minute

// pollUntil waits until cond holds, asking every 50 ms (not poll.Until's
// 5 ms: a dozen fleets' waits would load the hub), and fails the test
// if it does not within waitTimeout.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(samplePeriod) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", waitTimeout, what)
		}
	}
}

func TestCordonedMemberTakesNoNewRevision(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(nil)
	tm.waitRollout("of revision 1 complete", complete(1))
	cordoned := members[1]
	if out, err := cli(t, "cordon", cordoned); err != nil {
		t.Fatalf("cordon: %v\n%s", err, out)
	}
	tm.waitMember(cordoned, "cordoned", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Spec.Maintenance == fleetv1alpha1.MaintenanceCordon
	})
	s := tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	// Complete without the cordoned member, which keeps revision 1.
	tm.waitRollout("of revision 2 complete", complete(2))
	s.stopSampling()
	for _, smp := range s.taken() {
		if c := smp.copies[cordoned]; c.value != "1" {
			t.Fatalf("the cordoned %s's copy was %+v at %s, want revision 1's, kept", cordoned, c, smp.at.Format("15:04:05.000"))
		}
	}
	for _, m := range []string{members[0], members[2]} {
		if v := tm.valueIn(m, "web"); v != "2" {
			t.Errorf("%s holds %q, want 2", m, v)
		}
	}
}

// TestDrainRemovesCopiesWithinTheBudget drains two members at once under
// maxUnavailable 1; the first one's copy is held by a finalizer (a
// member's controller that has cleanup to do), so its removal does not
// end: the other keeps its copy until the finalizer goes.
func TestDrainRemovesCopiesWithinTheBudget(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.DisruptionBudget.MaxUnavailable = ptr.To[int32](1)
	})
	tm.waitRollout("of revision 1 complete", complete(1))
	held, other := members[0], members[1]
	cm := tm.copyOf(held, "web")
	if cm == nil {
		t.Fatalf("%s holds no copy, its rollout Complete: %+v", held, tm.get().Status)
	}
	cm.Finalizers = append(cm.Finalizers, "e2e.fleetkube.io/hold")
	if err := tm.member(held).Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	s := tm.sample("web", members...)
	// As a user does: both at once, without waiting.
	if out, err := cli(t, "drain", held, other, "--wait=false"); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	// Evidence the manager handled the drain: one member's removal is
	// under way (the held copy terminating, or the other's gone).
	var first string
	pollUntil(t, "a drained member's removal under way", func() bool {
		if c := tm.copyOf(held, "web"); c != nil && c.DeletionTimestamp != nil {
			first = held
		} else if tm.copyOf(other, "web") == nil {
			first = other
		}
		return first != ""
	})
	if first == held {
		// The budget is taken by held until its copy is gone: wait for
		// the rollout record to say who is draining, then check other.
		p := tm.waitRollout("listing the draining member", func(p *fleetv1alpha1.Propagation) bool {
			return slices.Contains(p.Status.Rollout.Draining, held)
		})
		if slices.Contains(p.Status.Rollout.Draining, other) || tm.copyOf(other, "web") == nil {
			t.Fatalf("%s's copy went while %s's removal was held: record %+v", other, held, p.Status.Rollout)
		}
		mc := tm.waitMember(held, "not drained while its copy is held", func(mc *fleetv1alpha1.MemberCluster) bool { return true })
		if drainedTrue(mc) {
			t.Errorf("%s says Drained while its copy is still there: %+v", held, mc.Status.Conditions)
		}
	}
	// Let the held copy go; both drains end.
	pollUntil(t, "the finalizer removed", func() bool {
		c := tm.copyOf(held, "web")
		if c == nil {
			return true
		}
		c.Finalizers = nil
		return tm.member(held).Update(t.Context(), c) == nil
	})
	for _, m := range []string{held, other} {
		tm.waitMember(m, "Drained", drainedTrue)
	}
	s.stopSampling()
	checkRemovalsOneAtATime(t, s.taken(), []string{held, other})
	if v := tm.valueIn(members[2], "web"); v != "1" {
		t.Errorf("%s, not drained, holds %q", members[2], v)
	}
}

func drainedTrue(mc *fleetv1alpha1.MemberCluster) bool {
	for _, c := range mc.Status.Conditions {
		if c.Type == fleetv1alpha1.ConditionDrained {
			return c.Status == "True"
		}
	}
	return false
}

// checkRemovalsOneAtATime fails the test if two members' copies were
// being removed at once: a removal runs from the first sample whose copy
// is terminating or gone until the first sample it is gone, and another
// member's copy must not be terminating or gone before that.
func checkRemovalsOneAtATime(t *testing.T, samples []sample, members []string) {
	t.Helper()
	start, end := map[string]time.Time{}, map[string]time.Time{}
	for _, smp := range samples {
		for _, m := range members {
			c := smp.copies[m]
			if _, ok := start[m]; !ok && (c.value == "" || c.terminating) {
				start[m] = smp.at
			}
			if _, ok := end[m]; !ok && c.value == "" {
				end[m] = smp.at
			}
		}
	}
	for _, a := range members {
		for _, b := range members {
			if a == b || start[a].IsZero() || start[b].IsZero() {
				continue
			}
			// b started while a was being removed.
			if !start[b].Before(start[a]) && start[b].Before(end[a]) {
				t.Errorf("%s's copy was removed from %s, while %s's removal (%s to %s) was under way: 2 members without their copies under maxUnavailable 1",
					b, start[b].Format("15:04:05.000"), a, start[a].Format("15:04:05.000"), end[a].Format("15:04:05.000"))
			}
		}
	}
}

// TestAnotherFleetsCopyIsLeftAlone runs two fleets on the hub that share
// a member server and a team namespace: the second's Propagation of the
// same ConfigMap finds the first's copy there, fails AlreadyExists, and
// neither writes nor, once deleted, removes it.
func TestAnotherFleetsCopyIsLeftAlone(t *testing.T) {
	t.Parallel()
	quote(t)
	first := newTeam(t)
	shared := first.register(5, "a", nil)
	first.setConfigMap("web", "1")
	first.propagation(nil)
	first.waitRollout("of revision 1 complete", complete(1))
	before := first.copyOf(shared, "web")

	second := newTeam(t)
	second.ns = first.ns
	other := second.register(5, "b", nil)
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: first.ns, Name: "second", Labels: second.fleetLabel()},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}},
			Members:   second.selector(),
		},
	}
	if err := second.hub.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "the second fleet's member failed AlreadyExists", func() bool {
		if err := second.hub.Get(t.Context(), client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Status.Members {
			if m.Name == other && m.Result == fleetv1alpha1.ResultFailed && m.Reason == fleetv1alpha1.ReasonAlreadyExists {
				return true
			}
		}
		return false
	})
	if err := second.hub.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	// Evidence the second fleet handled the deletion: its finalizer gone.
	pollUntil(t, "the second fleet's Propagation gone", func() bool {
		return isNotFound(second.hub.Get(t.Context(), client.ObjectKeyFromObject(p), p))
	})
	after := first.copyOf(shared, "web")
	if after == nil {
		t.Fatalf("the first fleet's copy in %s was removed by the second fleet", shared)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the second fleet wrote the first fleet's copy: resourceVersion %s, was %s; labels %v", after.ResourceVersion, before.ResourceVersion, after.Labels)
	}
}
