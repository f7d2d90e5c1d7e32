package apply

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/health"
)

// applyInOrder applies the desired copies step by step (see Order)
// and judges each copy's availability: the copies of a step are applied
// once every copy of the earlier steps is applied and Available. Copies
// of the steps that wait are left as they are. want are the hub objects
// wanted, have the fleet's copies in the member.
func (run *Run) applyInOrder(ctx context.Context, desired, have, want map[Key]*unstructured.Unstructured) error {
	for k := range want {
		if _, ok := desired[k]; !ok && have[k] != nil {
			run.Hold(k.GVK) // its override failed: the copy stays as it is
		}
	}
	steps := Order(slices.Collect(maps.Keys(desired)), Key.kindAndName, func(k Key) int32 { return run.selectedBy[k].Wave })
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
					run.Hold(k.GVK)
				}
			}
		}
		if run.Waiting == nil {
			run.Waiting = &Failure{Reason: fleetv1alpha1.ReasonWaitingForWave, Message: fmt.Sprintf("the copies of later waves (%d) wait for %s", waiting, firstOr(run.Unavailable, "the copies of an earlier wave"))}
		}
		return nil
	}
	return nil
}

// judge records whether copy k, as the member holds it (nil if it holds
// none), is available, and reports whether it is.
func (run *Run) judge(k Key, live *unstructured.Unstructured) bool {
	if live == nil {
		return false // failed, waiting or left alone: the run says why
	}
	var rule *health.Rule
	if expr := run.selectedBy[k].AvailableWhen; expr != "" {
		var err error
		if rule, err = health.Compile(expr); err != nil {
			rerr := health.UnusableRule(k.GVK.Kind, err)
			run.Fail(Failure{Reason: rerr.Reason, Message: rerr.Message})
			return false
		}
	}
	a := health.Of(live, rule)
	switch a.State {
	case health.NotAvailable:
		run.Unavailable = append(run.Unavailable, a.Message)
		return false
	case health.NotTracked:
		run.NotTracked++
	}
	if gk, ok := definedKind(live); ok && run.waitsFor(gk) {
		// The kind the run waits for is served now: the run is tried
		// again at once, and checks it again.
		run.member.Cache.Served(gk)
		run.KindArrived = true
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
func (run *Run) waitsFor(gk schema.GroupKind) bool {
	for gvk := range run.skipRemoval {
		if gvk.GroupKind() == gk {
			return true
		}
	}
	return false
}

// waitForKind records that the member does not serve gvk yet: its copies
// wait for its CRD, and are not failed.
func (run *Run) waitForKind(gvk schema.GroupVersionKind) {
	run.skipRemoval[gvk] = true
	if run.Waiting == nil || run.Waiting.Reason != fleetv1alpha1.ReasonWaitingForKind {
		run.Waiting = &Failure{Reason: fleetv1alpha1.ReasonWaitingForKind, Message: fmt.Sprintf("the member does not serve kind %s (%s) yet: its copies wait for its CRD", gvk.Kind, gvk.GroupVersion())}
	}
}

func firstOr(list []string, otherwise string) string {
	if len(list) == 0 {
		return otherwise
	}
	return list[0]
}

// kindAndName is what Order sorts k by.
func (k Key) kindAndName() (schema.GroupVersionKind, string) { return k.GVK, k.Name }
