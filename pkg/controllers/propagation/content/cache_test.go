package content

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// hub is a hub cache of one namespace's ConfigMaps and Envelopes: its
// list returns deep copies, as the controller's cache does.
type hub struct {
	mu    sync.Mutex
	objs  []*unstructured.Unstructured
	lists int
	err   error
}

func (h *hub) list(_ context.Context, namespace string, sel fleetv1alpha1.ResourceSelector) ([]unstructured.Unstructured, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lists++
	if h.err != nil {
		return nil, h.err
	}
	var out []unstructured.Unstructured
	for _, o := range h.objs {
		if o.GetNamespace() == namespace && o.GetKind() == sel.Kind {
			out = append(out, *o.DeepCopy())
		}
	}
	return out, nil
}

// configMaps fills h with n ConfigMaps of size bytes of data each.
func (h *hub) configMaps(n, size int) {
	for i := range n {
		cm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{
				"namespace": "team", "name": fmt.Sprintf("cm-%02d", i), "uid": fmt.Sprintf("uid-%02d", i),
				"resourceVersion": "1", "labels": map[string]any{"app": "web"},
			},
			"data": map[string]any{"v": strings.Repeat("x", size)},
		}}
		h.objs = append(h.objs, cm)
	}
}

// change gives object i new data and a new resourceVersion, as the hub
// does on an update.
func (h *hub) change(i int, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.objs[i]
	rv, _ := strconv.Atoi(o.GetResourceVersion())
	o.SetResourceVersion(strconv.Itoa(rv + 1))
	_ = unstructured.SetNestedField(o.Object, v, "data", "v")
}

func webPropagation() *fleetv1alpha1.Propagation {
	return &fleetv1alpha1.Propagation{
		ObjectMeta: metaOf("team", "web", "p-uid", 1),
		Spec: fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{
			{APIVersion: "v1", Kind: "ConfigMap"},
		}},
	}
}

func metaOf(namespace, name string, uid types.UID, generation int64) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, Generation: generation}
}

func newCache(h *hub) *Cache {
	return NewCache(&Builder{Fleet: "fleet-system", Mapper: meta.NewDefaultRESTMapper(nil), List: h.list})
}

// TestContentIsBuiltOncePerChange: however many member runs and status
// requests ask for a Propagation's content, it is built once per change
// of the Propagation or of the objects it selects, and every caller gets
// the same content.
func TestContentIsBuiltOncePerChange(t *testing.T) {
	h := &hub{}
	h.configMaps(30, 1<<10)
	c := newCache(h)
	p := webPropagation()

	const members = 100
	runs := func() (*Content, string) {
		t.Helper()
		contents := make([]*Content, members)
		hashes := make([]string, members)
		var wg sync.WaitGroup
		for i := range members {
			wg.Go(func() {
				var err error
				if contents[i], hashes[i], err = c.Get(t.Context(), p.DeepCopy()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i := range members {
			if contents[i] != contents[0] || hashes[i] != hashes[0] {
				t.Fatalf("member run %d got another content than run 0", i)
			}
		}
		return contents[0], hashes[0]
	}

	first, hash := runs()
	if n := c.Builds(); n != 1 {
		t.Fatalf("%d member runs built the content %d times, want once", members, n)
	}
	if _, want, _ := first.Encode(); want != hash {
		t.Errorf("hash %s, want the content's %s", hash, want)
	}
	if len(first.Objects) != 30 || first.Selected.Count != 30 {
		t.Fatalf("%d objects, %d selected; want 30", len(first.Objects), first.Selected.Count)
	}

	h.change(3, "changed")
	second, hash2 := runs()
	if n := c.Builds(); n != 2 {
		t.Errorf("after a change of one object: %d builds, want 2", n)
	}
	if hash2 == hash || second.Objects[3].Object["data"].(map[string]any)["v"] != "changed" {
		t.Errorf("the content after the change is not the changed object's")
	}

	p.Generation++
	p.Spec.Overrides = []fleetv1alpha1.Override{{Name: "o", Target: fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"}}}
	third, _ := runs()
	if n := c.Builds(); n != 3 || len(third.Overrides) != 1 {
		t.Errorf("after a change of spec: %d builds, %d overrides; want 3 and 1", n, len(third.Overrides))
	}

	// A Propagation of the same name made again is another one.
	p.UID = "p-uid-2"
	runs()
	if n := c.Builds(); n != 4 {
		t.Errorf("after the Propagation was made again: %d builds, want 4", n)
	}
}

// TestContentOfAnUnknownManifestKindIsBuiltAgain: a manifest of a kind
// the hub does not know may be of either scope once it does, so the
// content that holds it is not kept.
func TestContentOfAnUnknownManifestKindIsBuiltAgain(t *testing.T) {
	h := &hub{objs: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": fleetv1alpha1.GroupVersion.String(), "kind": "Envelope",
		"metadata":  map[string]any{"namespace": "team", "name": "env", "uid": "env-uid", "resourceVersion": "1"},
		"manifests": []any{map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}},
	}}}}
	mapper := meta.NewDefaultRESTMapper(nil)
	c := NewCache(&Builder{Fleet: "fleet-system", Mapper: mapper, List: h.list})
	p := webPropagation()
	p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: fleetv1alpha1.GroupVersion.String(), Kind: "Envelope"}}
	for range 2 {
		got, _, err := c.Get(t.Context(), p)
		if err != nil || len(got.Objects) != 1 {
			t.Fatalf("content %+v, %v; want the Widget", got, err)
		}
	}
	if n := c.Builds(); n != 2 {
		t.Errorf("%d builds of a content of an unknown kind, want 2: it is not kept", n)
	}
	// Once the hub knows Widget as cluster-scoped, the manifest is refused.
	mapper.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeRoot)
	got, _, err := c.Get(t.Context(), p)
	if err != nil || len(got.Objects) != 0 || len(got.Problems) != 1 || got.Problems[0].Reason != fleetv1alpha1.ReasonClusterScoped {
		t.Errorf("content %+v, %v; want the Widget refused as cluster-scoped", got, err)
	}
}

// TestContentOfAProblemIsKeptWhileTheProblemIs: an entry the hub cannot
// list is a problem of the content; the same problem makes the same
// content, and another one builds it again. An error with no reason
// fails the build, and nothing is kept.
func TestContentOfAProblemIsKeptWhileTheProblemIs(t *testing.T) {
	h := &hub{err: &Error{Reason: fleetv1alpha1.ReasonForbidden, Message: "forbidden"}}
	c := newCache(h)
	p := webPropagation()
	for range 3 {
		got, _, err := c.Get(t.Context(), p)
		if err != nil || len(got.Problems) != 1 || got.Problems[0].Reason != fleetv1alpha1.ReasonForbidden || got.Problems[0].Kind == nil {
			t.Fatalf("content %+v, %v; want the Forbidden problem, naming its kind", got, err)
		}
	}
	if n := c.Builds(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	h.err = fmt.Errorf("the hub is not engaged")
	if _, _, err := c.Get(t.Context(), p); err == nil {
		t.Error("an error without a reason built a content")
	}
	h.err = nil
	h.configMaps(1, 10)
	if got, _, err := c.Get(t.Context(), p); err != nil || len(got.Objects) != 1 || len(got.Problems) != 0 {
		t.Errorf("content %+v, %v; want the ConfigMap, no problem", got, err)
	}
	if n := c.Builds(); n != 2 {
		t.Errorf("%d builds, want 2", n)
	}
}

// TestForgetDropsTheContent: the entry of a Propagation that is gone is
// dropped, so the cache holds no more than the Propagations there are.
func TestForgetDropsTheContent(t *testing.T) {
	h := &hub{}
	h.configMaps(2, 10)
	c := newCache(h)
	for i := range 10 {
		p := webPropagation()
		p.Name, p.UID = fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		if _, _, err := c.Get(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		c.Forget(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	if n := len(c.entries); n != 0 {
		t.Errorf("%d entries after every Propagation was forgotten, want 0", n)
	}
}
