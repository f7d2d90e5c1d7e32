package propagation_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// deployment creates Deployment name of replicas in f's team namespace on
// the hub.
func (f *testFleet) deployment(name string, replicas int32) {
	f.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
			},
		},
	}
	if err := f.hub.Client.Create(f.t.Context(), d); err != nil {
		f.t.Fatal(err)
	}
}

// deploymentIn returns member i's Deployment name in the team namespace,
// or nil.
func (f *testFleet) deploymentIn(i int, name string) *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	err := suite.MemberClients[i].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// rolledOut writes member i's Deployment name's status as its controller
// would once every replica is updated and available: envtest runs no
// controllers.
func (f *testFleet) rolledOut(i int, name string) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := f.deploymentIn(i, name)
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		}
		return suite.MemberClients[i].Status().Update(f.t.Context(), d)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// entry returns member's entry in p's status, if it is listed.
func entry(p *fleetv1alpha1.Propagation, member string) (fleetv1alpha1.MemberPropagationStatus, bool) {
	i := slices.IndexFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool { return m.Name == member })
	if i < 0 {
		return fleetv1alpha1.MemberPropagationStatus{}, false
	}
	return p.Status.Members[i], true
}

// listedAs returns a condition on a Propagation: member is listed with
// result and reason.
func listedAs(member string, result fleetv1alpha1.MemberResult, reason string) func(p *fleetv1alpha1.Propagation) bool {
	return func(p *fleetv1alpha1.Propagation) bool {
		e, ok := entry(p, member)
		return ok && e.Result == result && e.Reason == reason
	}
}

func deploymentWeb(p *fleetv1alpha1.Propagation) {
	p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}
}

// TestOverridesGiveEachMemberItsValues: replicas 3 in members labelled
// region=eu, 1 elsewhere, an image registry by region; drift of an
// overridden field is corrected to the overridden value; a rule that does
// not apply fails the members, naming it.
func TestOverridesGiveEachMemberItsValues(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod", "region": "eu"})
	f.register(1, "west", map[string]string{"env": "prod", "region": "us"})
	f.deployment("web", 1)
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		deploymentWeb(p)
		p.Spec.Overrides = []fleetv1alpha1.Override{
			{
				Name:      "eu-replicas",
				Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"region": "eu"})},
				Target:    fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
				JSONPatch: []fleetv1alpha1.JSONPatchOperation{{Op: "replace", Path: "/spec/replicas", Value: &apiextensionsv1.JSON{Raw: []byte("3")}}},
			},
			{
				Name:       "regional-registry",
				Target:     fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment"},
				MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"metadata":{"labels":{"member":"${MEMBER_NAME}"}},"spec":{"template":{"spec":{"containers":[{"name":"web","image":"${MEMBER_LABEL:region}.registry.example/web:1"}]}}}}`)},
			},
		}
	})
	for i, want := range []struct {
		replicas      int32
		image, member string
	}{{3, "eu.registry.example/web:1", "east"}, {1, "us.registry.example/web:1", "west"}} {
		poll.Until(t, "member "+want.member+" holds its own values", func() bool {
			d := f.deploymentIn(i, "web")
			return d != nil && ptr.Deref(d.Spec.Replicas, 0) == want.replicas && d.Spec.Template.Spec.Containers[0].Image == want.image && d.Labels["member"] == want.member
		})
	}
	if d := f.hubDeployment("web"); ptr.Deref(d.Spec.Replicas, 0) != 1 {
		t.Errorf("the hub's Deployment has %d replicas, want its own 1", ptr.Deref(d.Spec.Replicas, 0))
	}

	// Drift of an overridden field: corrected to the member's value.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := f.deploymentIn(0, "web")
		d.Spec.Replicas = ptr.To[int32](5)
		return suite.MemberClients[0].Update(t.Context(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east's replicas corrected to 3", func() bool {
		d := f.deploymentIn(0, "web")
		return d != nil && ptr.Deref(d.Spec.Replicas, 0) == 3
	})

	// A rule that does not apply fails every member it selects, naming
	// it; the copies stay as they are.
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = append(p.Spec.Overrides, fleetv1alpha1.Override{
			Name:      "broken",
			Target:    fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment"},
			JSONPatch: []fleetv1alpha1.JSONPatchOperation{{Op: "replace", Path: "/spec/nosuch/field", Value: &apiextensionsv1.JSON{Raw: []byte("1")}}},
		})
	})
	p := f.waitStatus("web", "both members failed by the broken rule", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Failed == 2 && listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonOverrideFailed)(p)
	})
	if e, _ := entry(p, "east"); !strings.Contains(e.Message, `"broken"`) || !strings.Contains(e.Message, "/spec/nosuch/field") {
		t.Errorf("east's message %q, want it to name the rule and the path", e.Message)
	}
	if d := f.deploymentIn(0, "web"); d == nil || ptr.Deref(d.Spec.Replicas, 0) != 3 {
		t.Errorf("east's copy changed or went while its override failed: %+v", d)
	}
}

func (f *testFleet) hubDeployment(name string) *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, d); err != nil {
		f.t.Fatal(err)
	}
	return d
}

// TestAvailableOnlyOnceTheMemberSaysSo: a Deployment applied in two
// members is Applied and not Available, and the Propagation not Ready,
// until each member's status says it rolled out.
func TestAvailableOnlyOnceTheMemberSaysSo(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.deployment("web", 2)
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"})
	})
	p := f.waitStatus("web", "applied in 2 members, available in none", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Applied == 2 && p.Status.Available == 0 && len(p.Status.Members) == 2
	})
	for _, name := range []string{"east", "west"} {
		e, _ := entry(p, name)
		if e.Result != fleetv1alpha1.ResultApplied || e.Available != metav1.ConditionFalse || e.Reason != fleetv1alpha1.ReasonNotAvailable ||
			!strings.HasPrefix(e.Message, "Deployment web: ") || e.LastConfirmedTime == nil {
			t.Errorf("%s's entry %+v, want Applied, not available, naming Deployment web, with the time it was confirmed", name, e)
		}
	}
	if ready(p) || meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationAvailable) {
		t.Errorf("conditions %+v: Ready or Available, with no copy available", p.Status.Conditions)
	}

	f.rolledOut(0, "web")
	f.waitStatus("web", "available in east only", func(p *fleetv1alpha1.Propagation) bool {
		_, listed := entry(p, "east")
		return p.Status.Available == 1 && !listed && listedAs("west", fleetv1alpha1.ResultApplied, fleetv1alpha1.ReasonNotAvailable)(p)
	})
	f.rolledOut(1, "web")
	p = f.waitStatus("web", "Ready and Available in both", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Available == 2
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationAvailable); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Available condition %+v, want True", c)
	}

	// A new generation in a member: not available until it is rolled out.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := f.hubDeployment("web")
		d.Spec.Template.Spec.Containers[0].Image = "registry.example/web:2"
		return f.hub.Client.Update(t.Context(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "the new image not available", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Available == 0 && listedAs("east", fleetv1alpha1.ResultApplied, fleetv1alpha1.ReasonNotAvailable)(p)
	})
}

// installCRD installs, in env, a CRD of kind in group, of scope, served
// as v1 with a status subresource, and uninstalls it when t ends. It
// returns the CRD's name.
func installCRD(t *testing.T, env *envtest.Environment, group, kind string, scope apiextensionsv1.ResourceScope) string {
	t.Helper()
	singular := strings.ToLower(kind)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: singular + "s." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: singular + "s", Singular: singular, Kind: kind, ListKind: kind + "List"},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	opts := envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}
	if _, err := envtest.InstallCRDs(env.Config, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := envtest.UninstallCRDs(env.Config, opts); err != nil {
			t.Error(err)
		}
	})
	return crd.Name
}

func widget(group, namespace, name string) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(group + "/v1")
	w.SetKind("Widget")
	w.SetNamespace(namespace)
	w.SetName(name)
	w.Object["spec"] = map[string]any{"size": int64(3)}
	return w
}

// TestCustomKindWaitsForItsCRDAndIsJudgedByCEL: a custom resource a
// member does not serve yet waits for its CRD (never a failure), is
// applied once the CRD is there, and is available when its
// availableWhen holds. A later wave waits for it.
func TestCustomKindWaitsForItsCRDAndIsJudgedByCEL(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	group := suite.Name("w") + ".test.fleetkube.io"
	installCRD(t, f.hub.Env, group, "Widget", apiextensionsv1.NamespaceScoped)
	f.register(0, "east", map[string]string{"env": "prod"})
	if err := f.hub.Client.Create(t.Context(), widget(group, f.team, "big")); err != nil {
		t.Fatal(err)
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{
			{APIVersion: group + "/v1", Kind: "Widget", Name: "big", AvailableWhen: `has(self.status) && self.status.phase == "Ready"`},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "web", Wave: 1},
		}
	})
	p := f.waitStatus("web", "east waits for the Widget kind", listedAs("east", fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonWaitingForKind))
	if p.Status.Failed != 0 {
		t.Errorf("%d members failed, want none: a kind not served yet waits", p.Status.Failed)
	}
	if f.copyIn(0, "web") != nil {
		t.Error("the ConfigMap of wave 1 was applied before the Widget of wave 0")
	}

	installCRD(t, suite.Members[0], group, "Widget", apiextensionsv1.NamespaceScoped)
	f.waitStatus("web", "east waits for the Widget to be available", listedAs("east", fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonWaitingForWave))
	if f.copyIn(0, "web") != nil {
		t.Error("the ConfigMap of wave 1 was applied before the Widget of wave 0 was available")
	}

	w := widget(group, f.team, "big")
	if err := suite.MemberClients[0].Get(t.Context(), client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	w.Object["status"] = map[string]any{"phase": "Ready"}
	if err := suite.MemberClients[0].Status().Update(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Available == 1 })
	f.waitCopy(0, "web", "applied", exists)
}

// TestRefusedAvailabilityRuleHoldsTheCopies: a Propagation whose rule
// could grow without bound says so as soon as the hub sums it up, and
// each member keeps its copy as it was: neither updated nor removed.
func TestRefusedAvailabilityRuleHoldsTheCopies(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	hub := f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)

	refused := `self.metadata.name` + strings.Repeat(`.replace('', 'xxxxxxxxxx')`, 8) + `.size() > 0`
	f.propagation("refused", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Members.Names = []string{"nobody"}
		p.Spec.Resources[0].AvailableWhen = refused
	})
	p := f.waitStatus("refused", "refused on the hub, with no member run", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonAvailabilityRuleRefused
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "over the limit of") {
		t.Errorf("Ready = %+v, want False, naming the limit", c)
	}

	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Resources[0].AvailableWhen = refused })
	f.waitStatus("web", "east refused", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonAvailabilityRuleRefused))
	hub.Data["color"] = "green" // would be applied, if not held
	if err := f.hub.Client.Update(t.Context(), hub); err != nil {
		t.Fatal(err)
	}
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Members.Selector.MatchLabels["env"] = "none" // would remove, if not held
	})
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Members.Selector.MatchLabels["env"] = "prod" })
	p = f.waitStatus("web", "east holds its copy, refused", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonAvailabilityRuleRefused))
	if e, _ := entry(p, "east"); !strings.Contains(e.Message, "the availableWhen of ConfigMap: refused") {
		t.Errorf("east says %q, want the refusal of the ConfigMap's availableWhen", e.Message)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonAvailabilityRuleRefused {
		t.Errorf("Ready = %+v, want False, AvailabilityRuleRefused", c)
	}
	if cm := f.copyIn(0, "web"); cm == nil || cm.Data["color"] != "blue" {
		t.Errorf("east's copy is %+v, want it held as it was (color blue)", cm)
	}
}

// TestRemovalGoesInReverseOrder: deleting the Propagation removes the
// copies of a later wave before those of an earlier one.
func TestRemovalGoesInReverseOrder(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.deployment("web", 1)
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "web", Wave: 1},
		}
	})
	f.waitStatus("web", "east waits for the Deployment", listedAs("east", fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonWaitingForWave))
	f.rolledOut(0, "web")
	f.waitCopy(0, "web", "applied once the Deployment is available", exists)

	since := time.Now()
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "removed", gone)
	poll.Until(t, "the Deployment removed", func() bool { return f.deploymentIn(0, "web") == nil })
	var order []string
	for _, w := range memberWrites(t, 0, since) {
		if w.Verb == "delete" && w.Namespace == f.team {
			order = append(order, w.Resource)
		}
	}
	if order = slices.Compact(order); !slices.Equal(order, []string{"configmaps", "deployments"}) {
		t.Errorf("deletions in order %v, want the ConfigMap of wave 1 first", order)
	}
}

// TestProgressDeadlineAndStaleMembers: a member whose Deployment does not
// roll out in time is Failed, ProgressDeadlineExceeded, with an Event; a
// member that is not Ready is counted neither applied nor available, and
// says since when it is not known.
func TestProgressDeadlineAndStaleMembers(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, &member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, DisconnectAfter: time.Hour})
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.registerKubeconfig("east", proxied, map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.deployment("web", 1)
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		deploymentWeb(p)
		p.Spec.ProgressDeadlineSeconds = ptr.To[int32](2)
	})
	p := f.waitStatus("web", "both past their deadline", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Failed == 2 && listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonProgressDeadlineExceeded)(p)
	})
	if e, _ := entry(p, "west"); e.Reason != fleetv1alpha1.ReasonProgressDeadlineExceeded || !strings.Contains(e.Message, "Deployment web") {
		t.Errorf("west's entry %+v, want ProgressDeadlineExceeded naming Deployment web", e)
	}
	poll.Until(t, "a Warning Event ProgressDeadlineExceeded for west", func() bool {
		return len(f.memberEvents("web", "west", corev1.EventTypeWarning, fleetv1alpha1.ReasonProgressDeadlineExceeded)) > 0
	})

	f.rolledOut(0, "web")
	f.rolledOut(1, "web")
	f.waitStatus("web", "Available in both", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Available == 2 })

	// east is cut off: what was known of it is stale, and not counted.
	proxy.Down()
	p = f.waitStatus("web", "east not counted", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Available == 1 && p.Status.Applied == 1 && listedAs("east", fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonMemberUnhealthy)(p)
	})
	e, _ := entry(p, "east")
	if e.Available != metav1.ConditionUnknown || e.LastConfirmedTime == nil || e.LastTransitionTime.IsZero() {
		t.Errorf("east's entry %+v, want availability Unknown, the time it was last confirmed, and since when", e)
	}
	if ready(p) {
		t.Error("Ready with a member not known")
	}
}

// envelope creates Envelope name in f's team namespace holding manifests.
func (f *testFleet) envelope(name string, manifests ...map[string]any) *fleetv1alpha1.Envelope {
	f.t.Helper()
	env := &fleetv1alpha1.Envelope{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: name}, Manifests: rawManifests(f.t, manifests...)}
	if err := f.hub.Client.Create(f.t.Context(), env); err != nil {
		f.t.Fatal(err)
	}
	return env
}

// rawManifests are manifests as an Envelope holds them.
func rawManifests(t *testing.T, manifests ...map[string]any) []runtime.RawExtension {
	t.Helper()
	raws := make([]runtime.RawExtension, len(manifests))
	for i, m := range manifests {
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		raws[i] = runtime.RawExtension{Raw: raw}
	}
	return raws
}

// TestEnvelopeIsLiveInMembersOnly: an Envelope's Deployment and ConfigMap
// are applied in the members and exist on the hub as data only; its
// manifests that break a rule fail the members, each named, and the
// others are applied; a manifest taken out of the Envelope is removed.
func TestEnvelopeIsLiveInMembersOnly(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	deployment := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "registry.example/web:1"}}},
			},
		},
	}
	settings := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings"}, "data": map[string]any{"color": "blue"}}
	credentials := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "kubeconfig", "labels": map[string]any{registry.KubeconfigLabel: "true"}}}
	elsewhere := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "elsewhere", "namespace": "kube-system"}}
	clusterScoped := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "admin-too"}}
	f.envelope("app", deployment, settings, credentials, elsewhere, clusterScoped)
	f.propagation("app", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"}}
	})
	poll.Until(t, "the Deployment and the ConfigMap in east", func() bool { return f.deploymentIn(0, "web") != nil && f.copyIn(0, "settings") != nil })
	if d := f.deploymentIn(0, "web"); d.Labels[fleetv1alpha1.EnvelopeLabel] != "app" {
		t.Errorf("the copy's labels %v, want %s naming the Envelope", d.Labels, fleetv1alpha1.EnvelopeLabel)
	}
	err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a Deployment web on the hub: %v; want none, the Envelope holds it as data", err)
	}
	p := f.waitStatus("app", "east failed by the manifests that break rules", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonRefused))
	if e, _ := entry(p, "east"); !strings.Contains(e.Message, "manifest 2 (Secret kubeconfig) of Envelope app is refused") || !strings.Contains(e.Message, "(and 2 more)") {
		t.Errorf("east's message %q, want the refused manifest named, and two more", e.Message)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Reason != fleetv1alpha1.ReasonRefused {
		t.Errorf("Ready %+v, want the hub's problem, Refused", c)
	}
	for _, o := range []struct{ kind, namespace, name string }{{"Secret", f.team, "kubeconfig"}, {"ConfigMap", "kube-system", "elsewhere"}} {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind(o.kind)
		if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: o.namespace, Name: o.name}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s/%s in east: %v; want none", o.kind, o.namespace, o.name, err)
		}
	}

	// Only the good manifests left, the ConfigMap taken out: it goes.
	env := &fleetv1alpha1.Envelope{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "app"}, env); err != nil {
		t.Fatal(err)
	}
	env.Manifests = env.Manifests[:1]
	if err := f.hub.Client.Update(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "settings", "removed with its manifest", gone)
	f.rolledOut(0, "web")
	p = f.waitStatus("app", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Available == 1 })
	if !slices.Contains(p.Status.Kinds, fleetv1alpha1.KindReference{APIVersion: "apps/v1", Kind: "Deployment"}) {
		t.Errorf("status.kinds %v, want the manifests' kinds", p.Status.Kinds)
	}
}

// TestProgressDeadlineOutlivesARestart: a manager restarted while a
// member converges counts its deadline from when the status says the
// member began, not from its own start.
func TestProgressDeadlineOutlivesARestart(t *testing.T) {
	t.Parallel()
	const deadline = 10 * time.Second
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.deployment("web", 1)
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		deploymentWeb(p)
		p.Spec.ProgressDeadlineSeconds = ptr.To(int32(deadline / time.Second))
	})
	p := f.waitStatus("web", "east not available", listedAs("east", fleetv1alpha1.ResultApplied, fleetv1alpha1.ReasonNotAvailable))
	began, _ := entry(p, "east")
	f.stop()
	time.Sleep(time.Until(began.LastTransitionTime.Add(deadline + time.Second)))
	f.start(nil)
	restarted := time.Now()
	f.waitStatus("web", "east past its deadline", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonProgressDeadlineExceeded))
	if took := time.Since(restarted); took > deadline*7/10 {
		t.Errorf("the deadline fired %s after the restart, want well within %s: it began before the restart", took.Round(time.Millisecond), deadline)
	}
}
