package journal_test

import (
	"cmp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// TestKindsOfMatchesCopiesOfWithOddKeys records copies whose names
// Kubernetes allows but that look like separators (dots, colons, a name
// that is another Propagation's prefix, cluster-scoped copies, groups
// with dots and an empty group) and checks that KindsOf gives exactly
// the kinds of CopiesOf, per Propagation, and that Record keeps every
// copy apart.
func TestKindsOfMatchesCopiesOfWithOddKeys(t *testing.T) {
	j := open(t, t.TempDir())
	crd := schema.GroupVersionKind{Group: "apps.example.co.uk", Version: "v1beta1", Kind: "Widget"}
	role := schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	copies := []journal.Copy{
		{Object: journal.Object{GVK: configMaps, Namespace: "team", Name: "a.b-c"}, Propagation: "web", Hash: "h1"},
		{Object: journal.Object{GVK: crd, Namespace: "team", Name: "x"}, Propagation: "web", Hash: "h2"},
		{Object: journal.Object{GVK: configMaps, Namespace: "team", Name: "x"}, Propagation: "web.v2", Hash: "h3"},
		{Object: journal.Object{GVK: crd, Namespace: "team", Name: "web"}, Propagation: "web-2", Hash: "h4"},
		{Object: journal.Object{GVK: role, Name: "system:controller:web"}, Propagation: "web", Hash: "h5"},
		{Object: journal.Object{GVK: configMaps, Namespace: "team2", Name: "web"}, Propagation: "web", Hash: "h6"},
	}
	if err := j.Record("m:1.example", copies); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		namespace, propagation string
		want                   []schema.GroupVersionKind
	}{
		{"team", "web", []schema.GroupVersionKind{configMaps, crd}},
		{"team", "web.v2", []schema.GroupVersionKind{configMaps}},
		{"team", "web-2", []schema.GroupVersionKind{crd}},
		{"", "web", []schema.GroupVersionKind{role}},
		{"team2", "web", []schema.GroupVersionKind{configMaps}},
		{"team", "we", nil},
	} {
		kinds, err := j.KindsOf("m:1.example", c.namespace, c.propagation)
		if err != nil {
			t.Fatal(err)
		}
		of, err := j.CopiesOf("m:1.example", c.namespace, c.propagation)
		if err != nil {
			t.Fatal(err)
		}
		var fromCopies []schema.GroupVersionKind
		for _, cp := range of {
			if !slices.Contains(fromCopies, cp.GVK) {
				fromCopies = append(fromCopies, cp.GVK)
			}
		}
		sortKinds := func(k []schema.GroupVersionKind) {
			slices.SortFunc(k, func(a, b schema.GroupVersionKind) int { return cmp.Compare(a.String(), b.String()) })
		}
		sortKinds(kinds)
		sortKinds(fromCopies)
		sortKinds(c.want)
		if !slices.Equal(kinds, c.want) || !slices.Equal(fromCopies, c.want) {
			t.Errorf("%s/%s: KindsOf %v, CopiesOf's kinds %v, want %v", c.namespace, c.propagation, kinds, fromCopies, c.want)
		}
	}
	all, err := j.Copies("m:1.example")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(copies) {
		t.Errorf("%d copies recorded, want %d: %v", len(all), len(copies), names(all))
	}
}

// TestRecordRefusesAKeyThatWouldNotReadBackWhole: a name with a
// slash, whose key would not read back, is refused without recording
// the good copies of the same call half-way.
func TestRecordRefusesAKeyThatWouldNotReadBackWhole(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	good := copyOf("web", "a", "h1")
	if err := j.Record("east", []journal.Copy{good}); err != nil {
		t.Fatal(err)
	}
	bad := copyOf("web", "b/c", "h2")
	if err := j.Record("east", []journal.Copy{copyOf("web", "z", "h3"), bad}); err == nil {
		t.Error("a copy named b/c was recorded: its key would not read back")
	}
	got, err := j.CopiesOf("east", "team", "web")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"web/a@h1"}; !slices.Equal(names(got), want) {
		t.Errorf("copies %v, want %v (nothing of the refused call)", names(got), want)
	}
}
