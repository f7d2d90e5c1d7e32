package propagation_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/deploy"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestMembersSelectorThatDoesNotParseHoldsTheCopies: a members selector
// the manager cannot parse (an In value with a space) deselects no one:
// the member keeps its copy, nothing is applied, and the status says why;
// fixed, the Propagation goes on.
//
// The CRD refuses such a selector at admission, so the test writes it as
// it could be written before the CRD checked selectors: under that older
// CRD, on the test's own hub, which is then upgraded to the current one.
// The stored selector stays, as it would on a hub upgraded in place, and
// other fields can still be edited (the API server ratchets the selector's
// errors while it is unchanged).
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

	notParsing := []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod west"}}}
	f.installPropagationCRD(withoutSelectorChecks)
	t.Cleanup(func() { f.installPropagationCRD(nil) })
	poll.Until(t, "the selector that does not parse written under the older CRD", func() bool {
		p := f.hubPropagation("web")
		p.Spec.Members.Selector.MatchExpressions = notParsing
		err := f.hub.Client.Update(t.Context(), p)
		if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		return err == nil
	})
	f.installPropagationCRD(nil)
	poll.Until(t, "the current CRD refusing the selector", func() bool {
		p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "refused"}, Spec: f.hubPropagation("web").Spec}
		err := f.hub.Client.Create(t.Context(), p, client.DryRunAll)
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatal(err)
		}
		return apierrors.IsInvalid(err)
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
			p.Spec.Members.Selector = fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod"})
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
		p.Spec.Resources[0].Selector = fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "other"})
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

// hubPropagation returns Propagation name of the team namespace.
func (f *testFleet) hubPropagation(name string) *fleetv1alpha1.Propagation {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// installPropagationCRD installs on f's hub the Propagation CRD of
// deploy/crd, its schema changed by edit if set. The API server serves a
// changed schema a moment later: callers wait for it.
func (f *testFleet) installPropagationCRD(edit func(*apiextensionsv1.JSONSchemaProps)) {
	f.t.Helper()
	crds, err := deploy.CRDs()
	if err != nil {
		f.t.Fatal(err)
	}
	i := slices.IndexFunc(crds, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return crd.Spec.Names.Kind == "Propagation"
	})
	if i < 0 {
		f.t.Fatal("deploy/crd holds no Propagation CRD")
	}
	if edit != nil {
		for _, v := range crds[i].Spec.Versions {
			edit(v.Schema.OpenAPIV3Schema)
		}
	}
	if _, err := envtest.InstallCRDs(f.hub.Env.Config, envtest.CRDInstallOptions{CRDs: crds[i : i+1]}); err != nil {
		f.t.Error(err)
	}
}

// withoutSelectorChecks takes out of s the checks of every label selector
// in it, leaving the schema the CRD had before selectors were checked at
// admission.
func withoutSelectorChecks(s *apiextensionsv1.JSONSchemaProps) {
	if _, ok := s.Properties["matchExpressions"]; ok {
		withoutChecks(s)
		return
	}
	for name, p := range s.Properties {
		withoutSelectorChecks(&p)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		withoutSelectorChecks(s.Items.Schema)
	}
}

// withoutChecks takes every check out of s and what it holds.
func withoutChecks(s *apiextensionsv1.JSONSchemaProps) {
	s.XValidations, s.Enum, s.Pattern = nil, nil, ""
	s.MaxLength, s.MaxItems, s.MaxProperties = nil, nil, nil
	for name, p := range s.Properties {
		withoutChecks(&p)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		withoutChecks(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		withoutChecks(s.AdditionalProperties.Schema)
	}
}
