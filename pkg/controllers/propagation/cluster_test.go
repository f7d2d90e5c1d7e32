package propagation_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// clusterPropagation creates ClusterPropagation name, selecting the
// test's members, with resources.
func (f *testFleet) clusterPropagation(name string, resources ...fleetv1alpha1.ResourceSelector) {
	f.t.Helper()
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: resources,
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod", testFleetLabel: f.namespace})},
		},
	}
	if err := f.hub.Client.Create(f.t.Context(), cp); err != nil {
		f.t.Fatal(err)
	}
}

// waitClusterStatus waits until ClusterPropagation name's status
// satisfies cond.
func (f *testFleet) waitClusterStatus(name, what string, cond func(p *fleetv1alpha1.PropagationStatus) bool) *fleetv1alpha1.ClusterPropagation {
	f.t.Helper()
	cp := &fleetv1alpha1.ClusterPropagation{}
	poll.Until(f.t, "ClusterPropagation "+name+": "+what, func() bool {
		err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Name: name}, cp)
		return err == nil && cp.Status.ObservedGeneration == cp.Generation && cond(&cp.Status)
	})
	return cp
}

// memberObject returns member 0's object of apiVersion and kind named
// name (cluster-scoped), or nil.
func memberObject(t *testing.T, apiVersion, kind, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Name: name}, obj)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestClusterPropagationAppliesABaselineInOrder: a CRD, a ClusterRole and
// its binding, a Namespace and a custom resource of the CRD are applied
// to the member in order, the CRD Established before its resource, never
// failing for a kind not served; a Propagation then fills the Namespace
// (a ResourceQuota); deleting the ClusterPropagation removes the copies
// in reverse order. A namespaced kind is refused.
func TestClusterPropagationAppliesABaselineInOrder(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	group := suite.Name("g") + ".test.fleetkube.io"
	crdName := installCRD(t, f.hub.Env, group, "Gadget", apiextensionsv1.ClusterScoped)
	base, reader := suite.Name("base"), suite.Name("reader")
	gadget := &unstructured.Unstructured{}
	gadget.SetAPIVersion(group + "/v1")
	gadget.SetKind("Gadget")
	gadget.SetName("big")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: reader}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "readers"}},
	}
	for _, obj := range []client.Object{gadget, role, binding, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: base}}} {
		if err := f.hub.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.hub.Client.Delete(t.Context(), obj) })
	}
	since := time.Now()
	f.clusterPropagation("baseline",
		fleetv1alpha1.ResourceSelector{APIVersion: group + "/v1", Kind: "Gadget", Name: "big"},
		fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: reader},
		fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: reader},
		fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Namespace", Name: base},
		fleetv1alpha1.ResourceSelector{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: crdName},
	)
	cp := f.waitClusterStatus("baseline", "Ready and Available in east", func(st *fleetv1alpha1.PropagationStatus) bool {
		return st.Available == 1 && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady)
	})
	if cp.Status.Failed != 0 || len(cp.Status.Members) != 0 {
		t.Errorf("status %+v, want no member failed or listed", cp.Status)
	}
	for _, o := range []struct{ apiVersion, kind, name string }{
		{"apiextensions.k8s.io/v1", "CustomResourceDefinition", crdName}, {group + "/v1", "Gadget", "big"},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", reader}, {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", reader}, {"v1", "Namespace", base},
	} {
		obj := memberObject(t, o.apiVersion, o.kind, o.name)
		if obj == nil || obj.GetLabels()[fleetv1alpha1.PropagationLabel] != "baseline" {
			t.Errorf("east's %s %s: %v, want a copy of baseline", o.kind, o.name, obj)
		}
	}
	writes := memberWrites(t, 0, since)
	// The member is shared: only this test's objects count.
	first := func(resource, name string) int {
		return slices.IndexFunc(writes, func(w controlplane.Write) bool { return w.Resource == resource && w.Name == name && w.Verb != "delete" })
	}
	if crd, g := first("customresourcedefinitions", crdName), first("gadgets", "big"); crd < 0 || g < crd {
		t.Errorf("writes in order %v: want the CRD applied before its Gadget", writes)
	}
	if ns, r := first("namespaces", base), first("clusterroles", reader); ns < 0 || r < ns {
		t.Errorf("writes in order %v: want the Namespace applied before the ClusterRole", writes)
	}
	if warnings := clusterWarnings(t, f, "baseline"); len(warnings) > 0 {
		t.Errorf("Warning Events %v, want none: a kind not served yet waits", warnings)
	}

	// The Namespace's content, by a Propagation of its namespace.
	if err := f.hub.Client.Create(t.Context(), &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: base, Name: "quota"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}},
	}); err != nil {
		t.Fatal(err)
	}
	quota := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: base, Name: "quota"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ResourceQuota", Name: "quota"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{testFleetLabel: f.namespace})},
		},
	}
	if err := f.hub.Client.Create(t.Context(), quota); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ResourceQuota in east's copy of the Namespace", func() bool {
		return suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: base, Name: "quota"}, &corev1.ResourceQuota{}) == nil
	})
	if err := f.hub.Client.Delete(t.Context(), quota); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ResourceQuota removed", func() bool {
		return apierrors.IsNotFound(suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: base, Name: "quota"}, &corev1.ResourceQuota{}))
	})

	// A namespaced kind is refused.
	f.clusterPropagation("namespaced", fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ConfigMap", Name: "web"})
	f.waitClusterStatus("namespaced", "refused", func(st *fleetv1alpha1.PropagationStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonNamespacedKind
	})

	// Trust: the fleet namespace is never copied, and an object the
	// member holds that is no copy is left alone.
	theirs := suite.Name("theirs")
	for _, c := range []client.Client{f.hub.Client, suite.MemberClients[0]} {
		if err := c.Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: theirs}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = suite.MemberClients[0].Delete(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: theirs}})
	})
	f.clusterPropagation("trust",
		fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Namespace", Name: f.namespace},
		fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: theirs},
	)
	trust := f.waitClusterStatus("trust", "east failed", func(st *fleetv1alpha1.PropagationStatus) bool { return st.Failed == 1 })
	if m := trust.Status.Members[0]; m.Reason != fleetv1alpha1.ReasonRefused || !strings.Contains(m.Message, "(and 1 more)") {
		t.Errorf("east's entry %+v, want the fleet namespace Refused, and one more failure (AlreadyExists)", m)
	}
	if obj := memberObject(t, "rbac.authorization.k8s.io/v1", "ClusterRole", theirs); obj == nil || obj.GetLabels()[fleetv1alpha1.PropagationLabel] != "" {
		t.Errorf("east's own ClusterRole %s was taken over: %v", theirs, obj)
	}

	// A ClusterEnvelope: its webhook configuration is live in the member
	// only; its namespaced manifest fails, named.
	hook := suite.Name("hook")
	webhook := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": map[string]any{"name": hook},
		"webhooks": []any{map[string]any{
			"name": "check." + group, "admissionReviewVersions": []any{"v1"}, "sideEffects": "None", "failurePolicy": "Ignore",
			"clientConfig": map[string]any{"url": "https://checker.invalid/check"},
			"rules":        []any{map[string]any{"apiGroups": []any{group}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"gadgets"}}},
		}},
	}
	configMap := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings"}}
	env := &fleetv1alpha1.ClusterEnvelope{ObjectMeta: metav1.ObjectMeta{Name: hook}, Manifests: rawManifests(t, webhook, configMap)}
	if err := f.hub.Client.Create(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	f.clusterPropagation("hooks", fleetv1alpha1.ResourceSelector{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "ClusterEnvelope", Name: hook})
	hooks := f.waitClusterStatus("hooks", "east failed by the namespaced manifest", func(st *fleetv1alpha1.PropagationStatus) bool { return st.Failed == 1 })
	if m := hooks.Status.Members[0]; m.Reason != fleetv1alpha1.ReasonNamespacedKind || !strings.Contains(m.Message, "manifest 1 (ConfigMap settings) of ClusterEnvelope "+hook) {
		t.Errorf("east's entry %+v, want the ConfigMap manifest named, NamespacedKind", m)
	}
	poll.Until(t, "the webhook configuration in east", func() bool {
		return memberObject(t, "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", hook) != nil
	})
	hubHook := &unstructured.Unstructured{}
	hubHook.SetAPIVersion("admissionregistration.k8s.io/v1")
	hubHook.SetKind("ValidatingWebhookConfiguration")
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Name: hook}, hubHook); !apierrors.IsNotFound(err) {
		t.Errorf("the webhook configuration on the hub: %v; want none, the ClusterEnvelope holds it as data", err)
	}
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.ClusterPropagation{ObjectMeta: metav1.ObjectMeta{Name: "hooks"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the webhook configuration removed from east", func() bool {
		return memberObject(t, "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", hook) == nil
	})

	// Removal, in reverse order: the Gadget before its CRD.
	since = time.Now()
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.ClusterPropagation{ObjectMeta: metav1.ObjectMeta{Name: "baseline"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ClusterPropagation gone", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Name: "baseline"}, &fleetv1alpha1.ClusterPropagation{}))
	})
	poll.Until(t, "east's copies removed", func() bool {
		return memberObject(t, "rbac.authorization.k8s.io/v1", "ClusterRole", reader) == nil && memberObject(t, "apiextensions.k8s.io/v1", "CustomResourceDefinition", crdName) == nil
	})
	var deletes []string
	for _, w := range memberWrites(t, 0, since) {
		if w.Verb == "delete" {
			deletes = append(deletes, w.Resource)
		}
	}
	if g, crd := slices.Index(deletes, "gadgets"), slices.Index(deletes, "customresourcedefinitions"); g < 0 || crd < g {
		t.Errorf("deletes in order %v, want the Gadget removed before its CRD", deletes)
	}
}

// clusterWarnings lists the Warning Events about ClusterPropagation name.
func clusterWarnings(t *testing.T, f *testFleet, name string) []string {
	t.Helper()
	events := &eventsv1.EventList{}
	if err := f.hub.Client.List(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range events.Items {
		if e.Regarding.Kind == "ClusterPropagation" && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning {
			notes = append(notes, e.Reason+": "+e.Note)
		}
	}
	return notes
}
