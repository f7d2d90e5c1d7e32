package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// fleetIDLabel marks a copy with its fleet's identity.
const fleetIDLabel = "fleet.fleetkube.io/fleet-id"

// clusterPropagation creates ClusterPropagation name of the team's fleet, selecting its
// members and waits until its revision 1 is rolled out.
func (tm *team) clusterPropagation(name string, adopt bool, resources ...fleetv1alpha1.ResourceSelector) *fleetv1alpha1.ClusterPropagation {
	tm.t.Helper()
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: tm.fleetLabel()},
		Spec:       fleetv1alpha1.PropagationSpec{Resources: resources, Members: tm.selector(), Adopt: adopt},
	}
	if err := tm.hub.Create(tm.t.Context(), cp); err != nil {
		tm.t.Fatal(err)
	}
	pollUntil(tm.t, "ClusterPropagation "+name+" rolled out", func() bool {
		if err := tm.hub.Get(tm.t.Context(), client.ObjectKeyFromObject(cp), cp); err != nil {
			tm.t.Fatal(err)
		}
		r := cp.Status.Rollout
		return cp.Status.ObservedGeneration == cp.Generation && r != nil && r.Revision == 1 && r.Phase == fleetv1alpha1.RolloutComplete &&
			cp.Status.Applied == int32(len(tm.names))
	})
	return cp
}

// object reads obj by its name from member, reporting whether it exists.
func (tm *team) object(member string, obj client.Object) bool {
	tm.t.Helper()
	err := tm.member(member).Get(tm.t.Context(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && !isNotFound(err) {
		tm.t.Fatal(err)
	}
	return err == nil
}

func TestContainerIsRemovedOnlyWhenEmpty(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	full, empty := tm.register(0, "a", nil), tm.register(1, "b", nil)
	ns := tm.ns + "-base"
	fleettestNamespace(t, ns)
	cp := tm.clusterPropagation(tm.ns+"-base", false, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Namespace", Name: ns})
	// Content of the member's own in full's copy.
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}}
	if err := tm.member(full).Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	if err := tm.hub.Delete(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	// Evidence: empty's copy is deleted (terminating: envtest runs no
	// namespace controller, or gone), and full's is no copy any more.
	got := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	pollUntil(t, "the empty member's namespace deleted", func() bool {
		n := got.DeepCopy()
		return !tm.object(empty, n) || n.DeletionTimestamp != nil
	})
	pollUntil(t, "the full member's namespace orphaned, or deleted", func() bool {
		n := got.DeepCopy()
		return !tm.object(full, n) || n.DeletionTimestamp != nil || n.Labels[fleetIDLabel] == ""
	})
	n := got.DeepCopy()
	if !tm.object(full, n) || n.DeletionTimestamp != nil {
		t.Fatalf("%s's namespace %s, which holds a ConfigMap of its own, was deleted", full, ns)
	}
	if !tm.object(full, mine) {
		t.Errorf("%s's own ConfigMap in %s is gone", full, ns)
	}
}

func TestAdoptedObjectIsLetGoNeverDeleted(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	made, copied := tm.register(0, "a", nil), tm.register(1, "b", nil)
	name := tm.ns + "-reader"
	role := func() *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	}
	if err := tm.hub.Create(t.Context(), role()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tm.hub.Delete(context_(), role()) })
	if err := tm.member(made).Create(t.Context(), role()); err != nil {
		t.Fatal(err)
	}
	cp := tm.clusterPropagation(name, true, fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: name})
	pollUntil(t, made+"'s ClusterRole adopted", func() bool {
		r := role()
		return tm.object(made, r) && r.Labels[fleetIDLabel] != ""
	})
	if err := tm.hub.Delete(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "the copy in "+copied+" removed", func() bool { return !tm.object(copied, role()) })
	pollUntil(t, "the adopted ClusterRole in "+made+" let go, or deleted", func() bool {
		r := role()
		return !tm.object(made, r) || r.Labels[fleetIDLabel] == ""
	})
	if !tm.object(made, role()) {
		t.Errorf("%s's own ClusterRole, adopted, was deleted", made)
	}
}

// fleettestNamespace creates namespace name on the hub, for a
// ClusterPropagation to copy.
func fleettestNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := suite.HubClient.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
}

func TestClusterPropagationAppliesTheBaselineInOrder(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	tm.register(3, "a", nil)
	tm.register(4, "b", nil)
	group := tm.ns + ".e2e.example.com"
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets." + group},
		"spec": map[string]any{
			"group": group, "scope": "Cluster",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if err := tm.hub.Create(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tm.hub.Delete(context_(), crd) })
	gadget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1", "kind": "Gadget", "metadata": map[string]any{"name": "big"}, "spec": map[string]any{"size": int64(3)},
	}}
	pollUntil(t, "the hub serving Gadgets", func() bool { return tm.hub.Create(t.Context(), gadget.DeepCopy()) == nil })
	ns := tm.ns + "-base"
	fleettestNamespace(t, ns)
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: tm.ns + "-baseline", Labels: tm.fleetLabel()},
		Spec: fleetv1alpha1.PropagationSpec{Members: tm.selector(), Resources: []fleetv1alpha1.ResourceSelector{
			{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: crd.GetName()},
			{APIVersion: group + "/v1", Kind: "Gadget", Name: "big"},
			{APIVersion: "v1", Kind: "Namespace", Name: ns},
		}},
	}
	if err := tm.hub.Create(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	// Every status the poll reads is checked: a member that fails the
	// Gadget before its CRD is Established breaks the promise, even if
	// a retry applies it later.
	pollUntil(t, "the baseline rolled out", func() bool {
		if err := tm.hub.Get(t.Context(), client.ObjectKeyFromObject(cp), cp); err != nil {
			t.Fatal(err)
		}
		for _, m := range cp.Status.Members {
			if m.Result == fleetv1alpha1.ResultFailed {
				t.Fatalf("%s failed the baseline (%s): %s", m.Name, m.Reason, m.Message)
			}
		}
		r := cp.Status.Rollout
		return cp.Status.ObservedGeneration == cp.Generation && r != nil && r.Phase == fleetv1alpha1.RolloutComplete &&
			cp.Status.Applied == int32(len(tm.names))
	})
	for _, m := range tm.names {
		for _, obj := range []*unstructured.Unstructured{crd, gadget, {Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}} {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			got.SetName(obj.GetName())
			if !tm.object(m, got) {
				t.Errorf("%s has no %s %s once the baseline is rolled out", m, obj.GetKind(), obj.GetName())
			}
		}
	}
}
