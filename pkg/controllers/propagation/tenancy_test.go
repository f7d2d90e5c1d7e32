package propagation_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/deploy"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// newTenancyFleet starts a fleet on a hub of the test's own whose
// controller runs with tenancy mode; health, if set, says how members
// are probed.
func newTenancyFleet(t *testing.T, mode string, health *member.HealthOptions) *testFleet {
	t.Helper()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.tenancy = mode
	f.start(health)
	return f
}

// tenancyPolicy writes a TenancyPolicy letting the fleet's team namespace
// reach members with kinds, and returns its name; it is deleted when the
// test ends.
func (f *testFleet) tenancyPolicy(members []string, kinds fleetv1alpha1.KindRules) string {
	f.t.Helper()
	p := &fleetv1alpha1.TenancyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: suite.Name("tenancy")},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{f.team}},
			Members:    fleetv1alpha1.ReachableMembers{Names: members},
			Kinds:      kinds,
		},
	}
	if err := f.hub.Client.Create(f.t.Context(), p); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = client.IgnoreNotFound(f.hub.Client.Delete(f.t.Context(), p))
	})
	return p.Name
}

// editTenancyPolicy applies edit to TenancyPolicy name.
func (f *testFleet) editTenancyPolicy(name string, edit func(*fleetv1alpha1.TenancyPolicy)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &fleetv1alpha1.TenancyPolicy{}
		if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Name: name}, p); err != nil {
			return err
		}
		edit(p)
		return f.hub.Client.Update(f.t.Context(), p)
	})
}

// memberHasNamespace reports whether member i holds the team namespace.
func (f *testFleet) memberHasNamespace(i int) bool {
	f.t.Helper()
	err := suite.MemberClients[i].Get(f.t.Context(), types.NamespacedName{Name: f.team}, &corev1.Namespace{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

func excludedNames(p *fleetv1alpha1.Propagation) []string {
	var names []string
	for _, e := range p.Status.ExcludedMembers {
		names = append(names, e.Name)
	}
	return names
}

// TestTenantNamespaceReachesOnlyItsMembers: with tenancy enforced, a
// Propagation selecting three members copies only into the one a
// TenancyPolicy lets its namespace reach; the others get no copy and not
// even the namespace, and status names them excluded. A namespace with no
// policy reaches nothing, and is not Ready; widened, the policy lets the
// copies in.
func TestTenantNamespaceReachesOnlyItsMembers(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.register(2, "north", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)

	f.waitStatus("web", "not Ready: no policy lets the namespace reach anyone", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonNotReachable && p.Status.Excluded == 3 && p.Status.Selected == 0
	})

	policy := f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{})
	p := f.waitStatus("web", "Ready in east, west and north excluded", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Selected == 1 && p.Status.Applied == 1 && p.Status.Excluded == 2
	})
	f.waitCopy(0, "web", "copied into east", exists)
	if got := excludedNames(p); !slices.Equal(got, []string{"north", "west"}) {
		t.Errorf("status.excludedMembers = %v, want north and west", got)
	}
	for _, e := range p.Status.ExcludedMembers {
		if e.Reason != fleetv1alpha1.ReasonNotReachable || !strings.Contains(e.Message, policy) {
			t.Errorf("excluded %s: %s %q, want NotReachable naming %s", e.Name, e.Reason, e.Message, policy)
		}
	}
	for i := 1; i <= 2; i++ {
		if f.copyIn(i, "web") != nil || f.memberHasNamespace(i) {
			t.Errorf("member %d, which the namespace may not reach, holds its copy or its namespace", i)
		}
	}

	if err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) { tp.Spec.Members.Names = append(tp.Spec.Members.Names, "west") }); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(1, "web", "copied into west once the policy lets it", exists)
	p = f.waitStatus("web", "Ready in east and west", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Applied == 2 && p.Status.Excluded == 1
	})
	if f.copyIn(2, "web") != nil || f.memberHasNamespace(2) {
		t.Error("north, still out of reach, holds the copy or the namespace")
	}
}

// TestKindTenancyRefusesIsNotApplied: a kind the policy denies is not
// applied, per copy, KindNotAllowed, and the rest of the Propagation is;
// a kind that was allowed and is denied later is removed as a deselected
// copy is, and the copies still allowed are not touched.
func TestKindTenancyRefusesIsNotApplied(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "settings", Labels: map[string]string{"app": "web"}}, StringData: map[string]string{"mode": "on"}}
	if err := f.hub.Client.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.configMap("other", map[string]string{"color": "red"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Secret", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})})
	})
	policy := f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{})
	f.waitStatus("web", "Ready with the Secret allowed", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })
	readSecret := func() *corev1.Secret {
		s := &corev1.Secret{}
		err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "settings"}, s)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if readSecret() == nil {
		t.Fatal("the Secret, allowed, was not copied")
	}
	before := f.copyIn(0, "web")

	if err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) {
		tp.Spec.Kinds.Deny = []fleetv1alpha1.KindRule{{Group: "", Kind: "Secret"}}
	}); err != nil {
		t.Fatal(err)
	}
	p := f.waitStatus("web", "east failed, KindNotAllowed", memberFailed("east", fleetv1alpha1.ReasonKindNotAllowed))
	i := slices.IndexFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool { return m.Name == "east" })
	if msg := p.Status.Members[i].Message; !strings.Contains(msg, "Secret settings") || !strings.Contains(msg, policy) {
		t.Errorf("east's message %q: want the Secret and the policy named", msg)
	}
	poll.Until(t, "the Secret's copy, now denied, removed", func() bool { return readSecret() == nil })
	after := f.copyIn(0, "web")
	if after == nil || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap's copy, still allowed, was touched: resourceVersion %s, was %s", after.GetResourceVersion(), before.ResourceVersion)
	}
	if f.copyIn(0, "other") == nil {
		t.Error("the other ConfigMap lost its copy")
	}
}

// TestNarrowedPolicyRemovalIsOwedWhileTheMemberIsDown: a policy narrowed
// while a member is down deselects it as spec.members would: its removal
// is owed, its copy kept, and done once the member is back, with a
// Warning Event MembersExcluded; the member still reached is not touched.
func TestNarrowedPolicyRemovalIsOwedWhileTheMemberIsDown(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, &member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, DisconnectAfter: time.Hour})
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.registerKubeconfig("east", proxied, map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	policy := f.tenancyPolicy([]string{"east", "west"}, fleetv1alpha1.KindRules{})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	west := f.copyIn(1, "web")

	proxy.Down()
	poll.Until(t, "east Unhealthy", func() bool { s, _ := f.mgr.MemberState("east"); return s == fleetv1alpha1.MemberStateUnhealthy })
	if err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) { tp.Spec.Members.Names = []string{"west"} }); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "east excluded, its removal owed", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Excluded == 1 && p.Status.PendingDeletions == 1 && p.Status.Selected == 1 &&
			slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
				return m.Name == "east" && m.Result == fleetv1alpha1.ResultDeletionOwed
			})
	})
	if f.copyIn(0, "web") == nil {
		t.Fatal("east's copy is gone while east was down: the test proves nothing")
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "removed once east is back", gone)
	poll.Until(t, "a Warning Event MembersExcluded naming east", func() bool {
		events := &eventsv1.EventList{}
		if err := f.hub.Client.List(t.Context(), events, client.InNamespace(f.team)); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "web" && e.Type == corev1.EventTypeWarning && e.Reason == fleetv1alpha1.ReasonMembersExcluded && strings.Contains(e.Note, "east")
		})
	})
	f.waitStatus("web", "Ready in west, nothing owed", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.PendingDeletions == 0 && p.Status.Applied == 1
	})
	if now := f.copyIn(1, "web"); now == nil || now.ResourceVersion != west.ResourceVersion {
		t.Error("west's copy, still reached, was touched")
	}
}

// TestTenancyPolicyThatDoesNotParseHolds: a policy for the namespace
// whose members selector does not parse (written under an older CRD that
// did not check selectors) puts the namespace in doubt: the member keeps
// its copy, nothing is owed, Ready is False, TenancyUnknown; fixed, the
// Propagation goes on.
func TestTenancyPolicyThatDoesNotParseHolds(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	policy := f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)

	f.installTenancyPolicyCRD(withoutSelectorChecks)
	t.Cleanup(func() { f.installTenancyPolicyCRD(nil) })
	poll.Until(t, "a members selector that does not parse written under the older CRD", func() bool {
		err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) {
			tp.Spec.Members.Selector = &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod west"}}}}
		})
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatal(err)
		}
		return err == nil
	})
	f.installTenancyPolicyCRD(nil)

	p := f.waitStatus("web", "Ready=False, TenancyUnknown, east held", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonTenancyUnknown &&
			slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
				return m.Name == "east" && m.Reason == fleetv1alpha1.ReasonTenancyUnknown
			})
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); !strings.Contains(c.Message, policy) {
		t.Errorf("Ready's message %q: want the policy named", c.Message)
	}
	if f.copyIn(0, "web") == nil {
		t.Fatal("east lost its copy to a policy that does not parse")
	}
	if p.Status.PendingDeletions != 0 || p.Status.Excluded != 0 {
		t.Errorf("pendingDeletions %d, excluded %d: a policy that does not parse owes and excludes nothing", p.Status.PendingDeletions, p.Status.Excluded)
	}

	if err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) { tp.Spec.Members.Selector = nil }); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "Ready once the policy is fixed", ready)
}

// TestUpgradedFleetKeepsEveryCopy: a fleet whose identity predates
// tenancy (no tenancy key), run with tenancy Auto or Off, with no
// TenancyPolicy at all, copies as before: every member reached, nothing
// excluded.
func TestUpgradedFleetKeepsEveryCopy(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{fleetv1alpha1.TenancyAuto, fleetv1alpha1.TenancyOff} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
			identity := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: fleetv1alpha1.FleetIdentityName},
				Data:       map[string]string{fleetv1alpha1.FleetIdentityKey: string(uuid.NewUUID())},
			}
			if err := f.hub.Client.Create(t.Context(), identity); err != nil {
				t.Fatal(err)
			}
			f.tenancy = mode
			f.start(nil)
			f.register(0, "east", map[string]string{"env": "prod"})
			f.register(1, "west", map[string]string{"env": "prod"})
			f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
			f.propagation("web", nil)
			p := f.waitStatus("web", "Ready in both members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
			if p.Status.Excluded != 0 || len(p.Status.ExcludedMembers) != 0 {
				t.Errorf("excluded %d %v with tenancy %s", p.Status.Excluded, p.Status.ExcludedMembers, mode)
			}
		})
	}
}

// installTenancyPolicyCRD installs deploy/crd's TenancyPolicy CRD on the
// fleet's hub, its schema edited by edit when set.
func (f *testFleet) installTenancyPolicyCRD(edit func(*apiextensionsv1.JSONSchemaProps)) {
	f.t.Helper()
	crds, err := deploy.CRDs()
	if err != nil {
		f.t.Fatal(err)
	}
	i := slices.IndexFunc(crds, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return crd.Spec.Names.Kind == "TenancyPolicy"
	})
	if i < 0 {
		f.t.Fatal("deploy/crd holds no TenancyPolicy CRD")
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

// TestKindRulesThatMatchNothingAreRefused: kind rules match exactly and
// case-sensitively, so the API server refuses a rule that could match
// nothing (the group "core", a resource's name for a kind), and takes
// those that match as manifests say them.
func TestKindRulesThatMatchNothingAreRefused(t *testing.T) {
	t.Parallel()
	hub := suite.OwnHubs(t, 1)[0]
	create := func(rule fleetv1alpha1.KindRule) error {
		return hub.Client.Create(t.Context(), &fleetv1alpha1.TenancyPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: suite.Name("tenancy")},
			Spec: fleetv1alpha1.TenancyPolicySpec{
				Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team-a"}},
				Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
				Kinds:      fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{rule}},
			},
		}, client.DryRunAll)
	}
	// A test before on this hub may have put back deploy/crd's CRD: wait
	// for its schema.
	poll.Until(t, "the hub validating kind rules", func() bool {
		return apierrors.IsInvalid(create(fleetv1alpha1.KindRule{Group: "core"}))
	})
	for _, c := range []struct {
		rule fleetv1alpha1.KindRule
		says string
	}{
		{fleetv1alpha1.KindRule{Group: "core", Kind: "Secret"}, `the core group is "" (empty), not core`},
		{fleetv1alpha1.KindRule{Group: "", Kind: "secrets"}, "spec.kinds.deny[0].kind"},
		{fleetv1alpha1.KindRule{Group: "Apps", Kind: "Deployment"}, "spec.kinds.deny[0].group"},
		{fleetv1alpha1.KindRule{Group: "apps/v1", Kind: "Deployment"}, "spec.kinds.deny[0].group"},
		{fleetv1alpha1.KindRule{Group: "", Kind: "Secret.v1"}, "spec.kinds.deny[0].kind"},
	} {
		err := create(c.rule)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want refused, saying %q", c.rule, err, c.says)
		}
	}
	for _, rule := range []fleetv1alpha1.KindRule{
		{Group: "", Kind: "Secret"}, {Group: "*", Kind: "*"}, {Group: "apps"}, {Group: "rbac.authorization.k8s.io", Kind: "Role"}, {Kind: "ConfigMap"},
	} {
		if err := create(rule); err != nil {
			t.Errorf("%+v refused: %v", rule, err)
		}
	}
}
