package content

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestRecreatedObjectAndPropagationAreNotStale: a hub object
// deleted and re-created under the same name (new UID, same
// resourceVersion string in this fake), and a Propagation deleted and
// re-created with the same generation and another spec, each build a new
// content: the memo never hands out the old one.
func TestRecreatedObjectAndPropagationAreNotStale(t *testing.T) {
	h := &hub{}
	h.configMaps(1, 8)
	c := newCache(h)
	p := webPropagation()
	first, _, err := c.Get(t.Context(), p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.objs[0] = h.objs[0].DeepCopy()
	h.objs[0].SetUID("uid-recreated")
	_ = unstructured.SetNestedField(h.objs[0].Object, "recreated", "data", "v")
	h.mu.Unlock()
	second, _, err := c.Get(t.Context(), p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second.Objects[0].Object["data"].(map[string]any)["v"] != "recreated" {
		t.Fatalf("a hub object re-created under its name: the memo handed out the old content %+v", second.Objects)
	}
	p2 := webPropagation()
	p2.UID = "p-uid-2"
	p2.Spec.Resources[0].Selector = fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "other"})
	h.list(t.Context(), "team", p2.Spec.Resources[0]) //nolint:errcheck // warm
	third, _, err := c.Get(t.Context(), p2)
	if err != nil {
		t.Fatal(err)
	}
	if third == second {
		t.Fatal("a Propagation re-created with the same generation got the old one's content")
	}
}

// TestEnvelopeKindScopeChangeIsNotStale: an Envelope's manifest of
// a kind the hub knows as namespaced is accepted; the CRD deleted and
// re-created cluster-scoped on the hub (the hub now knows the kind as
// cluster-scoped), the Envelope unchanged, the content must refuse it
// (ClusterScopedKind) as a fresh build does: "no kind the hub knows as
// cluster-scoped".
func TestEnvelopeKindScopeChangeIsNotStale(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	namespaced := meta.NewDefaultRESTMapper(nil)
	namespaced.Add(gv.WithKind("Widget"), meta.RESTScopeNamespace)
	env := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fleet.fleetkube.io/v1alpha1", "kind": "Envelope",
		"metadata":  map[string]any{"namespace": "team", "name": "app", "uid": "env-uid", "resourceVersion": "7"},
		"manifests": []any{map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}},
	}}
	h := &hub{objs: []*unstructured.Unstructured{env}}
	c := NewCache(&Builder{Fleet: "fleet-system", Mapper: namespaced, List: h.list})
	p := webPropagation()
	p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"}}
	got, _, err := c.Get(t.Context(), p)
	if err != nil || len(got.Objects) != 1 {
		t.Fatalf("namespaced Widget: %v, %+v", err, got)
	}
	clusterScoped := meta.NewDefaultRESTMapper(nil)
	clusterScoped.Add(gv.WithKind("Widget"), meta.RESTScopeRoot)
	c.Mapper = clusterScoped
	fresh, err := c.Build(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err = c.Get(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.Objects) != 0 || len(got.Objects) != len(fresh.Objects) {
		t.Errorf("the hub knows Widget as cluster-scoped now: a fresh build holds %d objects, problems %+v; the memo still hands out %d objects, problems %+v",
			len(fresh.Objects), fresh.Problems, len(got.Objects), got.Problems)
	}
}
