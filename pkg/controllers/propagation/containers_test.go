package propagation_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// setClusterAdopt sets spec.adopt of ClusterPropagation name.
func (f *testFleet) setClusterAdopt(name string) {
	f.t.Helper()
	cp := &fleetv1alpha1.ClusterPropagation{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := f.hub.Client.Patch(f.t.Context(), cp, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"adopt":true}}`))); err != nil {
		f.t.Fatal(err)
	}
}

// deleteClusterPropagation deletes ClusterPropagation name and waits until
// it is gone: every member reported its copies removed.
func (f *testFleet) deleteClusterPropagation(name string) {
	f.t.Helper()
	if err := f.hub.Client.Delete(f.t.Context(), &fleetv1alpha1.ClusterPropagation{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		f.t.Fatal(err)
	}
	poll.Until(f.t, "ClusterPropagation "+name+" gone", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(f.t.Context(), types.NamespacedName{Name: name}, &fleetv1alpha1.ClusterPropagation{}))
	})
}

// wantOrphaned fails the test unless obj, of member 0, is there, not
// being deleted, and no longer carries what made it a copy.
func wantOrphaned(t *testing.T, obj *unstructured.Unstructured, what string) {
	t.Helper()
	switch {
	case obj == nil:
		t.Errorf("%s was deleted, want it orphaned", what)
	case obj.GetDeletionTimestamp() != nil:
		t.Errorf("%s is being deleted (deletionTimestamp %s), want it orphaned", what, obj.GetDeletionTimestamp())
	case obj.GetLabels()[fleetv1alpha1.PropagationLabel] != "" || obj.GetLabels()[fleetv1alpha1.FleetIDLabel] != "" || obj.GetAnnotations()[fleetv1alpha1.AdoptedAnnotation] != "":
		t.Errorf("%s still carries labels %v, annotations %v, want those of a copy taken off", what, obj.GetLabels(), obj.GetAnnotations())
	}
}

// TestClusterPropagationLeavesTheNamespaceItsFleetCreated is issue 38's
// reproduction: Propagation web created its namespace in member east; a
// ClusterPropagation that lists that Namespace does not take it over
// without adopt (AlreadyExists). With adopt it does, and deleting it then
// orphans the Namespace, which holds web's copy and the member's own
// ConfigMap: it is not deleted.
func TestClusterPropagationLeavesTheNamespaceItsFleetCreated(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	team := f.team
	t.Cleanup(func() {
		_ = suite.MemberClients[0].Delete(context.WithoutCancel(t.Context()), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})
	})
	if err := f.hub.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "settings"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Client.Create(t.Context(), &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{testFleetLabel: f.namespace})},
		},
	}); err != nil {
		t.Fatal(err)
	}
	settings := types.NamespacedName{Namespace: team, Name: "settings"}
	poll.Until(t, "web's copy in east", func() bool {
		return suite.MemberClients[0].Get(t.Context(), settings, &corev1.ConfigMap{}) == nil
	})
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "mine"}, Data: map[string]string{"keep": "me"}}
	if err := suite.MemberClients[0].Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}

	f.clusterPropagation("namespaces", fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Namespace", Name: team})
	cp := f.waitClusterStatus("namespaces", "east failed", func(st *fleetv1alpha1.PropagationStatus) bool { return st.Failed == 1 })
	if m := cp.Status.Members[0]; m.Reason != fleetv1alpha1.ReasonAlreadyExists || !strings.Contains(m.Message, "made by this fleet") {
		t.Errorf("east's entry %+v, want AlreadyExists: the Namespace was made by this fleet for other copies", m)
	}
	if ns := memberObject(t, "v1", "Namespace", team); ns.GetLabels()[fleetv1alpha1.PropagationLabel] != "" {
		t.Fatalf("east's Namespace labels %v: taken over without adopt", ns.GetLabels())
	}

	f.setClusterAdopt("namespaces")
	f.waitClusterStatus("namespaces", "Ready under adopt", func(st *fleetv1alpha1.PropagationStatus) bool {
		return st.Available == 1 && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady)
	})
	ns := memberObject(t, "v1", "Namespace", team)
	if ns.GetLabels()[fleetv1alpha1.PropagationLabel] != "namespaces" || ns.GetAnnotations()[fleetv1alpha1.AdoptedAnnotation] != "" {
		t.Errorf("east's Namespace labels %v, annotations %v: want a copy of namespaces, not marked adopted (this fleet made it)", ns.GetLabels(), ns.GetAnnotations())
	}

	f.deleteClusterPropagation("namespaces")
	wantOrphaned(t, memberObject(t, "v1", "Namespace", team), "east's Namespace "+team)
	for _, name := range []string{"settings", "mine"} {
		if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: team, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s in east: %v", name, err)
		}
	}
	if w := clusterWarnings(t, f, "namespaces"); !slices.ContainsFunc(w, func(n string) bool {
		return strings.HasPrefix(n, fleetv1alpha1.ReasonContainerNotEmpty+": member east: Namespace "+team+" was orphaned, not deleted: it holds configmaps")
	}) {
		t.Errorf("Warning Events %v, want one ContainerNotEmpty naming the Namespace and what it holds", w)
	}
}

// TestClusterPropagationOrphansACRDWithCustomResourcesLeft: a CRD copy
// dropped from resources while the member holds a custom resource of its
// own of that kind is orphaned, not deleted, and the member's status entry
// says so.
func TestClusterPropagationOrphansACRDWithCustomResourcesLeft(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	group := suite.Name("w") + ".test.fleetkube.io"
	crdName := installCRD(t, f.hub.Env, group, "Widget", apiextensionsv1.NamespaceScoped)
	t.Cleanup(func() {
		_ = suite.MemberClients[0].Delete(context.WithoutCancel(t.Context()), &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crdName}})
	})
	reader := suite.Name("reader")
	if err := f.hub.Client.Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: reader}}); err != nil {
		t.Fatal(err)
	}
	role := fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: reader}
	f.clusterPropagation("crds", fleetv1alpha1.ResourceSelector{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: crdName}, role)
	f.waitClusterStatus("crds", "Ready", func(st *fleetv1alpha1.PropagationStatus) bool {
		return st.Available == 1 && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady)
	})
	theirs := widget(group, "default", "theirs")
	poll.Until(t, "the member's own Widget created", func() bool { return suite.MemberClients[0].Create(t.Context(), theirs) == nil })

	cp := &fleetv1alpha1.ClusterPropagation{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Name: "crds"}, cp); err != nil {
		t.Fatal(err)
	}
	cp.Spec.Resources = []fleetv1alpha1.ResourceSelector{role}
	if err := f.hub.Client.Update(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	cp = f.waitClusterStatus("crds", "east listed as ContainerNotEmpty", func(st *fleetv1alpha1.PropagationStatus) bool {
		return len(st.Members) == 1 && st.Members[0].Reason == fleetv1alpha1.ReasonContainerNotEmpty
	})
	if m := cp.Status.Members[0]; m.Result != fleetv1alpha1.ResultApplied || !strings.Contains(m.Message, "CustomResourceDefinition "+crdName+" was orphaned, not deleted: it holds widgets."+group) {
		t.Errorf("east's entry %+v, want Applied, naming the CRD orphaned and what it holds", m)
	}
	if !meta.IsStatusConditionTrue(cp.Status.Conditions, fleetv1alpha1.PropagationReady) {
		t.Errorf("conditions %+v, want Ready: east holds what the ClusterPropagation wants", cp.Status.Conditions)
	}
	wantOrphaned(t, memberObject(t, "apiextensions.k8s.io/v1", "CustomResourceDefinition", crdName), "east's CRD "+crdName)
	if err := suite.MemberClients[0].Get(t.Context(), client.ObjectKeyFromObject(theirs), theirs.DeepCopy()); err != nil {
		t.Errorf("the member's own Widget: %v", err)
	}
}

// TestClusterPropagationOrphansAnAdoptedObject: a member's own ClusterRole
// that adopt took over is marked adopted, and deleting the
// ClusterPropagation orphans it: the manager did not create it, and does
// not delete it.
func TestClusterPropagationOrphansAnAdoptedObject(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	name := suite.Name("theirs")
	for _, c := range []client.Client{f.hub.Client, suite.MemberClients[0]} {
		if err := c.Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = suite.MemberClients[0].Delete(context.WithoutCancel(t.Context()), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	f.clusterPropagation("adopting", fleetv1alpha1.ResourceSelector{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: name})
	f.waitClusterStatus("adopting", "east failed", func(st *fleetv1alpha1.PropagationStatus) bool { return st.Failed == 1 })
	f.setClusterAdopt("adopting")
	f.waitClusterStatus("adopting", "Ready under adopt", func(st *fleetv1alpha1.PropagationStatus) bool {
		return st.Available == 1 && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady)
	})
	role := memberObject(t, "rbac.authorization.k8s.io/v1", "ClusterRole", name)
	if role.GetLabels()[fleetv1alpha1.PropagationLabel] != "adopting" || role.GetAnnotations()[fleetv1alpha1.AdoptedAnnotation] != "true" {
		t.Errorf("east's ClusterRole labels %v, annotations %v: want a copy of adopting, marked adopted", role.GetLabels(), role.GetAnnotations())
	}

	f.deleteClusterPropagation("adopting")
	wantOrphaned(t, memberObject(t, "rbac.authorization.k8s.io/v1", "ClusterRole", name), "east's ClusterRole "+name)
	if w := clusterWarnings(t, f, "adopting"); !slices.ContainsFunc(w, func(n string) bool { return strings.HasPrefix(n, fleetv1alpha1.ReasonAdoptedOrphaned+":") }) {
		t.Errorf("Warning Events %v, want one AdoptedOrphaned", w)
	}
}
