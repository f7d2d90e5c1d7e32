package rollouttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// maintain sets member's maintenance, as fleet-manager cordon, drain and
// uncordon do.
func (f *testFleet) maintain(member string, mode fleetv1alpha1.MaintenanceMode) {
	f.t.Helper()
	// A merge patch of the spec alone: the member's status, written at each
	// probe, never makes it conflict, as an Update of a read copy can.
	mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: member}}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"maintenance":%q}}`, mode))
	if mode == "" {
		patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maintenance":null}}`))
	}
	if err := suite.HubClient.Patch(f.t.Context(), mc, patch); err != nil {
		f.t.Fatal(err)
	}
}

// configMap creates, or changes to data v, the hub's ConfigMap name,
// labelled app=web.
func (f *testFleet) configMap(name, v string) {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: name, Labels: map[string]string{"app": "web"}}, Data: map[string]string{"v": v}}
	if err := suite.HubClient.Create(f.t.Context(), cm); err == nil {
		return
	}
	if err := suite.HubClient.Update(f.t.Context(), cm); err != nil {
		f.t.Fatal(err)
	}
}

// valueIn returns member's copy of ConfigMap name's value, "" if it has
// none.
func (f *testFleet) valueIn(member, name string) string {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := suite.MemberClients[f.members[member]].Get(f.t.Context(), client.ObjectKey{Namespace: f.team, Name: name}, cm); err != nil {
		return ""
	}
	return cm.Data["v"]
}

// TestDrainRemovesCopiesWithinTheDisruptionBudget: three members of a
// Propagation whose budget is one unavailable member are drained at once;
// their copies are removed one member at a time, each MemberCluster says
// what it waits for, then that it is drained. Uncordoned, they get the
// copies back.
func TestDrainRemovesCopiesWithinTheDisruptionBudget(t *testing.T) {
	f := newFleet(t, 0)
	members := []string{f.register(0, "a", nil), f.register(1, "b", nil), f.register(2, "c", nil)}
	f.configMap("web", "1")
	f.propagation(nil, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))

	for _, m := range members {
		f.maintain(m, fleetv1alpha1.MaintenanceDrain)
	}
	most, waited := 0, false
	var p *fleetv1alpha1.Propagation
	defer func() {
		if t.Failed() {
			t.Logf("the Propagation's status: %+v rollout %+v", p.Status, p.Status.Rollout)
		}
	}()
	poll.Until(t, "every member drained", func() bool {
		p = f.get()
		if p.Status.Rollout != nil {
			most = max(most, len(p.Status.Rollout.Draining))
		}
		drained := 0
		for _, m := range members {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Name: m}, mc); err != nil {
				t.Fatal(err)
			}
			if mc.Status.Drain != nil && strings.HasPrefix(mc.Status.Drain.Message, "waiting for the disruption budget of Propagation "+f.team+"/web: maxUnavailable 1; ") {
				waited = true
			}
			if fleettest.Condition(mc, fleetv1alpha1.ConditionDrained) == metav1.ConditionTrue && mc.Status.Drain != nil && mc.Status.Drain.Remaining == 0 && f.valueIn(m, "web") == "" {
				drained++
			}
		}
		return drained == len(members)
	})
	if most != 1 {
		t.Errorf("at most %d members were drained at once, want 1", most)
	}
	if !waited {
		t.Error("no MemberCluster said it waited for the disruption budget")
	}

	for _, m := range members {
		f.maintain(m, "")
	}
	poll.Until(t, "the members have their copies back", func() bool {
		return !slices.ContainsFunc(members, func(m string) bool { return f.valueIn(m, "web") != "1" })
	})
}

// TestCordonedMemberKeepsWhatItHas: a cordoned member keeps the revision
// it has while the others take the next, and takes no new Propagation;
// uncordoned, it takes both.
func TestCordonedMemberKeepsWhatItHas(t *testing.T) {
	f := newFleet(t, 0)
	open, cordoned := f.register(0, "open", nil), f.register(1, "cordoned", nil)
	f.configMap("web", "1")
	f.propagation(nil, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))

	f.maintain(cordoned, fleetv1alpha1.MaintenanceCordon)
	f.waitRollout("keeping the cordoned member's revision", func(r *fleetv1alpha1.RolloutStatus) bool { return assigned(r, cordoned) == 1 })
	f.configMap("web", "2")
	poll.Until(t, "the open member has revision 2", func() bool { return f.valueIn(open, "web") == "2" })
	other := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "other"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "other"}},
			Members:   fleetv1alpha1.MemberSelector{Names: []string{open, cordoned}},
		},
	}
	otherData := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "other"}, Data: map[string]string{"v": "1"}}
	if err := suite.HubClient.Create(t.Context(), otherData); err != nil {
		t.Fatal(err)
	}
	if err := suite.HubClient.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the open member has the new Propagation's copy", func() bool { return f.valueIn(open, "other") == "1" })
	f.waitRollout("of revision 2 complete", complete(2))
	// Every member is asked again, the cordoned one included, and each
	// reports what it holds after the edit.
	f.reconciledAgain()
	if got := f.valueIn(cordoned, "web"); got != "1" {
		t.Errorf("the cordoned member's copy holds %q, want revision 1's 1", got)
	}
	if got := f.valueIn(cordoned, "other"); got != "" {
		t.Errorf("the cordoned member got a new Propagation's copy (%q)", got)
	}

	f.maintain(cordoned, "")
	poll.Until(t, "the uncordoned member takes both", func() bool {
		return f.valueIn(cordoned, "web") == "2" && f.valueIn(cordoned, "other") == "1"
	})
}

// TestRevisionsAreMadeOnlyOnChange: a Propagation of ten objects, which
// the hub lists in no set order, makes one revision, and one more per
// change.
func TestRevisionsAreMadeOnlyOnChange(t *testing.T) {
	f := newFleet(t, 0)
	f.register(0, "a", nil)
	for i := range 10 {
		f.configMap("web-"+string(rune('a'+i)), "1")
	}
	f.propagation(nil, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))
	// Each edit is summed up again, the content read from the hub anew.
	for range 3 {
		f.reconciledAgain()
	}
	if n, made := f.get().Status.Revision, f.revisionCount(); n != 1 || made != 1 {
		t.Errorf("revision %d (%d made) with nothing changed, want 1", n, made)
	}
	f.configMap("web-c", "2")
	f.waitRollout("of revision 2 complete", complete(2))
	for range 3 {
		f.reconciledAgain()
	}
	if n, made := f.get().Status.Revision, f.revisionCount(); n != 2 || made != 2 {
		t.Errorf("revision %d (%d made) after one change, want 2", n, made)
	}
}

// reconciledAgain makes every member, and the hub's summing-up, handle
// Propagation web once more, by an edit of its spec that changes no
// copy, and waits until the rollout is recorded for the new generation
// and every selected member reported it: a check that nothing happened
// counts from there.
func (f *testFleet) reconciledAgain() {
	f.t.Helper()
	f.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = !p.Spec.Adopt })
	f.waitRollout("recorded, every member reporting the edit", func(*fleetv1alpha1.RolloutStatus) bool {
		st := f.get().Status
		return st.Selected > 0 && st.Selected == st.Applied+st.Drifted+st.Failed
	})
}

// revisionCount is how many revisions of Propagation web the hub holds.
func (f *testFleet) revisionCount() int {
	f.t.Helper()
	var list fleetv1alpha1.PropagationRevisionList
	if err := suite.HubClient.List(f.t.Context(), &list, client.InNamespace(f.team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: "web"}); err != nil {
		f.t.Fatal(err)
	}
	return len(list.Items)
}

// TestDrainWaitsForACopyAFinalizerHolds: a drained member whose copy a
// finalizer holds is not Drained while the copy is there, its drain
// names what it waits for, and it keeps the disruption budget's only
// slot: the next drained member keeps its copy. Once the finalizer goes,
// both are drained.
func TestDrainWaitsForACopyAFinalizerHolds(t *testing.T) {
	f := newFleet(t, 0)
	a, b := f.register(0, "a", nil), f.register(1, "b", nil)
	f.configMap("web", "1")
	f.propagation(nil, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))
	const finalizer = "test.fleetkube.io/hold"
	held := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: f.team, Name: "web"}
	member := suite.MemberClients[f.members[a]]
	if err := member.Get(t.Context(), key, held); err != nil {
		t.Fatal(err)
	}
	held.Finalizers = append(held.Finalizers, finalizer)
	if err := member.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cm := &corev1.ConfigMap{}
		if member.Get(context.Background(), key, cm) == nil {
			cm.Finalizers = nil
			_ = member.Update(context.Background(), cm)
		}
	})

	f.maintain(a, fleetv1alpha1.MaintenanceDrain)
	f.maintain(b, fleetv1alpha1.MaintenanceDrain)
	memberCluster := func(name string) *fleetv1alpha1.MemberCluster {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc); err != nil {
			t.Fatal(err)
		}
		return mc
	}
	deleting := func(cm *corev1.ConfigMap) bool { return cm.DeletionTimestamp != nil }
	var mcA, mcB *fleetv1alpha1.MemberCluster
	poll.Until(t, "a's copy deleting, and a's drain naming it, or a drained", func() bool {
		mcA, mcB = memberCluster(a), memberCluster(b)
		cm := &corev1.ConfigMap{}
		if err := member.Get(t.Context(), key, cm); err != nil || !deleting(cm) {
			return false
		}
		return fleettest.Condition(mcA, fleetv1alpha1.ConditionDrained) == metav1.ConditionTrue ||
			mcA.Status.Drain != nil && strings.Contains(mcA.Status.Drain.Message, "waiting for the member to delete ConfigMap web")
	})
	if got := fleettest.Condition(mcA, fleetv1alpha1.ConditionDrained); got == metav1.ConditionTrue {
		t.Errorf("%s is Drained (%+v) while a finalizer holds its copy", a, mcA.Status.Drain)
	}
	// The drain of a was handled: b's must have been planned from it.
	poll.Until(t, "b waiting for the disruption budget, or drained", func() bool {
		mcB = memberCluster(b)
		return mcB.Status.Drain != nil && mcB.Status.Drain.Message == "waiting for the disruption budget of Propagation "+f.team+"/web: maxUnavailable 1; "+a+" is draining" ||
			f.valueIn(b, "web") == ""
	})
	if f.valueIn(b, "web") != "1" {
		t.Errorf("%s lost its copy while %s's was still being deleted: two members without it under maxUnavailable 1", b, a)
	}

	held = &corev1.ConfigMap{}
	if err := member.Get(t.Context(), key, held); err != nil {
		t.Fatal(err)
	}
	held.Finalizers = nil
	if err := member.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "both members drained", func() bool {
		for _, m := range []string{a, b} {
			if fleettest.Condition(memberCluster(m), fleetv1alpha1.ConditionDrained) != metav1.ConditionTrue || f.valueIn(m, "web") != "" {
				return false
			}
		}
		return true
	})
}

// TestDrainedMemberThatIsDownHoldsNoBudget: of two members drained at
// once under a budget of one, the one that is down (its API server cut
// off) is given no part of the budget: the other is drained, and the
// down one keeps its copy until it is back, then is drained too.
func TestDrainedMemberThatIsDownHoldsNoBudget(t *testing.T) {
	f := newFleet(t, 0)
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	down := f.registerKubeconfig(0, "down", proxied, nil)
	up := f.register(1, "up", nil)
	f.register(2, "stays", nil)
	f.configMap("web", "1")
	f.propagation(nil, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))

	proxy.Down()
	suite.WaitMemberCluster(t, down, "not Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionReady) != metav1.ConditionTrue
	})
	f.maintain(down, fleetv1alpha1.MaintenanceDrain)
	f.maintain(up, fleetv1alpha1.MaintenanceDrain)
	poll.Until(t, "the member that is up drained while the other is down", func() bool {
		return f.valueIn(up, "web") == "" && !slices.Contains(f.get().Status.Rollout.Draining, down)
	})
	if f.valueIn(down, "web") != "1" {
		t.Error("the member that is down lost its copy while cut off")
	}

	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the member that was down drained once back", func() bool { return f.valueIn(down, "web") == "" })
}
