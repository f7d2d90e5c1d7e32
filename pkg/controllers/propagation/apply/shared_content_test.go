package apply

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
)

// TestMemberCopiesLeaveTheSharedContentAlone: the content is shared by
// every member run; each run makes its member's copies, overrides
// applied, without changing it (run with -race: runs are concurrent).
func TestMemberCopiesLeaveTheSharedContentAlone(t *testing.T) {
	hubObjs := make([]unstructured.Unstructured, 3)
	for i := range hubObjs {
		hubObjs[i] = unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{
				"namespace": "team", "name": fmt.Sprintf("cm-%d", i), "uid": fmt.Sprintf("uid-%d", i), "resourceVersion": "1",
				"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"note": "x"},
			},
			"data": map[string]any{"v": "0", "nested": "n"},
		}}
	}
	// A Service's cluster IP is the hub's: each copy leaves it out.
	hubObjs = append(hubObjs, unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"namespace": "team", "name": "svc", "uid": "svc-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"port": int64(80)}}},
	}})
	list := func(_ context.Context, _ string, sel fleetv1alpha1.ResourceSelector) ([]unstructured.Unstructured, error) {
		var out []unstructured.Unstructured
		for i := range hubObjs {
			if hubObjs[i].GetKind() == sel.Kind {
				out = append(out, *hubObjs[i].DeepCopy())
			}
		}
		return out, nil
	}
	cache := content.NewCache(&content.Builder{Fleet: "fleet-system", Mapper: meta.NewDefaultRESTMapper(nil), List: list})
	target := fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "p-uid", Generation: 1},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}, {APIVersion: "v1", Kind: "Service"}},
			Overrides: []fleetv1alpha1.Override{
				{Name: "json", Target: target, JSONPatch: []fleetv1alpha1.JSONPatchOperation{
					patchOp("replace", "/data/v", `"${MEMBER_NAME}"`), patchOp("remove", "/data/nested", ""),
				}},
				{Name: "merge", Target: target, MergePatch: rawJSON(`{"metadata":{"labels":{"app":null,"member":"${MEMBER_NAME}"}}}`)},
			},
		},
	}
	shared, _, err := cache.Get(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	before := make([]map[string]any, len(shared.Objects))
	for i, o := range shared.Objects {
		before[i] = runtime.DeepCopyJSON(o.Object)
	}

	var wg sync.WaitGroup
	for m := range 20 {
		wg.Go(func() {
			member := Member{Name: fmt.Sprintf("member-%d", m), Labels: map[string]string{"env": "prod"}}
			c, _, err := cache.Get(t.Context(), p)
			if err != nil {
				t.Error(err)
				return
			}
			for _, o := range c.Objects {
				d, err := DesiredCopy(&unstructured.Unstructured{Object: o.Object}, p, c.Overrides, "fleet-system", "fleet-id", member)
				if err != nil {
					t.Error(err)
					return
				}
				if v, _, _ := unstructured.NestedString(d.Object, "data", "v"); d.GetKind() == "ConfigMap" && v != member.Name {
					t.Errorf("copy for %s holds v=%q", member.Name, v)
				}
			}
		})
	}
	wg.Wait()
	for i, o := range shared.Objects {
		if !reflect.DeepEqual(o.Object, before[i]) {
			t.Errorf("object %d of the shared content changed:\n%v\nwant\n%v", i, o.Object, before[i])
		}
	}
}
