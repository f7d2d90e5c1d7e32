package propagation_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestMembersSelectorThatDoesNotParseHoldsTheCopies: a members selector
// the manager cannot parse (a label value with a space, which the CRD
// accepts) deselects no one: the member keeps its copy, nothing is
// applied, and the status says why; fixed, the Propagation goes on.
func TestMembersSelectorThatDoesNotParseHoldsTheCopies(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive}
	})
	f.waitStatus("web", "Ready", ready)
	f.waitCopy(0, "web", "copied", exists)

	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Members.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod west"}}}
	})
	p := f.waitStatus("web", "Ready=False for the selector, and east held", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonInvalidSelector &&
			slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
				return m.Name == "east" && m.Reason == fleetv1alpha1.ReasonInvalidSelector && m.ObservedGeneration == p.Generation
			})
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); !strings.Contains(c.Message, "members selector") {
		t.Errorf("Ready's message %q: want the members selector named", c.Message)
	}
	if f.copyIn(0, "web") == nil {
		t.Fatal("east lost its copy to a members selector that does not parse")
	}
	if p.Status.PendingDeletions != 0 {
		t.Errorf("pendingDeletions = %d: a selector that does not parse owes no removal", p.Status.PendingDeletions)
	}
	// Nothing new is applied while it is held.
	f.editConfigMap("web", func(data map[string]string) { data["color"] = "red" })
	f.reconciledAgainHeld("web")
	if got := f.copyIn(0, "web"); got == nil || got.Data["color"] != "blue" {
		t.Fatalf("east's copy while held: %v; want it kept as it was, blue", got)
	}

	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Members.Selector.MatchExpressions = nil })
	f.waitStatus("web", "Ready again", ready)
	f.waitCopy(0, "web", "red", dataIs("color", "red"))
}

// reconciledAgainHeld makes every member reconcile Propagation name once
// more while it is held, and waits until each reported the new generation.
func (f *testFleet) reconciledAgainHeld(name string) {
	f.t.Helper()
	f.editPropagation(name, func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = !p.Spec.Adopt })
	f.waitStatus(name, "every member reported the new generation", func(p *fleetv1alpha1.Propagation) bool {
		return len(p.Status.Members) > 0 && !slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
			return m.ObservedGeneration != p.Generation
		})
	})
}

// editConfigMap applies edit to the data of the hub's ConfigMap name.
func (f *testFleet) editConfigMap(name string, edit func(data map[string]string)) {
	f.t.Helper()
	cm := f.hubConfigMap(name)
	edit(cm.Data)
	if err := f.hub.Client.Update(f.t.Context(), cm); err != nil {
		f.t.Fatal(err)
	}
}

// TestTwoFleetsOnOneHubEachHandleTheirOwn: two fleets on one hub, whose
// members both match the same selectors. A Propagation labelled with one
// fleet's namespace is that fleet's: only its members get copies, and the
// other fleet makes no revision of it and writes no status. One not
// labelled is claimed by exactly one of them.
func TestTwoFleetsOnOneHubEachHandleTheirOwn(t *testing.T) {
	t.Parallel()
	hub := suite.OwnHubs(t, 1)[0]
	team := suite.Name("team")
	a := prepareFleet(t, hub, suite.Name("fleet"), team)
	a.start(nil)
	b := prepareFleet(t, hub, suite.Name("fleet"), team)
	b.start(nil)
	a.register(0, "east", map[string]string{"env": "prod"})
	b.register(1, "west", map[string]string{"env": "prod"})
	a.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	anyProd := func(fleetNamespace string) func(p *fleetv1alpha1.Propagation) {
		return func(p *fleetv1alpha1.Propagation) {
			p.Spec.Members.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
			p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive}
			if fleetNamespace != "" {
				p.Labels = map[string]string{fleetv1alpha1.FleetLabel: fleetNamespace}
			}
		}
	}
	a.propagation("of-a", anyProd(a.namespace))
	b.propagation("of-b", anyProd(b.namespace))

	onlyMember := func(member string) func(p *fleetv1alpha1.Propagation) bool {
		return func(p *fleetv1alpha1.Propagation) bool {
			return ready(p) && p.Status.Selected == 1 && p.Status.Rollout != nil &&
				len(p.Status.Rollout.Members) == 1 && slices.Equal(p.Status.Rollout.Members[0].Names, []string{member})
		}
	}
	a.waitStatus("of-a", "Ready in east only", onlyMember("east"))
	b.waitStatus("of-b", "Ready in west only", onlyMember("west"))
	a.waitCopy(0, "web", "copied to east", exists)
	if b.copyIn(1, "web") == nil {
		t.Fatal("west has no copy of of-b")
	}
	// Neither fleet made a revision of the other's, nor gave its member
	// the other's (each fleet lists every Propagation as its cache
	// starts, before it made its own Ready).
	for _, tc := range []struct {
		f     *testFleet
		name  string
		other string
	}{{a, "of-a", b.namespace}, {b, "of-b", a.namespace}} {
		p := tc.f.waitStatus(tc.name, "Ready", ready)
		if p.Labels[fleetv1alpha1.FleetLabel] != tc.f.namespace {
			t.Errorf("%s is labelled %q; want its fleet's namespace %q", tc.name, p.Labels[fleetv1alpha1.FleetLabel], tc.f.namespace)
		}
		revs := &fleetv1alpha1.PropagationRevisionList{}
		if err := hub.Client.List(t.Context(), revs, client.InNamespace(team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: tc.name}); err != nil {
			t.Fatal(err)
		}
		for _, rev := range revs.Items {
			if rev.Labels[fleetv1alpha1.FleetLabel] == tc.other {
				t.Errorf("revision %s of %s was made by the other fleet", rev.Name, tc.name)
			}
		}
		if slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
			return m.Reason == fleetv1alpha1.ReasonWaitingForRollout
		}) {
			t.Errorf("%s holds a member waiting for its rollout: %+v", tc.name, p.Status.Members)
		}
	}

	// Not labelled: one fleet claims it, and only its member gets it (a
	// ConfigMap of its own: of-a's copy in east is of-a's, not its).
	a.configMap("other", map[string]string{"color": "red"}, map[string]string{"app": "other"})
	a.propagation("unclaimed", func(p *fleetv1alpha1.Propagation) {
		anyProd("")(p)
		p.Spec.Resources[0].Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
	})
	p := &fleetv1alpha1.Propagation{}
	poll.Until(t, "unclaimed claimed by a fleet", func() bool {
		return hub.Client.Get(t.Context(), types.NamespacedName{Namespace: team, Name: "unclaimed"}, p) == nil && p.Labels[fleetv1alpha1.FleetLabel] != ""
	})
	winner, member := a, "east"
	if p.Labels[fleetv1alpha1.FleetLabel] == b.namespace {
		winner, member = b, "west"
	}
	winner.waitStatus("unclaimed", "Ready in the winner's member only", onlyMember(member))
}

// hubConfigMap returns the hub's ConfigMap name of the team namespace.
func (f *testFleet) hubConfigMap(name string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, cm); err != nil {
		f.t.Fatal(err)
	}
	return cm
}
