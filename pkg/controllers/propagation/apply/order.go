package apply

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// firstKinds are applied first within their wave, and removed last:
// what the other copies live in, or are of.
var firstKinds = []schema.GroupKind{
	{Kind: "Namespace"},
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
}

// step is one step of a member's apply order: its copies are applied
// together, once those of every earlier step are Available.
type step struct {
	wave  int32
	first bool
}

func (s step) compare(o step) int {
	return cmp.Or(cmp.Compare(s.wave, o.wave), -compareBool(s.first, o.first))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Order splits keys, each naming a copy by its kind and name as
// kindAndName says, into the steps of their apply order: by wave, as
// waveOf says, and within a wave firstKinds before the rest. Each step is
// sorted by kind and name, so that runs apply in the same order. Removal
// goes through the steps backwards.
func Order[K any](keys []K, kindAndName func(K) (schema.GroupVersionKind, string), waveOf func(K) int32) [][]K {
	stepOf := func(k K) step {
		gvk, _ := kindAndName(k)
		return step{wave: waveOf(k), first: slices.Contains(firstKinds, gvk.GroupKind())}
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b K) int {
		aKind, aName := kindAndName(a)
		bKind, bName := kindAndName(b)
		return cmp.Or(stepOf(a).compare(stepOf(b)), strings.Compare(aKind.String(), bKind.String()), strings.Compare(aName, bName))
	})
	var steps [][]K
	for i, k := range sorted {
		if i == 0 || stepOf(sorted[i-1]) != stepOf(k) {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], k)
	}
	return steps
}

// RemovalWave is the wave of a copy of kind gvk no resource selects any
// more, being removed: that of the first of p's resources of its kind,
// else 0.
func RemovalWave(p *fleetv1alpha1.Propagation, gvk schema.GroupVersionKind) int32 {
	if p == nil {
		return 0
	}
	for _, sel := range p.Spec.Resources {
		if gv, err := schema.ParseGroupVersion(sel.APIVersion); err == nil && gv.WithKind(sel.Kind) == gvk {
			return sel.Wave
		}
	}
	return 0
}
