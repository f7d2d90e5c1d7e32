package propagation_test

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/deploy"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/shard"
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

// secretIn reads Secret name of the team namespace in member i, nil
// when there is none.
func (f *testFleet) secretIn(i int, name string) *corev1.Secret {
	f.t.Helper()
	s := &corev1.Secret{}
	err := suite.MemberClients[i].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// warnedOf reports whether a Warning Event of reason on Propagation
// name mentions every one of words.
func (f *testFleet) warnedOf(name, reason string, words ...string) bool {
	f.t.Helper()
	events := &eventsv1.EventList{}
	if err := f.hub.Client.List(f.t.Context(), events, client.InNamespace(f.team)); err != nil {
		f.t.Fatal(err)
	}
	return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
		if e.Regarding.Name != name || e.Type != corev1.EventTypeWarning || e.Reason != reason {
			return false
		}
		for _, w := range words {
			if !strings.Contains(e.Note, w) {
				return false
			}
		}
		return true
	})
}

// TestEnvelopeManifestOfADeniedKindIsNotApplied: an Envelope holding a Secret and a
// ConfigMap, the policy denying Secrets: the ConfigMap is applied, the
// Secret is not, and the member fails KindNotAllowed naming it.
func TestEnvelopeManifestOfADeniedKindIsNotApplied(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{Deny: []fleetv1alpha1.KindRule{{Group: "", Kind: "Secret"}}})
	f.envelope("app",
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings"}, "data": map[string]any{"color": "blue"}},
		map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "token"}, "stringData": map[string]any{"token": "s3cr3t-value"}},
	)
	f.propagation("app", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"}}
	})
	f.waitCopy(0, "settings", "the Envelope's ConfigMap applied", exists)
	p := f.waitStatus("app", "east failed KindNotAllowed", memberFailed("east", fleetv1alpha1.ReasonKindNotAllowed))
	if e, _ := entry(p, "east"); !strings.Contains(e.Message, "Secret token") {
		t.Errorf("east's message %q: want the Secret named", e.Message)
	}
	if ready(p) {
		t.Error("Ready with a manifest refused")
	}
	if f.secretIn(0, "token") != nil {
		t.Error("the Envelope's Secret, a kind the policy denies, is in east")
	}
	b, _ := json.Marshal(p.Status)
	if strings.Contains(string(b), "s3cr3t-value") {
		t.Error("the Secret's value is in the status")
	}
}

// TestOverrideCannotTurnAnAllowedKindIntoADeniedOne: an override that turns an allowed
// ConfigMap into a denied Secret gives the member no Secret.
func TestOverrideCannotTurnAnAllowedKindIntoADeniedOne(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{Allow: []fleetv1alpha1.KindRule{{Group: "", Kind: "ConfigMap"}}})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:      "to-secret",
			Target:    fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"},
			JSONPatch: []fleetv1alpha1.JSONPatchOperation{{Op: "replace", Path: "/kind", Value: &apiextensionsv1.JSON{Raw: []byte(`"Secret"`)}}},
		}}
	})
	p := f.waitStatus("web", "east failed", func(p *fleetv1alpha1.Propagation) bool {
		e, ok := entry(p, "east")
		return ok && e.Result == fleetv1alpha1.ResultFailed
	})
	e, _ := entry(p, "east")
	t.Logf("east: %s %q", e.Reason, e.Message)
	if f.secretIn(0, "web") != nil {
		t.Error("a Secret web, made by an override from an allowed ConfigMap, is in east")
	}
	if ready(p) {
		t.Error("Ready though nothing was applied")
	}
}

// TestNamespaceRelabelledOutOfPolicyLosesItsCopies: a policy that selects the
// namespace by label; the namespace relabelled out of it: its copies go,
// nothing is created again, a Warning Event MembersExcluded is told,
// status names the member excluded; relabelled back, the copy returns.
func TestNamespaceRelabelledOutOfPolicyLosesItsCopies(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	label := func(v string) {
		ns := &corev1.Namespace{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Name: f.team}, ns); err != nil {
			t.Fatal(err)
		}
		before := ns.DeepCopy()
		metav1.SetMetaDataLabel(&ns.ObjectMeta, "tenant-tier", v)
		if err := f.hub.Client.Patch(t.Context(), ns, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}
	label("gold")
	pol := &fleetv1alpha1.TenancyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: suite.Name("tenancy")},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"tenant-tier": "gold", testFleetLabel: fleetv1alpha1.LabelValue(f.namespace)}}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{"east"}},
		},
	}
	// The selector names this fleet too, so that no other test's namespace matches.
	ns := &corev1.Namespace{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Name: f.team}, ns); err != nil {
		t.Fatal(err)
	}
	before := ns.DeepCopy()
	metav1.SetMetaDataLabel(&ns.ObjectMeta, testFleetLabel, f.namespace)
	if err := f.hub.Client.Patch(t.Context(), ns, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Client.Create(t.Context(), pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(f.hub.Client.Delete(f.t.Context(), pol)) })
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in east", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })

	label("silver")
	f.waitCopy(0, "web", "removed once the namespace is relabelled out", gone)
	p := f.waitStatus("web", "east excluded, not Ready", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Excluded == 1 && !ready(p)
	})
	if got := excludedNames(p); !slices.Equal(got, []string{"east"}) || !strings.Contains(p.Status.ExcludedMembers[0].Message, f.team) {
		t.Errorf("excludedMembers %+v, want east, naming the namespace", p.Status.ExcludedMembers)
	}
	poll.Until(t, "a Warning Event MembersExcluded naming east", func() bool { return f.warnedOf("web", fleetv1alpha1.ReasonMembersExcluded, "east") })
	label("gold")
	f.waitCopy(0, "web", "copied again once relabelled back", exists)
}

// TestDeletedPolicyNeverWidens: two policies reach east, one west;
// deleting the one that reaches west removes west's copy only: east's
// copy is untouched; deleting the last leaves nothing reached.
func TestDeletedPolicyNeverWidens(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	eastOnly := f.tenancyPolicy([]string{"east"}, fleetv1alpha1.KindRules{})
	both := f.tenancyPolicy([]string{"east", "west"}, fleetv1alpha1.KindRules{})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in 2", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	east := f.copyIn(0, "web")
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.TenancyPolicy{ObjectMeta: metav1.ObjectMeta{Name: both}}); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(1, "web", "west's copy removed", gone)
	f.waitStatus("web", "Ready in east, west excluded", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Applied == 1 && p.Status.Excluded == 1
	})
	if now := f.copyIn(0, "web"); now == nil || now.ResourceVersion != east.ResourceVersion {
		t.Error("east's copy, still reached, was touched")
	}
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.TenancyPolicy{ObjectMeta: metav1.ObjectMeta{Name: eastOnly}}); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "east's copy removed once no policy is left", gone)
	p := f.waitStatus("web", "not Ready, 2 excluded", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Excluded == 2 })
	if ready(p) {
		t.Error("Ready with nothing deployed")
	}
}

// TestProgressiveRolloutSkipsExcludedMembers: Progressive, one member
// at a time; north, which no policy reaches, is given no revision, holds
// no slot: a new revision rolls out to east and west. Narrowed mid-way,
// west loses its revision and its copy, and east is left as it is.
func TestProgressiveRolloutSkipsExcludedMembers(t *testing.T) {
	t.Parallel()
	f := newTenancyFleet(t, fleetv1alpha1.TenancyEnforce, nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.register(2, "north", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	policy := f.tenancyPolicy([]string{"east", "west"}, fleetv1alpha1.KindRules{})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: 0},
		}}
	})
	noNorth := func(p *fleetv1alpha1.Propagation) {
		t.Helper()
		if p.Status.Rollout == nil {
			return
		}
		for _, g := range p.Status.Rollout.Members {
			if slices.Contains(g.Names, "north") {
				t.Errorf("north, excluded, is given revision %d", g.Revision)
			}
		}
		if slices.Contains(p.Status.Rollout.Draining, "north") {
			t.Error("north, excluded, holds the drain budget")
		}
	}
	p := f.waitStatus("web", "Ready in east and west", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	noNorth(p)
	cm := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "green"
	if err := f.hub.Client.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "east green", dataIs("color", "green"))
	f.waitCopy(1, "web", "west green", dataIs("color", "green"))
	p = f.waitStatus("web", "Ready at revision 2", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Applied == 2 && p.Status.Revision >= 2
	})
	noNorth(p)
	if f.copyIn(2, "web") != nil || f.memberHasNamespace(2) {
		t.Error("north holds a copy or the namespace")
	}

	// A third revision, and the policy narrowed to east at once.
	cm = &corev1.ConfigMap{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "red"
	if err := f.hub.Client.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	if err := f.editTenancyPolicy(policy, func(tp *fleetv1alpha1.TenancyPolicy) { tp.Spec.Members.Names = []string{"east"} }); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(1, "web", "west's copy removed", gone)
	f.waitCopy(0, "web", "east red", dataIs("color", "red"))
	p = f.waitStatus("web", "Ready in east alone", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Applied == 1 && p.Status.Excluded == 2
	})
	for _, g := range p.Status.Rollout.Members {
		if slices.Contains(g.Names, "west") || slices.Contains(g.Names, "north") {
			t.Errorf("an excluded member keeps revision %d: %v", g.Revision, g.Names)
		}
	}
}

// TestUnreadablePoliciesHoldThenRecover: a fleet that ran with
// tenancy Off restarts Enforce on a hub where the TenancyPolicies cannot
// be listed (their CRD is gone): east keeps its copy, nothing is owed or
// excluded, Ready is False TenancyUnknown; once they can be read and one
// reaches east, it is Ready again and its copy never went.
func TestUnreadablePoliciesHoldThenRecover(t *testing.T) {
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.tenancy = fleetv1alpha1.TenancyOff
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in east", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })
	before := f.copyIn(0, "web")
	f.stop()

	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(f.hub.Env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "tenancypolicies.fleet.fleetkube.io"}}
	if err := crds.Delete(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the TenancyPolicy CRD gone", func() bool {
		return apierrors.IsNotFound(crds.Get(t.Context(), client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{}))
	})
	f.tenancy = fleetv1alpha1.TenancyEnforce
	f.start(nil)
	// East's result, Failed TenancyUnknown, is its member run's: the run
	// that would have removed the copy has happened.
	p := f.waitStatus("web", "Ready=False TenancyUnknown, east's run held", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		held := slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
			return m.Result == fleetv1alpha1.ResultFailed && m.Reason == fleetv1alpha1.ReasonTenancyUnknown
		})
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonTenancyUnknown && held
	})
	if now := f.copyIn(0, "web"); now == nil || now.ResourceVersion != before.ResourceVersion {
		t.Errorf("east's copy removed or touched while the policies cannot be read: %v", now)
	}
	p = f.waitStatus("web", "still TenancyUnknown", func(p *fleetv1alpha1.Propagation) bool { return true })
	if p.Status.Excluded != 0 || p.Status.PendingDeletions != 0 {
		t.Errorf("excluded %d, pendingDeletions %d while policies cannot be read", p.Status.Excluded, p.Status.PendingDeletions)
	}

	f.installTenancyPolicyCRD(nil)
	poll.Until(t, "a policy written once the CRD is back", func() bool {
		err := f.hub.Client.Create(t.Context(), &fleetv1alpha1.TenancyPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: suite.Name("tenancy")},
			Spec: fleetv1alpha1.TenancyPolicySpec{
				Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{f.team}},
				Members:    fleetv1alpha1.ReachableMembers{Names: []string{"east"}},
			},
		})
		return err == nil
	})
	t.Cleanup(func() {
		last := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(context.Background(), types.NamespacedName{Namespace: f.team, Name: "web"}, last); err == nil {
			t.Logf("last Ready: %+v", meta.FindStatusCondition(last.Status.Conditions, fleetv1alpha1.PropagationReady))
		}
	})
	f.waitStatus("web", "Ready once the policies are read", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })
	if now := f.copyIn(0, "web"); now == nil {
		t.Error("east lost its copy")
	}
}

// TestReplicaWithTenancyOffFollowsAPeerThatEnforces: two replicas share
// a fleet, one run --tenancy=Enforce, the other --tenancy=Off (a botched
// rollout of the flag). The strictest mode wins: the namespace has no
// policy, so no member receives a copy, whichever replica owns it.
func TestReplicaWithTenancyOffFollowsAPeerThatEnforces(t *testing.T) {
	t.Parallel()
	hub := suite.OwnHubs(t, 1)[0]
	f := prepareFleet(t, hub, suite.Name("fleet"), suite.Name("team"))
	start := func(name, mode string) *fleettest.Fleet {
		j, err := journal.Open(t.TempDir(), journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.Close() })
		return suite.StartFleet(t, fleettest.FleetOptions{
			Hub:       hub,
			Namespace: f.namespace,
			Configure: func(o *fleet.Options) {
				o.Shard = &shard.Options{Name: name, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 250 * time.Millisecond}
			},
			Setup: func(m *fleet.Manager) error {
				return propagation.Add(m, propagation.Options{Journal: j, Tenancy: mode})
			},
		})
	}
	replicas := map[string]*fleettest.Fleet{"strict": start("strict", fleetv1alpha1.TenancyEnforce), "lax": start("lax", fleetv1alpha1.TenancyOff)}
	var names []string
	for i, kc := range suite.Kubeconfigs {
		name := "m" + string(rune('0'+i))
		names = append(names, name)
		replicas["strict"].Register(t, name, kc, map[string]string{testFleetLabel: f.namespace}, map[string]string{"env": "prod"})
	}
	owner := func(m string) string {
		for n, r := range replicas {
			if r.Manager.Owns(m) {
				return n
			}
		}
		return ""
	}
	poll.Until(t, "every member owned", func() bool {
		return !slices.ContainsFunc(names, func(m string) bool { return owner(m) == "" })
	})
	for _, m := range names {
		t.Logf("member %s is owned by replica %s", m, owner(m))
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	// Evidence that each replica decided for its members: its shard of
	// the status, at the Propagation's generation, selects none of them
	// (a replica that applied its own Off would select them all).
	poll.Until(t, "each replica's shard selecting none of its members", func() bool {
		p := &fleetv1alpha1.Propagation{}
		if err := hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
			return false
		}
		for _, m := range names {
			i := slices.IndexFunc(p.Status.Shards, func(s fleetv1alpha1.PropagationShard) bool { return s.Replica == owner(m) })
			if i < 0 || p.Status.Shards[i].ObservedGeneration != p.Generation || p.Status.Shards[i].Selected != 0 {
				return false
			}
		}
		return true
	})
	for i, m := range names {
		if f.copyIn(i, "web") != nil {
			t.Errorf("member %s (owned by replica %s) holds a copy of a namespace no policy reaches", m, owner(m))
		}
	}
}
