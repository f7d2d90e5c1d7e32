package apply

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Drift returns the paths of desired's fields whose value live does not
// hold, leaving out those that another manager claimed on purpose (see
// ClaimedByOthers) and RevisionLabel, which says where the copy comes
// from. Fields live has and desired lacks, such as defaults and other
// managers' additions, are not drift. Lists must have the same length;
// their items compare the same way.
func Drift(desired, live *unstructured.Unstructured) []string {
	claimed := ClaimedByOthers(live)
	var paths []string
	var walk func(want, got any, path string)
	walk = func(want, got any, path string) {
		if claimed.covers(path) {
			return
		}
		switch w := want.(type) {
		case map[string]any:
			g, ok := got.(map[string]any)
			if !ok {
				paths = append(paths, path)
				return
			}
			for _, k := range slices.Sorted(maps.Keys(w)) {
				if path == "" && (k == "metadata" || k == "status") {
					continue
				}
				walk(w[k], g[k], path+"."+k)
			}
		case []any:
			g, ok := got.([]any)
			if !ok || len(g) != len(w) {
				paths = append(paths, path)
				return
			}
			for i := range w {
				walk(w[i], g[i], path+"["+strconv.Itoa(i)+"]")
			}
		default:
			if !scalarEqual(want, got) {
				paths = append(paths, path)
			}
		}
	}
	walk(desired.Object, live.Object, "")
	for _, field := range []string{"labels", "annotations"} {
		want, _, _ := unstructured.NestedStringMap(desired.Object, "metadata", field)
		got, _, _ := unstructured.NestedStringMap(live.Object, "metadata", field)
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if field == "labels" && k == fleetv1alpha1.RevisionLabel {
				continue // which revision the copy comes from: no content
			}
			if path := ".metadata." + field + "." + k; got[k] != want[k] && !claimed.covers(path) {
				paths = append(paths, path)
			}
		}
	}
	return paths
}

// scalarEqual compares JSON scalars, an integer and a float of the same
// value being equal.
func scalarEqual(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// Claims are claimed field paths, in Drift's notation (".spec.replicas",
// ".spec.containers[0].image"), each with its map keys when no list lies
// on the way, else nil.
type Claims map[string][]string

// covers reports whether path is claimed, or lies under a claimed field.
func (c Claims) covers(path string) bool {
	if _, ok := c[path]; ok {
		return true
	}
	for i := len(path) - 1; i > 0; i-- {
		if _, ok := c[path[:i]]; ok && (path[i] == '.' || path[i] == '[') {
			return true
		}
	}
	return false
}

// ClaimedByOthers returns the fields of live that another manager claims
// on purpose: one that applied them with server-side apply, or wrote them
// through a subresource, as the HorizontalPodAutoscaler writes replicas
// through scale. Such a field is theirs: it is neither drift nor applied.
// A plain update (kubectl edit, a script) claims nothing: what it changed
// is drift.
func ClaimedByOthers(live *unstructured.Unstructured) Claims {
	c := Claims{}
	for _, entry := range live.GetManagedFields() {
		if entry.Manager == fleetv1alpha1.FieldManager || entry.FieldsV1 == nil {
			continue
		}
		if entry.Operation != metav1.ManagedFieldsOperationApply && entry.Subresource == "" {
			continue
		}
		if entry.Subresource == "status" {
			continue // copies carry no status
		}
		var fields map[string]any
		if err := json.Unmarshal(entry.FieldsV1.Raw, &fields); err != nil {
			continue
		}
		c.add(fields, live.Object, "", []string{})
	}
	return c
}

// add records the leaves of a managedFields field set, resolving list keys
// and values to indices in live.
func (c Claims) add(fields map[string]any, live any, path string, keys []string) {
	for key, sub := range fields {
		if key == "." || len(key) < 2 {
			continue
		}
		var child any
		var childPath string
		var childKeys []string
		switch key[:2] {
		case "f:":
			m, _ := live.(map[string]any)
			child, childPath = m[key[2:]], path+"."+key[2:]
			if keys != nil {
				childKeys = append(slices.Clip(keys), key[2:])
			}
		case "k:", "v:", "i:":
			list, _ := live.([]any)
			i := listIndex(key, list)
			if i < 0 {
				continue
			}
			child, childPath = list[i], path+"["+strconv.Itoa(i)+"]"
		default:
			continue
		}
		subFields, _ := sub.(map[string]any)
		if len(subFields) == 0 {
			c[childPath] = childKeys
			continue
		}
		c.add(subFields, child, childPath, childKeys)
	}
}

// listIndex finds the item of list that a managedFields list key names.
func listIndex(key string, list []any) int {
	switch key[:2] {
	case "i:":
		i, err := strconv.Atoi(key[2:])
		if err != nil || i < 0 || i >= len(list) {
			return -1
		}
		return i
	case "v:":
		var value any
		if json.Unmarshal([]byte(key[2:]), &value) != nil {
			return -1
		}
		for i, item := range list {
			if scalarEqual(value, item) || reflect.DeepEqual(value, item) {
				return i
			}
		}
	case "k:":
		var keys map[string]any
		if json.Unmarshal([]byte(key[2:]), &keys) != nil {
			return -1
		}
	items:
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				continue
			}
			for k, v := range keys {
				if !scalarEqual(v, m[k]) {
					continue items
				}
			}
			return i
		}
	}
	return -1
}

// WithoutClaims removes from obj the map fields others claim, so that
// applying obj does not take them: the HPA keeps replicas.
func WithoutClaims(obj *unstructured.Unstructured, c Claims) {
	for _, keys := range c {
		if len(keys) > 0 && keys[0] != "metadata" {
			unstructured.RemoveNestedField(obj.Object, keys...)
		}
	}
}
