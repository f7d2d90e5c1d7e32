package tenancy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

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

var _ = metav1.Now
