package propagation

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
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

// applyOrder splits keys into the steps of their apply order: by wave,
// as waveOf says, and within a wave firstKinds before the rest. Each
// step is sorted by kind and name, so that runs apply in the same order.
// Removal goes through the steps backwards.
func applyOrder(keys []copyKey, waveOf func(copyKey) int32) [][]copyKey {
	stepOf := func(k copyKey) step {
		return step{wave: waveOf(k), first: slices.Contains(firstKinds, k.gvk.GroupKind())}
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b copyKey) int {
		return cmp.Or(stepOf(a).compare(stepOf(b)), strings.Compare(a.gvk.String(), b.gvk.String()), strings.Compare(a.name, b.name))
	})
	var steps [][]copyKey
	for i, k := range sorted {
		if i == 0 || stepOf(sorted[i-1]) != stepOf(k) {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], k)
	}
	return steps
}

// kindWave is the wave of a copy no resource selects any more, being
// removed: that of the first of p's resources of its kind, else 0.
func kindWave(p *fleetv1alpha1.Propagation, gvk schema.GroupVersionKind) int32 {
	if p == nil {
		return 0
	}
	for _, sel := range p.Spec.Resources {
		if k, err := content.ResourceKind(sel); err == nil && k == gvk {
			return sel.Wave
		}
	}
	return 0
}

// applyInOrder applies the desired copies step by step (see applyOrder)
// and judges each copy's availability: the copies of a step are applied
// once every copy of the earlier steps is applied and Available. Copies
// of the steps that wait are left as they are. want are the hub objects
// wanted, have the fleet's copies in the member.
func (run *memberRun) applyInOrder(ctx context.Context, desired, have, want map[copyKey]*unstructured.Unstructured) error {
	for k := range want {
		if _, ok := desired[k]; !ok && have[k] != nil {
			run.hold(k.gvk) // its override failed: the copy stays as it is
		}
	}
	steps := applyOrder(slices.Collect(maps.Keys(desired)), func(k copyKey) int32 { return run.selectedBy[k].Wave })
	for i, st := range steps {
		ready := true
		for _, k := range st {
			live, err := run.apply(ctx, k, desired[k], have[k], want[k])
			if err != nil {
				return err
			}
			if !run.judge(k, live) {
				ready = false
			}
		}
		if ready || i == len(steps)-1 {
			continue
		}
		waiting := 0
		for _, later := range steps[i+1:] {
			for _, k := range later {
				waiting++
				if have[k] != nil {
					run.hold(k.gvk)
				}
			}
		}
		if run.waiting == nil {
			run.waiting = &failure{reason: fleetv1alpha1.ReasonWaitingForWave, message: fmt.Sprintf("the copies of later waves (%d) wait for %s", waiting, firstOr(run.unavailable, "the copies of an earlier wave"))}
		}
		return nil
	}
	return nil
}

// judge records whether copy k, as the member holds it (nil if it holds
// none), is available, and reports whether it is.
func (run *memberRun) judge(k copyKey, live *unstructured.Unstructured) bool {
	if live == nil {
		return false // failed, waiting or left alone: the run says why
	}
	var rule *availableWhen
	if expr := run.selectedBy[k].AvailableWhen; expr != "" {
		var err error
		if rule, err = compileAvailableWhen(expr); err != nil {
			kerr := availableWhenFailure(k.gvk.Kind, err)
			run.fail(failure{reason: kerr.reason, message: kerr.message})
			return false
		}
	}
	a := availabilityOf(live, rule)
	switch a.state {
	case notAvailable:
		run.unavailable = append(run.unavailable, a.message)
		return false
	case notTracked:
		run.notTracked++
	}
	if gk, ok := definedKind(live); ok && run.waitsFor(gk) {
		// The kind the run waits for is served now: the run is tried
		// again at once, and checks it again.
		run.member.served(gk)
		run.kindArrived = true
	}
	return true
}

// definedKind is the kind obj defines, if it is a CRD.
func definedKind(obj *unstructured.Unstructured) (schema.GroupKind, bool) {
	if obj.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
		return schema.GroupKind{}, false
	}
	group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
	return schema.GroupKind{Group: group, Kind: kind}, kind != ""
}

// waitsFor reports whether the run waits for kind gk.
func (run *memberRun) waitsFor(gk schema.GroupKind) bool {
	for gvk := range run.skipRemoval {
		if gvk.GroupKind() == gk {
			return true
		}
	}
	return false
}

// waitForKind records that the member does not serve gvk yet: its copies
// wait for its CRD, and are not failed.
func (run *memberRun) waitForKind(gvk schema.GroupVersionKind) {
	run.skipRemoval[gvk] = true
	if run.waiting == nil || run.waiting.reason != fleetv1alpha1.ReasonWaitingForKind {
		run.waiting = &failure{reason: fleetv1alpha1.ReasonWaitingForKind, message: fmt.Sprintf("the member does not serve kind %s (%s) yet: its copies wait for its CRD", gvk.Kind, gvk.GroupVersion())}
	}
}

func firstOr(list []string, otherwise string) string {
	if len(list) == 0 {
		return otherwise
	}
	return list[0]
}
