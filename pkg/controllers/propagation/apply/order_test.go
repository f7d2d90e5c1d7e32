package apply

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// key names a copy, as the controller's keys do.
type key struct {
	gvk  schema.GroupVersionKind
	name string
}

func (k key) kindAndName() (schema.GroupVersionKind, string) { return k.gvk, k.name }

func (k key) String() string { return k.gvk.Kind + " " + k.name }

var (
	namespace   = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	crd         = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	configMap   = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	deployment  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	clusterRole = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	gadget      = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
)

// names lists steps as "Kind name" strings.
func names(steps [][]key) [][]string {
	var out [][]string
	for _, st := range steps {
		var s []string
		for _, k := range st {
			s = append(s, k.String())
		}
		out = append(out, s)
	}
	return out
}

func TestOrderGoesByWaveThenNamespacesAndCRDsFirst(t *testing.T) {
	t.Parallel()
	waves := map[key]int32{
		{configMap, "web"}:    1,
		{deployment, "web"}:   0,
		{gadget, "big"}:       0,
		{crd, "gadgets"}:      0,
		{namespace, "base"}:   0,
		{clusterRole, "read"}: 0,
		{configMap, "early"}:  -5,
		{namespace, "late"}:   1,
	}
	keys := []key{
		{configMap, "web"}, {deployment, "web"}, {gadget, "big"}, {crd, "gadgets"},
		{namespace, "base"}, {clusterRole, "read"}, {configMap, "early"}, {namespace, "late"},
	}
	before := slices.Clone(keys)
	got := names(Order(keys, key.kindAndName, func(k key) int32 { return waves[k] }))
	want := [][]string{
		{"ConfigMap early"}, // wave -5
		{"Namespace base", "CustomResourceDefinition gadgets"}, // wave 0: what others live in, or are of
		{"Deployment web", "Gadget big", "ClusterRole read"},   // wave 0, by group, kind and name
		{"Namespace late"}, // wave 1: a Namespace still first
		{"ConfigMap web"},  // wave 1
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Order = %v, want %v", got, want)
	}
	if !slices.Equal(keys, before) {
		t.Errorf("Order changed its input: %v", keys)
	}
}

// TestOrderIsTheSameWhateverTheInputOrder: runs apply (and remove) in the
// same order, however a map hands the keys over.
func TestOrderIsTheSameWhateverTheInputOrder(t *testing.T) {
	t.Parallel()
	keys := []key{{configMap, "b"}, {configMap, "a"}, {deployment, "a"}, {namespace, "z"}, {namespace, "a"}}
	waveOf := func(key) int32 { return 0 }
	want := names(Order(keys, key.kindAndName, waveOf))
	slices.Reverse(keys)
	if got := names(Order(keys, key.kindAndName, waveOf)); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Order of the keys reversed = %v, want %v", got, want)
	}
	if want := [][]string{{"Namespace a", "Namespace z"}, {"ConfigMap a", "ConfigMap b", "Deployment a"}}; !slices.EqualFunc(names(Order(keys, key.kindAndName, waveOf)), want, slices.Equal) {
		t.Errorf("Order = %v, want %v", names(Order(keys, key.kindAndName, waveOf)), want)
	}
	if steps := Order(nil, key.kindAndName, waveOf); steps != nil {
		t.Errorf("Order of no keys = %v, want no steps", steps)
	}
}

func TestRemovalWaveIsThatOfTheFirstResourceOfTheKind(t *testing.T) {
	t.Parallel()
	p := &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{
		{APIVersion: "not/a/version", Kind: "ConfigMap", Wave: 9},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "a", Wave: 2},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "b", Wave: 5},
		{APIVersion: "apps/v1beta2", Kind: "Deployment", Wave: 7},
	}}}
	for _, tc := range []struct {
		name string
		p    *fleetv1alpha1.Propagation
		gvk  schema.GroupVersionKind
		want int32
	}{
		{"the first resource of the kind", p, configMap, 2},
		{"the kind in another version", p, deployment, 0},
		{"a kind no resource selects any more", p, namespace, 0},
		{"a Propagation gone", nil, configMap, 0},
	} {
		if got := RemovalWave(tc.p, tc.gvk); got != tc.want {
			t.Errorf("%s: RemovalWave = %d, want %d", tc.name, got, tc.want)
		}
	}
}
