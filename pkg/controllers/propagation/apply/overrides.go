package apply

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// overrideError is an override rule that does not apply to a copy; its
// message names the rule and the copy.
type overrideError struct{ rule, message string }

func (e *overrideError) Error() string { return fmt.Sprintf("override %q %s", e.rule, e.message) }

// Member is what an override may select and substitute: the member's
// name and labels.
type Member struct {
	Name   string
	Labels map[string]string
}

// override applies, in order, each of rules that selects member and copy,
// a copy as DesiredCopy builds it, and returns the names of the rules
// applied. Each rule sees what the rules before it made. copy is changed
// only on success.
func override(copy *unstructured.Unstructured, rules []fleetv1alpha1.Override, member Member) (applied []string, err error) {
	obj, doc := copy.Object, []byte(nil) // doc is obj as JSON, once a rule needs it
	for i := range rules {
		rule := &rules[i]
		if !targets(rule.Target, copy) {
			continue
		}
		what := copy.GetKind() + " " + copy.GetName()
		selected, err := rule.Members.Selects(member.Name, member.Labels)
		if err != nil {
			return nil, &overrideError{rule: rule.Name, message: fmt.Sprintf("does not apply to %s: its members selector: %v", what, err)}
		}
		if !selected {
			continue
		}
		if obj, doc, err = applyRule(obj, doc, rule, member, what); err != nil {
			return nil, err
		}
		applied = append(applied, rule.Name)
	}
	if applied != nil {
		copy.Object = obj
	}
	return applied, nil
}

// targets reports whether t selects copy.
func targets(t fleetv1alpha1.OverrideTarget, copy *unstructured.Unstructured) bool {
	return t.APIVersion == copy.GetAPIVersion() && t.Kind == copy.GetKind() && (t.Name == "" || t.Name == copy.GetName())
}

// applyRule returns obj patched by rule, and as JSON, leaving obj as it
// is. doc is obj as JSON, or nil.
func applyRule(obj map[string]any, doc []byte, rule *fleetv1alpha1.Override, member Member, what string) (map[string]any, []byte, error) {
	fail := func(format string, args ...any) error {
		return &overrideError{rule: rule.Name, message: "does not apply to " + what + ": " + fmt.Sprintf(format, args...)}
	}
	var err error
	if doc == nil {
		if doc, err = json.Marshal(obj); err != nil {
			return nil, nil, fail("%v", err)
		}
	}
	if rule.MergePatch != nil {
		patch, err := substituted(rule.MergePatch, member)
		if err != nil {
			return nil, nil, fail("merge patch: %v", err)
		}
		if doc, err = jsonpatch.MergePatch(doc, patch); err != nil {
			return nil, nil, fail("merge patch: %v", err)
		}
	}
	for _, op := range rule.JSONPatch {
		if doc, err = applyOperation(doc, op, member); err != nil {
			return nil, nil, fail("%s %s: %v", op.Op, op.Path, err)
		}
	}
	var patched map[string]any
	if err := utiljson.Unmarshal(doc, &patched); err != nil || patched == nil {
		return nil, nil, fail("the patched copy is not a JSON object")
	}
	for _, path := range fixedFields {
		before, _, _ := unstructured.NestedFieldNoCopy(obj, path...)
		after, _, _ := unstructured.NestedFieldNoCopy(patched, path...)
		if !reflect.DeepEqual(before, after) {
			return nil, nil, &overrideError{rule: rule.Name, message: "may not change " + strings.Join(path, ".")}
		}
	}
	for _, path := range [][]string{{"metadata", "labels"}, {"metadata", "annotations"}} {
		if _, _, err := unstructured.NestedStringMap(patched, path...); err != nil {
			return nil, nil, fail("%s may hold only strings", strings.Join(path, "."))
		}
	}
	return patched, doc, nil
}

// fixedFields are what an override may not change: what names the copy,
// and what its member's API server owns.
var fixedFields = [][]string{
	{"apiVersion"}, {"kind"}, {"metadata", "name"}, {"metadata", "namespace"}, {"status"},
	{"metadata", "managedFields"}, {"metadata", "ownerReferences"}, {"metadata", "uid"},
	{"metadata", "resourceVersion"}, {"metadata", "generation"}, {"metadata", "creationTimestamp"},
	{"metadata", "deletionTimestamp"}, {"metadata", "finalizers"},
}

// patchOptions apply JSON patches as RFC 6902 says: an add into a
// missing parent fails (a merge patch creates parents), and an array
// index is never negative.
var patchOptions = &jsonpatch.ApplyOptions{EnsurePathExistsOnAdd: false, SupportNegativeIndices: false}

// applyOperation applies op to doc by itself, so that a failure names it.
func applyOperation(doc []byte, op fleetv1alpha1.JSONPatchOperation, member Member) ([]byte, error) {
	operation := map[string]any{"op": op.Op, "path": op.Path}
	switch op.Op {
	case "add", "replace", "test":
		if op.Value == nil || len(op.Value.Raw) == 0 {
			return nil, errors.New("no value")
		}
		value, err := substituted(op.Value, member)
		if err != nil {
			return nil, err
		}
		operation["value"] = json.RawMessage(value)
	case "remove":
	default:
		return nil, errors.New("unknown operation (add, remove, replace and test are known)")
	}
	raw, err := json.Marshal([]any{operation})
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	doc, err = patch.ApplyWithOptions(doc, patchOptions)
	switch {
	case errors.Is(err, jsonpatch.ErrMissing):
		return nil, errors.New("missing path")
	case errors.Is(err, jsonpatch.ErrTestFailed):
		return nil, errors.New("test failed")
	case errors.Is(err, jsonpatch.ErrInvalidIndex):
		return nil, errors.New("invalid index")
	}
	return doc, err
}

// substituted is v, as JSON, with the variables of its string values
// replaced for member. It works on the decoded value, so a label value
// cannot break the JSON.
func substituted(v *apiextensionsv1.JSON, member Member) ([]byte, error) {
	if !bytes.Contains(v.Raw, []byte("$")) && !bytes.Contains(v.Raw, []byte(`\u`)) {
		return v.Raw, nil // no string of it can hold "${", even escaped
	}
	var value any
	if err := utiljson.Unmarshal(v.Raw, &value); err != nil {
		return nil, err
	}
	value, err := substitute(value, member)
	if err != nil {
		return nil, err
	}
	return json.Marshal(value)
}

// substitute replaces the variables of the string values in v, at any
// depth; keys are left as they are.
func substitute(v any, member Member) (any, error) {
	var err error
	switch v := v.(type) {
	case string:
		return expand(v, member)
	case map[string]any:
		for k, e := range v {
			if v[k], err = substitute(e, member); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range v {
			if v[i], err = substitute(e, member); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// expand replaces ${MEMBER_NAME} and ${MEMBER_LABEL:<key>} in s; any
// other ${...} is an error.
func expand(s string, member Member) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		start := strings.Index(s, "${")
		if start < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.IndexByte(s[start:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated variable %q", s[start:])
		}
		name := s[start+2 : start+end]
		b.WriteString(s[:start])
		switch key, isLabel := strings.CutPrefix(name, "MEMBER_LABEL:"); {
		case name == "MEMBER_NAME":
			b.WriteString(member.Name)
		case isLabel:
			value, ok := member.Labels[key]
			if !ok {
				return "", fmt.Errorf("member %s has no label %s", member.Name, key)
			}
			b.WriteString(value)
		default:
			return "", fmt.Errorf("unknown variable ${%s}; known: ${MEMBER_NAME}, ${MEMBER_LABEL:<key>}", name)
		}
		s = s[start+end+1:]
	}
}

// Overridden reports whether a rule of rules may change member's copy of
// hub: one that targets it and selects the member, or whose members
// selector does not parse. A copy no rule changes is the same in every
// member, and may be built once for all of them.
func Overridden(hub *unstructured.Unstructured, rules []fleetv1alpha1.Override, member Member) bool {
	for i := range rules {
		if !targets(rules[i].Target, hub) {
			continue
		}
		if selected, err := rules[i].Members.Selects(member.Name, member.Labels); selected || err != nil {
			return true
		}
	}
	return false
}
