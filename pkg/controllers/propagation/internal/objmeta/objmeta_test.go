package objmeta

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestLabelAndAnnotation(t *testing.T) {
	t.Parallel()
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{"a": "1", "empty": "", "number": int64(2)},
		"annotations": map[string]any{"b": "2"},
	}}}
	typed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "1", "empty": ""}, Annotations: map[string]string{"b": "2"}}}
	for _, obj := range []metav1.Object{u, typed} {
		for _, tc := range []struct {
			key  string
			want string
			ok   bool
		}{{"a", "1", true}, {"empty", "", true}, {"missing", "", false}} {
			if v, ok := Label(obj, tc.key); v != tc.want || ok != tc.ok {
				t.Errorf("%T: Label(%q) = %q, %v; want %q, %v", obj, tc.key, v, ok, tc.want, tc.ok)
			}
		}
		if v := AnnotationValue(obj, "b"); v != "2" {
			t.Errorf("%T: Annotation(b) = %q, want 2", obj, v)
		}
		if _, ok := Annotation(obj, "a"); ok {
			t.Errorf("%T: a label read as an annotation", obj)
		}
	}
	if _, ok := Label(u, "number"); ok {
		t.Error("a label that is no string was read")
	}
	if _, ok := Label(&unstructured.Unstructured{Object: map[string]any{}}, "a"); ok {
		t.Error("an object without metadata has a label")
	}
}

// TestLabelDoesNotCopy: reading a label or an annotation of an
// unstructured object allocates nothing (GetLabels builds a map).
func TestLabelDoesNotCopy(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
		"labels": map[string]any{"a": "1"}, "annotations": map[string]any{"b": "2"},
	}}}
	if n := testing.AllocsPerRun(100, func() { LabelValue(u, "a"); AnnotationValue(u, "b") }); n != 0 {
		t.Errorf("reading a label and an annotation allocates %v times, want 0", n)
	}
}
