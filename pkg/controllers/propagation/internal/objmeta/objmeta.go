// Package objmeta reads one label or annotation of an object without
// copying its labels or annotations: unstructured.Unstructured's
// GetLabels and GetAnnotations build a new map at each call, which a
// member run, reading a few of each of every copy, paid per copy and run.
package objmeta

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Label returns obj's label key, and whether obj has it.
func Label(obj metav1.Object, key string) (string, bool) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return lookup(u, "labels", key)
	}
	v, ok := obj.GetLabels()[key]
	return v, ok
}

// Annotation returns obj's annotation key, and whether obj has it.
func Annotation(obj metav1.Object, key string) (string, bool) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return lookup(u, "annotations", key)
	}
	v, ok := obj.GetAnnotations()[key]
	return v, ok
}

// LabelValue is obj's label key, "" if it has none.
func LabelValue(obj metav1.Object, key string) string {
	v, _ := Label(obj, key)
	return v
}

// AnnotationValue is obj's annotation key, "" if it has none.
func AnnotationValue(obj metav1.Object, key string) string {
	v, _ := Annotation(obj, key)
	return v
}

// lookup reads metadata.field.key of u; a value that is not a string is
// none, as GetLabels and GetAnnotations, which then give no map, have it.
func lookup(u *unstructured.Unstructured, field, key string) (string, bool) {
	m, _, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", field)
	values, _ := m.(map[string]any)
	v, ok := values[key].(string)
	return v, ok
}
