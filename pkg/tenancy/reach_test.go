package tenancy

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func policyOf(name string, spec fleetv1alpha1.TenancyPolicySpec) fleetv1alpha1.TenancyPolicy {
	return fleetv1alpha1.TenancyPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

var (
	teamA   = Namespace{Name: "team-a", Labels: map[string]string{"tier": "tenant"}}
	teamB   = Namespace{Name: "team-b"}
	devEU   = Member{Name: "dev-eu", Labels: map[string]string{"env": "dev"}, Source: "fleet-system"}
	prodEU  = Member{Name: "prod-eu", Labels: map[string]string{"env": "prod"}, Source: "fleet-system"}
	capiDev = Member{Name: "capi-dev", Labels: map[string]string{"env": "dev"}, Source: "capi"}
	cm      = schema.GroupKind{Kind: "ConfigMap"}
	deploy  = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	role    = schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"}
)

func TestReachAddsUpPoliciesAndDenyWins(t *testing.T) {
	r := New([]fleetv1alpha1.TenancyPolicy{
		policyOf("a-dev", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"env": "dev"}}, Sources: []string{"fleet-system"}},
			Kinds:      fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "rbac.authorization.k8s.io", Kind: "*"}}},
		}),
		policyOf("a-prod-configs", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"tier": "tenant"}}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{"prod-eu"}},
			Kinds:      fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "", Kind: "ConfigMap"}}},
		}),
	})
	a := r.For(teamA)
	if a.Doubt() != nil {
		t.Fatalf("doubt: %v", a.Doubt())
	}
	for _, c := range []struct {
		m    Member
		gk   schema.GroupKind
		want bool
	}{
		{devEU, cm, true},
		{devEU, deploy, true},
		{devEU, role, false},    // denied by a-dev, and a-prod-configs does not reach dev-eu
		{prodEU, cm, true},      // a-prod-configs
		{prodEU, deploy, false}, // a-prod-configs allows ConfigMaps only
		{capiDev, cm, false},    // a-dev requires the fleet namespace as source
	} {
		if got, why := a.Allows(c.m, c.gk); got != c.want {
			t.Errorf("team-a, %s, %s: allowed %v (%s), want %v", c.m.Name, c.gk, got, why, c.want)
		}
	}
	if ok, why := a.Reaches(capiDev); ok || !strings.Contains(why, "a-dev") {
		t.Errorf("capi-dev reached (%v) or the reason names no policy: %q", ok, why)
	}
	if ok, why := r.For(teamB).Reaches(devEU); ok || !strings.Contains(why, "no TenancyPolicy is for namespace team-b") {
		t.Errorf("team-b, with no policy, reaches dev-eu (%v) or says %q", ok, why)
	}
}

func TestPolicyWithoutMembersOrNamespacesReachesNothing(t *testing.T) {
	r := New([]fleetv1alpha1.TenancyPolicy{policyOf("empty", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
	}), policyOf("no-namespaces", fleetv1alpha1.TenancyPolicySpec{
		Members: fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
	})})
	if ok, _ := r.For(teamA).Reaches(devEU); ok {
		t.Error("a policy with no members reaches dev-eu")
	}
	if ok, _ := r.For(teamB).Reaches(devEU); ok {
		t.Error("a policy with no namespaces is for team-b")
	}
}

func TestUnparsablePolicyPutsItsNamespacesInDoubt(t *testing.T) {
	bad := &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: "In"}}}
	r := New([]fleetv1alpha1.TenancyPolicy{
		policyOf("bad-members", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: bad},
		}),
		policyOf("a-all", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a", "team-b"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
		}),
	})
	if d := r.For(teamA).Doubt(); d == nil || !strings.Contains(d.Error(), "bad-members") {
		t.Errorf("team-a's doubt: %v, want one naming bad-members", d)
	}
	if d := r.For(teamB).Doubt(); d != nil {
		t.Errorf("team-b is in doubt (%v) though bad-members is not for it", d)
	}
	badNamespaces := New([]fleetv1alpha1.TenancyPolicy{policyOf("bad-namespaces", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Selector: bad},
	})})
	if d := badNamespaces.For(teamB).Doubt(); d == nil {
		t.Error("a policy whose namespaces selector does not parse leaves team-b sure")
	}
	if ok, _ := Unknown(errors.New("hub down")).For(teamA).Reaches(devEU); ok {
		t.Error("an unknown reach reaches")
	}
	if ok, _ := Everything().For(teamB).Allows(prodEU, role); !ok {
		t.Error("Everything refuses")
	}
}

// A member a ClusterProfile registers in the fleet namespace is not from
// the fleet namespace's Secrets: sources [fleet-system] does not reach
// it, sources [clusterprofile/fleet-system] does; the controller and the
// CLI read its source through SourceOf alike.
func TestClusterProfileInTheFleetNamespaceIsNotItsSecrets(t *testing.T) {
	profile := MemberOf(&fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "profiled", Labels: map[string]string{"env": "dev"}},
		Spec:       fleetv1alpha1.MemberClusterSpec{SecretRef: fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "profiled", Format: fleetv1alpha1.FormatClusterProfile}},
	})
	capi := MemberOf(&fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "capi-dev"},
		Spec:       fleetv1alpha1.MemberClusterSpec{SecretRef: fleetv1alpha1.SecretReference{Namespace: "capi", Name: "capi-dev-kubeconfig", Format: fleetv1alpha1.FormatClusterAPI}},
	})
	if profile.Source != "clusterprofile/fleet-system" || capi.Source != "capi" {
		t.Errorf("sources %q, %q: want clusterprofile/fleet-system, capi", profile.Source, capi.Source)
	}
	reach := func(sources ...string) bool {
		ok, _ := New([]fleetv1alpha1.TenancyPolicy{policyOf("p", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}, Sources: sources},
		})}).For(teamA).Reaches(profile)
		return ok
	}
	if reach("fleet-system") {
		t.Error("sources [fleet-system] reaches a member a ClusterProfile in fleet-system registers")
	}
	if !reach("clusterprofile/fleet-system") {
		t.Error("sources [clusterprofile/fleet-system] does not reach it")
	}
}

// TestEveryMemberFromAForeignSourceReachesOnlyItsMembers: the worst members
// spec, selector {} (every member) with sources naming another
// namespace, reaches only what that source registered: not the fleet's
// own members, whatever their labels.
func TestEveryMemberFromAForeignSourceReachesOnlyItsMembers(t *testing.T) {
	r := New([]fleetv1alpha1.TenancyPolicy{policyOf("everything-from-capi", fleetv1alpha1.TenancyPolicySpec{
		Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
		Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}, Sources: []string{"capi"}},
	})})
	n := r.For(teamA)
	if ok, _ := n.Reaches(devEU); ok {
		t.Error("selector {} with sources [capi] reaches dev-eu, registered in fleet-system")
	}
	if ok, _ := n.Reaches(Member{Name: "no-source", Labels: map[string]string{}}); ok {
		t.Error("selector {} with sources [capi] reaches a member with no known source")
	}
	if ok, _ := n.Reaches(capiDev); !ok {
		t.Error("selector {} with sources [capi] does not reach capi-dev")
	}
	if ok, _ := r.For(teamB).Reaches(capiDev); ok {
		t.Error("a policy for team-a lets team-b reach capi-dev")
	}
	// An empty namespaces spec (no names, no selector) is for no one.
	r = New([]fleetv1alpha1.TenancyPolicy{policyOf("nobody", fleetv1alpha1.TenancyPolicySpec{
		Members: fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
	})})
	if ok, _ := r.For(teamA).Reaches(devEU); ok {
		t.Error("a policy naming no namespace lets team-a reach dev-eu")
	}
}

// TestKindRuleGroupsMatchExactlyAndPoliciesAddUp: "" is the core group only, "*" every group,
// "apps" only apps; a kind one policy denies is allowed where another
// policy that reaches the member allows it (policies add up), and not
// where that other policy does not reach the member.
func TestKindRuleGroupsMatchExactlyAndPoliciesAddUp(t *testing.T) {
	secret := schema.GroupKind{Kind: "Secret"}
	appsSecret := schema.GroupKind{Group: "apps", Kind: "Secret"} // a made-up kind named Secret in apps
	cases := []struct {
		name  string
		rules fleetv1alpha1.KindRules
		gk    schema.GroupKind
		want  bool
	}{
		{"deny core * leaves apps alone", fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "", Kind: "*"}}}, deploy, true},
		{"deny core * denies ConfigMap", fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "", Kind: "*"}}}, cm, false},
		{"deny */Secret denies core Secret", fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "*", Kind: "Secret"}}}, secret, false},
		{"deny */Secret denies apps Secret", fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "*", Kind: "Secret"}}}, appsSecret, false},
		{"deny core Secret leaves apps Secret", fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "", Kind: "Secret"}}}, appsSecret, true},
		{"allow apps does not allow core", fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "apps"}}}, cm, false},
		{"allow apps allows Deployment", fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "apps"}}}, deploy, true},
		{"allow * deny rbac", fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "*"}}, Deny: []fleetv1alpha1.KindRule{{Group: "rbac.authorization.k8s.io"}}}, role, false},
		{"group * does not match as a kind wildcard on group apps", fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "apps", Kind: "*"}}}, schema.GroupKind{Group: "apps.example", Kind: "Deployment"}, false},
	}
	for _, c := range cases {
		r := New([]fleetv1alpha1.TenancyPolicy{policyOf("p", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{"dev-eu"}},
			Kinds:      c.rules,
		})})
		if got, why := r.For(teamA).Allows(devEU, c.gk); got != c.want {
			t.Errorf("%s: Allows(%v) = %v (%s), want %v", c.name, c.gk, got, why, c.want)
		}
	}

	// Denied by one, allowed by another that reaches the member: allowed;
	// the other does not reach prod-eu: denied there.
	r := New([]fleetv1alpha1.TenancyPolicy{
		policyOf("deny-secrets", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
			Kinds:      fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "", Kind: "Secret"}}},
		}),
		policyOf("dev-all", fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"env": "dev"}}},
		}),
	})
	if ok, _ := r.For(teamA).Allows(devEU, secret); !ok {
		t.Error("Secret in dev-eu: denied by deny-secrets though dev-all allows it (policies add up)")
	}
	if ok, why := r.For(teamA).Allows(prodEU, secret); ok {
		t.Error("Secret in prod-eu allowed, though only deny-secrets reaches it")
	} else if why == "" {
		t.Error("no reason given")
	}
	if ok, _ := r.For(teamA).Allows(prodEU, cm); !ok {
		t.Error("ConfigMap in prod-eu refused")
	}
}
