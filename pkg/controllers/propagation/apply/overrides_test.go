package apply

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// east is the member the tests override copies for.
var east = Member{Name: "east", Labels: map[string]string{"region": "eu", "tier": "gold"}}

// webCopy is a Deployment copy as DesiredCopy builds it, before the
// fleet's labels and annotations.
func webCopy() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"namespace": "team-a", "name": "web", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": int64(2),
			"strategy": map[string]any{"type": "RollingUpdate"},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "web", "image": "registry.example/web:1",
					"ports": []any{map[string]any{"containerPort": int64(8080)}},
				}}},
			},
		},
	}}
}

func rawJSON(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

func patchOp(op, path, value string) fleetv1alpha1.JSONPatchOperation {
	o := fleetv1alpha1.JSONPatchOperation{Op: op, Path: path}
	if value != "" {
		o.Value = rawJSON(value)
	}
	return o
}

// deploymentRule is a rule named name that patches every Deployment
// with ops.
func deploymentRule(name string, ops ...fleetv1alpha1.JSONPatchOperation) fleetv1alpha1.Override {
	return fleetv1alpha1.Override{Name: name, Target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment"}, JSONPatch: ops}
}

// mergeRule is a rule named name that merges patch into every Deployment.
func mergeRule(name, patch string) fleetv1alpha1.Override {
	return fleetv1alpha1.Override{Name: name, Target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment"}, MergePatch: rawJSON(patch)}
}

// valueAt is the value at the dotted path of c, where a list's item is
// named by its index: "spec.template.spec.containers.0.image". It is nil
// where c has none.
func valueAt(t *testing.T, c *unstructured.Unstructured, path string) any {
	t.Helper()
	var v any = c.Object
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				t.Fatalf("%s: no item %s", path, k)
			}
			v = x[i]
		default:
			t.Fatalf("%s: %s is under a %T", path, k, v)
		}
	}
	return v
}

func TestOverrideSelectsMembersAndCopies(t *testing.T) {
	byRegion := func(region string) *fleetv1alpha1.LabelSelector {
		return fleetv1alpha1.SetAsLabelSelector(map[string]string{"region": region})
	}
	for _, tc := range []struct {
		name    string
		members fleetv1alpha1.MemberSelector
		target  fleetv1alpha1.OverrideTarget
		applies bool
	}{
		{name: "every member, every copy of the kind", target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment"}, applies: true},
		{name: "the copy by name", target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, applies: true},
		{name: "another copy by name", target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"}},
		{name: "another kind", target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "StatefulSet"}},
		{name: "another apiVersion", target: fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1beta2", Kind: "Deployment"}},
		{name: "the member by name", members: fleetv1alpha1.MemberSelector{Names: []string{"west", "east"}}, applies: true},
		{name: "other members by name", members: fleetv1alpha1.MemberSelector{Names: []string{"west"}}},
		{name: "the member by label", members: fleetv1alpha1.MemberSelector{Selector: byRegion("eu")}, applies: true},
		{name: "other members by label", members: fleetv1alpha1.MemberSelector{Selector: byRegion("us")}},
		{name: "by name but not by label", members: fleetv1alpha1.MemberSelector{Names: []string{"east"}, Selector: byRegion("us")}},
		{name: "by label and name", members: fleetv1alpha1.MemberSelector{Names: []string{"east"}, Selector: byRegion("eu")}, applies: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := deploymentRule("replicas", patchOp("replace", "/spec/replicas", "5"))
			rule.Members = tc.members
			if tc.target.Kind != "" {
				rule.Target = tc.target
			}
			c := webCopy()
			applied, err := override(c, []fleetv1alpha1.Override{rule}, east)
			if err != nil {
				t.Fatal(err)
			}
			want, replicas := []string(nil), int64(2)
			if tc.applies {
				want, replicas = []string{"replicas"}, 5
			}
			if !slices.Equal(applied, want) || valueAt(t, c, "spec.replicas") != replicas {
				t.Errorf("applied %v, replicas %v; want %v, %d", applied, valueAt(t, c, "spec.replicas"), want, replicas)
			}
		})
	}
}

func TestOverrideInvalidMembersSelectorNamesTheRule(t *testing.T) {
	rule := deploymentRule("bad", patchOp("replace", "/spec/replicas", "5"))
	rule.Members.Selector = &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "region", Operator: "Near"}}}
	_, err := override(webCopy(), []fleetv1alpha1.Override{rule}, east)
	var oe *overrideError
	if !errors.As(err, &oe) || !strings.HasPrefix(err.Error(), `override "bad" does not apply to Deployment web: its members selector: `) {
		t.Errorf("err = %v, want an overrideError naming the rule and its members selector", err)
	}
}

func TestOverridePatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rule  fleetv1alpha1.Override
		check func(t *testing.T, c *unstructured.Unstructured)
		err   string // the whole error, if it fails
	}{{
		name:  "replace",
		rule:  deploymentRule("r", patchOp("replace", "/spec/template/spec/containers/0/image", `"mirror.example/web:1"`)),
		check: wantField("spec.template.spec.containers.0.image", "mirror.example/web:1"),
	}, {
		name:  "add a label",
		rule:  deploymentRule("r", patchOp("add", "/metadata/labels/tier", `"gold"`)),
		check: wantField("metadata.labels", map[string]any{"app": "web", "tier": "gold"}),
	}, {
		name:  "add a label whose key holds a slash",
		rule:  deploymentRule("r", patchOp("add", "/metadata/labels/example.com~1tier", `"gold"`)),
		check: wantField("metadata.labels", map[string]any{"app": "web", "example.com/tier": "gold"}),
	}, {
		name:  "add to a list",
		rule:  deploymentRule("r", patchOp("add", "/spec/template/spec/containers/-", `{"name":"proxy","image":"proxy:2"}`)),
		check: wantLength("spec.template.spec.containers", 2),
	}, {
		name: "add into a missing parent",
		rule: deploymentRule("r", patchOp("add", "/spec/template/spec/nodeSelector/zone", `"a"`)),
		err:  `override "r" does not apply to Deployment web: add /spec/template/spec/nodeSelector/zone: missing path`,
	}, {
		name: "a negative index",
		rule: deploymentRule("r", patchOp("replace", "/spec/template/spec/containers/-1/image", `"x"`)),
		err:  `override "r" does not apply to Deployment web: replace /spec/template/spec/containers/-1/image: missing path`,
	}, {
		name:  "remove",
		rule:  deploymentRule("r", patchOp("remove", "/spec/strategy", "")),
		check: wantField("spec.strategy", nil),
	}, {
		name:  "test, then replace",
		rule:  deploymentRule("r", patchOp("test", "/spec/replicas", "2"), patchOp("replace", "/spec/replicas", "4")),
		check: wantField("spec.replicas", int64(4)),
	}, {
		name: "a test that fails",
		rule: deploymentRule("r", patchOp("test", "/spec/replicas", "3"), patchOp("replace", "/spec/replicas", "4")),
		err:  `override "r" does not apply to Deployment web: test /spec/replicas: test failed`,
	}, {
		name: "a missing path",
		rule: deploymentRule("eu-replicas", patchOp("replace", "/spec/replicaz", "3")),
		err:  `override "eu-replicas" does not apply to Deployment web: replace /spec/replicaz: missing path`,
	}, {
		name: "a missing value",
		rule: deploymentRule("r", patchOp("replace", "/spec/replicas", "")),
		err:  `override "r" does not apply to Deployment web: replace /spec/replicas: no value`,
	}, {
		name: "an unknown operation",
		rule: deploymentRule("r", patchOp("move", "/spec/replicas", "")),
		err:  `override "r" does not apply to Deployment web: move /spec/replicas: unknown operation (add, remove, replace and test are known)`,
	}, {
		name: "a label that is not a string",
		rule: mergeRule("r", `{"metadata":{"labels":{"replicas":3}}}`),
		err:  `override "r" does not apply to Deployment web: metadata.labels may hold only strings`,
	}, {
		name: "annotations that are not a map",
		rule: deploymentRule("r", patchOp("add", "/metadata/annotations", `"x"`)),
		err:  `override "r" does not apply to Deployment web: metadata.annotations may hold only strings`,
	}, {
		name:  "a merge patch",
		rule:  mergeRule("r", `{"metadata":{"annotations":{"note":"eu"}},"spec":{"strategy":null,"replicas":6}}`),
		check: allOf(wantField("metadata.annotations", map[string]any{"note": "eu"}), wantField("spec.strategy", nil), wantField("spec.replicas", int64(6))),
	}, {
		name:  "a merge patch replaces lists",
		rule:  mergeRule("r", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"mirror.example/web:1"}]}}}}`),
		check: allOf(wantField("spec.template.spec.containers.0.image", "mirror.example/web:1"), wantField("spec.template.spec.containers.0.ports", nil)),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := webCopy()
			applied, err := override(c, []fleetv1alpha1.Override{tc.rule}, east)
			if tc.err != "" {
				var oe *overrideError
				if !errors.As(err, &oe) || err.Error() != tc.err {
					t.Fatalf("err = %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(applied, []string{tc.rule.Name}) {
				t.Fatalf("override = %v, %v", applied, err)
			}
			tc.check(t, c)
		})
	}
}

func wantField(path string, want any) func(*testing.T, *unstructured.Unstructured) {
	return func(t *testing.T, c *unstructured.Unstructured) {
		t.Helper()
		if got := valueAt(t, c, path); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
}

func wantLength(path string, want int) func(*testing.T, *unstructured.Unstructured) {
	return func(t *testing.T, c *unstructured.Unstructured) {
		t.Helper()
		if got, _ := valueAt(t, c, path).([]any); len(got) != want {
			t.Errorf("%s has %d items, want %d", path, len(got), want)
		}
	}
}

func allOf(checks ...func(*testing.T, *unstructured.Unstructured)) func(*testing.T, *unstructured.Unstructured) {
	return func(t *testing.T, c *unstructured.Unstructured) {
		t.Helper()
		for _, check := range checks {
			check(t, c)
		}
	}
}

func TestOverrideVariables(t *testing.T) {
	quoted := Member{Name: "east", Labels: map[string]string{"note": `say "hi" \ bye`}}
	for _, tc := range []struct {
		name   string
		member Member
		rule   fleetv1alpha1.Override
		check  func(t *testing.T, c *unstructured.Unstructured)
		err    string // the whole error, if it fails
	}{{
		name:  "the member's name",
		rule:  deploymentRule("r", patchOp("add", "/metadata/labels/member", `"${MEMBER_NAME}"`)),
		check: wantField("metadata.labels.member", "east"),
	}, {
		name:  "a label, within a string",
		rule:  deploymentRule("r", patchOp("replace", "/spec/template/spec/containers/0/image", `"registry.${MEMBER_LABEL:region}.example/web:${MEMBER_LABEL:tier}"`)),
		check: wantField("spec.template.spec.containers.0.image", "registry.eu.example/web:gold"),
	}, {
		name: "at any depth of a JSON patch value, not in keys",
		rule: deploymentRule("r", patchOp("add", "/spec/extra", `{"${MEMBER_NAME}":["${MEMBER_LABEL:region}",{"n":"${MEMBER_NAME}"},7]}`)),
		check: wantField("spec.extra", map[string]any{
			"${MEMBER_NAME}": []any{"eu", map[string]any{"n": "east"}, int64(7)},
		}),
	}, {
		name:  "not in paths",
		rule:  deploymentRule("r", patchOp("add", "/metadata/labels/${MEMBER_NAME}", `"x"`)),
		check: wantField("metadata.labels", map[string]any{"app": "web", "${MEMBER_NAME}": "x"}),
	}, {
		name:  "at any depth of a merge patch, not in keys",
		rule:  mergeRule("r", `{"metadata":{"labels":{"region":"${MEMBER_LABEL:region}","${MEMBER_NAME}":"k"}},"spec":{"template":{"spec":{"containers":[{"name":"web","image":"registry.${MEMBER_LABEL:region}.example/web:1","args":["--member=${MEMBER_NAME}"]}]}}}}`),
		check: allOf(wantField("metadata.labels", map[string]any{"app": "web", "region": "eu", "${MEMBER_NAME}": "k"}), wantField("spec.template.spec.containers.0.image", "registry.eu.example/web:1"), wantField("spec.template.spec.containers.0.args", []any{"--member=east"})),
	}, {
		name:   "a label value with a quote and a backslash",
		member: quoted,
		rule:   deploymentRule("r", patchOp("add", "/metadata/annotations", `{"note":"${MEMBER_LABEL:note}!"}`)),
		check:  wantField("metadata.annotations", map[string]any{"note": `say "hi" \ bye!`}),
	}, {
		name:   "a label value with a quote and a backslash, in a merge patch",
		member: quoted,
		rule:   mergeRule("r", `{"metadata":{"annotations":{"note":"${MEMBER_LABEL:note}"}}}`),
		check:  wantField("metadata.annotations", map[string]any{"note": `say "hi" \ bye`}),
	}, {
		name:   "a value that holds a variable's text is not expanded again",
		member: Member{Name: "${MEMBER_LABEL:x}"},
		rule:   deploymentRule("r", patchOp("add", "/metadata/labels/m", `"${MEMBER_NAME}"`)),
		check:  wantField("metadata.labels.m", "${MEMBER_LABEL:x}"),
	}, {
		name:  "a variable written with JSON escapes",
		rule:  deploymentRule("r", patchOp("add", "/metadata/labels/member", `"\u0024\u007bMEMBER_NAME}"`)),
		check: wantField("metadata.labels.member", "east"),
	}, {
		name: "a label the member lacks",
		rule: deploymentRule("r", patchOp("add", "/metadata/labels/zone", `"${MEMBER_LABEL:zone}"`)),
		err:  `override "r" does not apply to Deployment web: add /metadata/labels/zone: member east has no label zone`,
	}, {
		name: "a label the member lacks, in a merge patch",
		rule: mergeRule("r", `{"metadata":{"labels":{"zone":"${MEMBER_LABEL:zone}"}}}`),
		err:  `override "r" does not apply to Deployment web: merge patch: member east has no label zone`,
	}, {
		name: "an unknown variable",
		rule: deploymentRule("r", patchOp("add", "/metadata/labels/x", `"${FOO}"`)),
		err:  `override "r" does not apply to Deployment web: add /metadata/labels/x: unknown variable ${FOO}; known: ${MEMBER_NAME}, ${MEMBER_LABEL:<key>}`,
	}, {
		name: "an unterminated variable",
		rule: deploymentRule("r", patchOp("add", "/metadata/labels/x", `"a${MEMBER_NAME"`)),
		err:  `override "r" does not apply to Deployment web: add /metadata/labels/x: unterminated variable "${MEMBER_NAME"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			member := tc.member
			if member.Name == "" {
				member = east
			}
			c := webCopy()
			_, err := override(c, []fleetv1alpha1.Override{tc.rule}, member)
			if tc.err != "" {
				var oe *overrideError
				if !errors.As(err, &oe) || err.Error() != tc.err {
					t.Fatalf("err = %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestOverrideMayNotChangeWhatNamesTheCopyOrWhatTheServerOwns(t *testing.T) {
	for _, tc := range []struct {
		rule  fleetv1alpha1.Override
		field string
	}{
		{deploymentRule("r", patchOp("replace", "/metadata/name", `"api"`)), "metadata.name"},
		{deploymentRule("r", patchOp("remove", "/metadata/namespace", "")), "metadata.namespace"},
		{deploymentRule("r", patchOp("replace", "/apiVersion", `"apps/v1beta2"`)), "apiVersion"},
		{deploymentRule("r", patchOp("replace", "/kind", `"StatefulSet"`)), "kind"},
		{deploymentRule("r", patchOp("add", "/status", `{"replicas":1}`)), "status"},
		{deploymentRule("r", patchOp("replace", "/metadata", `{"name":"web","namespace":"team-a","uid":"u"}`)), "metadata.uid"},
		{mergeRule("r", `{"metadata":{"namespace":"team-b"}}`), "metadata.namespace"},
		{mergeRule("r", `{"metadata":{"managedFields":[{"manager":"x"}]}}`), "metadata.managedFields"},
		{mergeRule("r", `{"metadata":{"ownerReferences":[{"name":"x"}]}}`), "metadata.ownerReferences"},
		{mergeRule("r", `{"metadata":{"resourceVersion":"7"}}`), "metadata.resourceVersion"},
		{mergeRule("r", `{"metadata":{"generation":3}}`), "metadata.generation"},
		{mergeRule("r", `{"metadata":{"creationTimestamp":"2026-11-24T00:00:00Z"}}`), "metadata.creationTimestamp"},
		{mergeRule("r", `{"metadata":{"deletionTimestamp":"2026-11-24T00:00:00Z"}}`), "metadata.deletionTimestamp"},
		{mergeRule("r", `{"metadata":{"finalizers":["x"]}}`), "metadata.finalizers"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := override(webCopy(), []fleetv1alpha1.Override{tc.rule}, east)
			var oe *overrideError
			if want := `override "r" may not change ` + tc.field; !errors.As(err, &oe) || err.Error() != want {
				t.Errorf("err = %v, want %s", err, want)
			}
		})
	}
	t.Run("labels and annotations", func(t *testing.T) {
		rule := mergeRule("r", `{"metadata":{"labels":{"app":null,"tier":"gold"},"annotations":{"note":"x"}}}`)
		if _, err := override(webCopy(), []fleetv1alpha1.Override{rule}, east); err != nil {
			t.Error(err)
		}
	})
}

func TestOverrideLeavesTheCopyAsItIsOnError(t *testing.T) {
	rules := []fleetv1alpha1.Override{
		mergeRule("image", `{"metadata":{"labels":{"region":"${MEMBER_LABEL:region}"}}}`),
		deploymentRule("replicas", patchOp("replace", "/spec/replicas", "3"), patchOp("replace", "/spec/replicaz", "3")),
	}
	wantRules := []fleetv1alpha1.Override{*rules[0].DeepCopy(), *rules[1].DeepCopy()}
	c := webCopy()
	obj := c.Object
	if applied, err := override(c, rules, east); err == nil || applied != nil {
		t.Fatalf("override = %v, %v, want an error", applied, err)
	}
	if !reflect.DeepEqual(c.Object, webCopy().Object) || !reflect.DeepEqual(c.Object, obj) {
		t.Errorf("the copy changed: %v", c.Object)
	}
	if !reflect.DeepEqual(rules, wantRules) {
		t.Errorf("the rules changed: %v", rules)
	}
}

func TestOverrideKeepsIntegersInt64(t *testing.T) {
	c := webCopy()
	rules := []fleetv1alpha1.Override{
		deploymentRule("replicas", patchOp("replace", "/spec/replicas", "3")),
		mergeRule("deadline", `{"spec":{"progressDeadlineSeconds":600,"template":{"spec":{"terminationGracePeriodSeconds":30.5}}}}`),
	}
	if _, err := override(c, rules, east); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"spec.replicas":                int64(3),
		"spec.progressDeadlineSeconds": int64(600),
		"spec.template.spec.containers.0.ports.0.containerPort": int64(8080),
		"spec.template.spec.terminationGracePeriodSeconds":      30.5,
	} {
		if got := valueAt(t, c, path); got != want {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
	// DeepCopyJSON, as drift and the clients use it, panics on a number
	// that is neither int64 nor float64.
	if !reflect.DeepEqual(c.Object, runtime.DeepCopyJSON(c.Object)) {
		t.Error("the copy holds values that are not JSON values")
	}
}

func TestOverrideAppliesRulesInOrder(t *testing.T) {
	three := deploymentRule("three", patchOp("replace", "/spec/replicas", "3"))
	fromThree := deploymentRule("from-three", patchOp("test", "/spec/replicas", "3"), patchOp("replace", "/spec/replicas", "4"))
	skipped := deploymentRule("skipped", patchOp("replace", "/spec/replicas", "9"))
	skipped.Members.Names = []string{"west"}

	c := webCopy()
	applied, err := override(c, []fleetv1alpha1.Override{three, skipped, fromThree}, east)
	if err != nil || !slices.Equal(applied, []string{"three", "from-three"}) || valueAt(t, c, "spec.replicas") != int64(4) {
		t.Errorf("override = %v, %v, replicas %v; want [three from-three], 4", applied, err, valueAt(t, c, "spec.replicas"))
	}
	if _, err := override(webCopy(), []fleetv1alpha1.Override{fromThree, three}, east); err == nil || !strings.Contains(err.Error(), `"from-three"`) {
		t.Errorf("err = %v, want from-three's test to fail before three", err)
	}
}

func TestOverrideWithoutRulesThatApplyLeavesTheCopy(t *testing.T) {
	c := webCopy()
	obj := c.Object
	other := deploymentRule("other", patchOp("replace", "/spec/replicaz", "3"))
	other.Target.Name = "api"
	applied, err := override(c, []fleetv1alpha1.Override{other}, east)
	if err != nil || applied != nil || !reflect.DeepEqual(c.Object, webCopy().Object) || !reflect.DeepEqual(c.Object, obj) {
		t.Errorf("override = %v, %v, copy %v; want nothing applied, the copy unchanged", applied, err, c.Object)
	}
}

// BenchmarkOverride is the cost of overrides per copy: a Deployment of
// two containers, a rule that selects no member, a JSON patch and a merge
// patch with a variable.
func BenchmarkOverride(b *testing.B) {
	container := func(name, image string) map[string]any {
		return map[string]any{
			"name": name, "image": image,
			"args":  []any{"--port=8080", "--log-level=info"},
			"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080), "protocol": "TCP"}},
			"env": []any{
				map[string]any{"name": "MODE", "value": "production"},
				map[string]any{"name": "CACHE_SIZE", "value": "256"},
				map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
			},
			"resources": map[string]any{
				"requests": map[string]any{"cpu": "250m", "memory": "256Mi"},
				"limits":   map[string]any{"cpu": "1", "memory": "512Mi"},
			},
			"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": int64(8080)}, "periodSeconds": int64(10)},
		}
	}
	c := webCopy()
	template := c.Object["spec"].(map[string]any)["template"].(map[string]any)
	template["spec"] = map[string]any{"containers": []any{
		container("web", "registry.example/web:1.4.2"),
		container("sidecar", "registry.example/proxy:2.1.0"),
	}}
	copyContent := c.Object
	pinned := deploymentRule("pinned", patchOp("replace", "/spec/replicas", "1"))
	pinned.Members.Names = []string{"west"}
	rules := []fleetv1alpha1.Override{
		pinned,
		deploymentRule("replicas", patchOp("replace", "/spec/replicas", "3")),
		mergeRule("registry", `{"spec":{"template":{"spec":{"containers":[`+
			`{"name":"web","image":"registry.${MEMBER_LABEL:region}.example/web:1.4.2"},`+
			`{"name":"sidecar","image":"registry.${MEMBER_LABEL:region}.example/proxy:2.1.0"}]}}}}`),
	}
	rules[2].Members.Selector = fleetv1alpha1.SetAsLabelSelector(map[string]string{"region": "eu"})
	b.ReportAllocs()
	for b.Loop() {
		c := &unstructured.Unstructured{Object: copyContent}
		if applied, err := override(c, rules, east); err != nil || len(applied) != 2 {
			b.Fatal(applied, err)
		}
	}
}
