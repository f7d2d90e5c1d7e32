package tenancy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// teamAPolicies: team-a reaches its dev members with any kind but RBAC,
// and prod-eu with ConfigMaps only.
var teamAPolicies = []fleetv1alpha1.TenancyPolicy{
	policyOf("a-dev", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
		Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"env": "dev"}}, Sources: []string{"fleet-system"}},
		Kinds:      fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "rbac.authorization.k8s.io", Kind: "*"}}},
	}),
	policyOf("a-prod-configs", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
		Members:    fleetv1alpha1.ReachableMembers{Names: []string{"prod-eu"}},
		Kinds:      fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Kind: "ConfigMap"}}},
	}),
}

func TestDryRunNamesLostMembersAndRefusedKinds(t *testing.T) {
	props := []Propagation{
		{Namespace: "team-a", Name: "web", Kinds: []schema.GroupKind{cm, deploy, role}},
		{Namespace: "team-b", Name: "api", Kinds: []schema.GroupKind{cm}},
		{Namespace: "team-a", Name: "dev-only", Members: fleetv1alpha1.MemberSelector{Names: []string{"dev-eu"}}, Kinds: []schema.GroupKind{cm}},
	}
	losses := DryRun(New(teamAPolicies), map[string]Namespace{"team-a": teamA}, props, []Member{prodEU, devEU, capiDev})
	web := losses[0]
	if !slices.Equal(web.Selected, []string{"capi-dev", "dev-eu", "prod-eu"}) {
		t.Errorf("web selects %v", web.Selected)
	}
	if len(web.Excluded) != 1 || web.Excluded[0].Member != "capi-dev" || !strings.Contains(web.Excluded[0].Reason, "a-dev") {
		t.Errorf("web loses %+v, want capi-dev (from another source than a-dev's)", web.Excluded)
	}
	want := map[schema.GroupKind][]string{deploy: {"prod-eu"}, role: {"dev-eu", "prod-eu"}}
	if len(web.Refused) != len(want) {
		t.Errorf("web's refused kinds: %+v, want %v", web.Refused, want)
	}
	for _, r := range web.Refused {
		if !slices.Equal(r.Members, want[r.Kind]) || r.Reason == "" {
			t.Errorf("%s refused in %v (%q), want in %v", r.Kind, r.Members, r.Reason, want[r.Kind])
		}
	}
	if api := losses[1]; !api.Loses() || len(api.Excluded) != 3 || !strings.Contains(api.Excluded[0].Reason, "no TenancyPolicy is for namespace team-b") {
		t.Errorf("team-b, with no policy, loses %+v, want every member", api)
	}
	if devOnly := losses[2]; devOnly.Loses() || !slices.Equal(devOnly.Selected, []string{"dev-eu"}) {
		t.Errorf("dev-only loses %+v, want nothing", devOnly)
	}
}

// A doubt is never shown as a loss: the namespace whose policy does not
// parse, or the Propagation whose spec.members does not, would be held.
func TestDryRunShowsDoubtNotLoss(t *testing.T) {
	bad := &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: "In"}}}
	policies := append(slices.Clone(teamAPolicies), policyOf("a-broken", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
		Members:    fleetv1alpha1.ReachableMembers{Selector: bad},
	}))
	props := []Propagation{
		{Namespace: "team-a", Name: "web", Kinds: []schema.GroupKind{role}},
		{Namespace: "team-b", Name: "bad-members", Members: fleetv1alpha1.MemberSelector{Selector: bad}},
	}
	losses := DryRun(New(policies), nil, props, []Member{devEU, prodEU})
	for _, l := range losses {
		if l.Doubt == "" || len(l.Excluded) > 0 || len(l.Refused) > 0 || !l.Loses() {
			t.Errorf("%s/%s: %+v, want a doubt and nothing lost", l.Namespace, l.Name, l)
		}
	}
	if !strings.Contains(losses[0].Doubt, "a-broken") || !strings.Contains(losses[1].Doubt, "spec.members") {
		t.Errorf("doubts %q, %q: want the broken policy, and spec.members, named", losses[0].Doubt, losses[1].Doubt)
	}
}

// A member the Propagation's status lists holds or is being given copies:
// it counts as selected, as the spec would not say.
func TestDryRunCountsMembersTheStatusLists(t *testing.T) {
	p := PropagationOf(&fleetv1alpha1.Propagation{
		Spec: fleetv1alpha1.PropagationSpec{
			Members: fleetv1alpha1.MemberSelector{Names: []string{"dev-eu"}},
			Resources: []fleetv1alpha1.ResourceSelector{
				{APIVersion: "v1", Kind: "ConfigMap"}, {APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope"},
			},
		},
		Status: fleetv1alpha1.PropagationStatus{
			Members: []fleetv1alpha1.MemberPropagationStatus{{Name: "prod-eu"}},
			Kinds:   []fleetv1alpha1.KindReference{{APIVersion: "apps/v1", Kind: "Deployment"}, {APIVersion: "v1", Kind: "ConfigMap"}},
		},
	})
	p.Namespace = "team-a"
	if !slices.Equal(p.Kinds, []schema.GroupKind{cm, deploy}) {
		t.Errorf("kinds %v, want ConfigMap and Deployment.apps, not the Envelope", p.Kinds)
	}
	loss := DryRun(New(teamAPolicies), nil, []Propagation{p}, []Member{devEU, prodEU})[0]
	if !slices.Equal(loss.Selected, []string{"dev-eu", "prod-eu"}) || len(loss.Refused) != 1 || loss.Refused[0].Kind != deploy {
		t.Errorf("loss %+v, want prod-eu selected and refusing Deployments", loss)
	}
}

func TestDryRunOfAThousandMembers(t *testing.T) {
	var members []Member
	for i := range 1000 {
		env := "dev"
		if i%2 == 1 {
			env = "prod"
		}
		members = append(members, Member{Name: fmt.Sprintf("m-%04d", i), Labels: map[string]string{"env": env}, Source: "fleet-system"})
	}
	loss := DryRun(New(teamAPolicies), nil, []Propagation{{Namespace: "team-a", Name: "web", Kinds: []schema.GroupKind{cm}}}, members)[0]
	if len(loss.Selected) != 1000 || len(loss.Excluded) != 500 || len(loss.Refused) != 0 {
		t.Errorf("selected %d, excluded %d, refused %v: want 1000, the 500 prod members, none", len(loss.Selected), len(loss.Excluded), loss.Refused)
	}
}

func TestGrantsAndDescribeKinds(t *testing.T) {
	a := New(teamAPolicies).For(teamA)
	grants := a.Grants(prodEU)
	if len(grants) != 1 || grants[0].Policy != "a-prod-configs" || DescribeKinds(grants[0].Kinds) != "ConfigMap" {
		t.Errorf("prod-eu's grants %+v", grants)
	}
	if got := DescribeKinds(a.Grants(devEU)[0].Kinds); got != "every kind but *.rbac.authorization.k8s.io" {
		t.Errorf("dev-eu's kinds: %q", got)
	}
	if g := a.Grants(capiDev); len(g) != 0 {
		t.Errorf("capi-dev, from another source, granted %+v", g)
	}
	if g := Everything().For(teamB).Grants(devEU); g != nil {
		t.Errorf("tenancy Off names grants %+v", g)
	}
	if got := DescribeKinds(fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "*", Kind: "ConfigMap"}, {Group: "apps"}}}); got != "ConfigMap.*, *.apps" {
		t.Errorf("DescribeKinds: %q", got)
	}
}

// Replicas that share a fleet apply the strictest mode: one that
// enforces wins, Off needs every replica Off, and one that has not said
// is a doubt for a replica that would not enforce anyway.
func TestReplicasAgreeOnTheStrictestMode(t *testing.T) {
	const on, off = fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff
	for _, c := range []struct {
		own      string
		replicas map[string]string
		want     string
		doubt    bool
	}{
		{off, map[string]string{"a": off, "b": on}, on, false},
		{off, map[string]string{"a": off, "b": off}, off, false},
		{off, map[string]string{"a": off, "b": ""}, "", true},
		{off, map[string]string{"a": off, "b": "", "c": on}, on, false},
		{on, map[string]string{"a": on, "b": ""}, on, false},
		{on, map[string]string{"a": on, "b": off}, on, false},
	} {
		got, err := Agreed(c.own, c.replicas)
		if got != c.want || (err != nil) != c.doubt {
			t.Errorf("Agreed(%s, %v) = %q, %v; want %q, doubt %v", c.own, c.replicas, got, err, c.want, c.doubt)
		} else if c.doubt && !strings.Contains(err.Error(), "b") {
			t.Errorf("the doubt %q does not name replica b", err)
		}
	}
}
