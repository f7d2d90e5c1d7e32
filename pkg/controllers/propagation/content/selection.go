package content

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// SelectsObject reports whether a resource selector of p selects obj,
// a hub object of p's namespace; never when obj is nil.
func SelectsObject(p *fleetv1alpha1.Propagation, obj client.Object) bool {
	if obj == nil {
		return false
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	for _, sel := range p.Spec.Resources {
		if kind, err := ResourceKind(sel); err != nil || kind != gvk || (sel.Name != "" && sel.Name != obj.GetName()) {
			continue
		}
		if sel.Selector == nil {
			return true
		}
		if s, err := LabelSelector(sel); err == nil && s.Matches(labels.Set(obj.GetLabels())) {
			return true
		}
	}
	return false
}

// ResourceKind is the kind sel selects.
func ResourceKind(sel fleetv1alpha1.ResourceSelector) (schema.GroupVersionKind, error) {
	gv, err := schema.ParseGroupVersion(sel.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, &Error{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("apiVersion %q: %v", sel.APIVersion, err)}
	}
	return gv.WithKind(sel.Kind), nil
}

// LabelSelector is sel's label selector.
func LabelSelector(sel fleetv1alpha1.ResourceSelector) (labels.Selector, error) {
	s, err := sel.Selector.AsSelector()
	if err != nil {
		return nil, &Error{Reason: fleetv1alpha1.ReasonInvalidSelector, Message: fmt.Sprintf("the selector of %s: %v", sel.Kind, err)}
	}
	return s, nil
}
