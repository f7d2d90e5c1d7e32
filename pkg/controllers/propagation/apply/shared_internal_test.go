package apply

import (
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
)

// TestCopiesNoOverrideChangesAreBuiltOnce: the member runs of one content
// share the desired copy no override changes, built by the first (its
// 10 KiB of data not built again nor copied, nor its metadata), whatever
// revision each member's copy is to carry; a copy an override changes in
// a member is that member's own.
func TestCopiesNoOverrideChangesAreBuiltOnce(t *testing.T) {
	t.Parallel()
	hub := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web", "namespace": "team", "uid": "u1", "labels": map[string]any{"app": "web"}},
		"data":     map[string]any{"pad": strings.Repeat("x", 10<<10)},
	}
	c := &content.Content{
		Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}},
		Overrides: []fleetv1alpha1.Override{{
			Name:       "west-only",
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web"},
			Members:    fleetv1alpha1.MemberSelector{Names: []string{"west"}},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"region":"west"}}`)},
		}},
		Objects: []content.Object{{Resource: 0, Object: hub}},
	}
	env := &Env{Fleet: "fleet", Shared: &SharedCopies{}}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}}
	k := Key{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: "web"}
	newRun := func(member string, number int64) *Run {
		return &Run{env: env, member: Target{Name: member}, p: p, key: types.NamespacedName{Namespace: "team", Name: "web"}, id: "id",
			Input: Input{Content: c, Overrides: c.Overrides, Number: number}}
	}
	desired := func(run *Run) *unstructured.Unstructured {
		return run.desiredCopies(map[Key]*unstructured.Unstructured{k: {Object: hub}})[k]
	}
	eastRun, northRun := newRun("east", 1), newRun("north", 2)
	east, north, west := desired(eastRun), desired(northRun), desired(newRun("west", 2))
	if east != north {
		t.Error("east's and north's copies were each built or copied: want one copy, shared")
	}
	data := func(u *unstructured.Unstructured) uintptr { return reflect.ValueOf(u.Object["data"]).Pointer() }
	if data(west) == data(east) {
		t.Error("west's copy, which an override changes, is shared")
	}
	if _, labelled := east.GetLabels()[fleetv1alpha1.RevisionLabel]; labelled {
		t.Error("a run's revision label reached the shared copy")
	}
	if got := eastRun.revisionOf(east, nil); got != "1" {
		t.Errorf("east's copy to carry revision %q, want 1", got)
	}
	if got := northRun.revisionOf(north, nil); got != "2" {
		t.Errorf("north's copy to carry revision %q, want 2", got)
	}
	live := func(labels map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"labels": labels}}}
	}
	if got := northRun.revisionOf(north, live(map[string]any{fleetv1alpha1.RevisionLabel: "1"})); got != "1" {
		t.Errorf("north's copy holding the content already, of revision 1, to carry revision %q: want it kept", got)
	}
	if got := northRun.revisionOf(north, live(map[string]any{"app": "web"})); got != "2" {
		t.Errorf("north's copy holding the content already, without a revision, to carry revision %q, want 2", got)
	}
	if shared := env.Shared.Get(types.NamespacedName{Namespace: "team", Name: "web"}, c, sharedInputs{propagation: "web", deletion: fleetv1alpha1.DeletionDelete, fleetID: "id"}, k); shared != east {
		t.Error("the copy kept for the next member is not the one east's run was given")
	}
}
