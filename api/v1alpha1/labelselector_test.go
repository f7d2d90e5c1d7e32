package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// selectorPlace is where a Propagation's spec holds a label selector.
type selectorPlace struct {
	name string
	set  func(spec *fleetv1alpha1.PropagationSpec, s *fleetv1alpha1.LabelSelector)
}

var selectorPlaces = []selectorPlace{{
	name: "spec.members.selector",
	set: func(spec *fleetv1alpha1.PropagationSpec, s *fleetv1alpha1.LabelSelector) {
		spec.Members.Selector = s
	},
}, {
	name: "spec.resources[].selector",
	set: func(spec *fleetv1alpha1.PropagationSpec, s *fleetv1alpha1.LabelSelector) {
		spec.Resources = append(spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ConfigMap", Selector: s})
	},
}, {
	name: "spec.overrides[].members.selector",
	set: func(spec *fleetv1alpha1.PropagationSpec, s *fleetv1alpha1.LabelSelector) {
		spec.Overrides = append(spec.Overrides, fleetv1alpha1.Override{
			Name:      fmt.Sprintf("rule-%d", len(spec.Overrides)),
			Members:   fleetv1alpha1.MemberSelector{Selector: s},
			Target:    fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"},
			JSONPatch: []fleetv1alpha1.JSONPatchOperation{{Op: "remove", Path: "/data/color"}},
		})
	},
}}

// TestSelectorsThatDoNotParseAreRefused: a label selector the manager
// could not parse is refused at admission, wherever a Propagation or a
// ClusterPropagation holds one. Each one here fails
// metav1.LabelSelectorAsSelector too: the CRD refuses what the manager
// would have to hold.
func TestSelectorsThatDoNotParseAreRefused(t *testing.T) {
	cl := newClient(t, propagationAPIServer(t))
	in := func(values ...string) *fleetv1alpha1.LabelSelector {
		return &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: values}}}
	}
	withKey := func(key string) *fleetv1alpha1.LabelSelector {
		return &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpExists}}}
	}
	for _, tc := range []struct {
		name string
		sel  *fleetv1alpha1.LabelSelector
	}{
		{"a matchLabels value with a space", fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod west"})},
		{"a matchLabels value of 64 characters", fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": strings.Repeat("a", 64)})},
		{"a matchLabels value that begins with '-'", fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "-prod"})},
		{"a matchLabels key with a space", fleetv1alpha1.SetAsLabelSelector(map[string]string{"env west": "prod"})},
		{"a matchLabels key with an empty prefix", fleetv1alpha1.SetAsLabelSelector(map[string]string{"/env": "prod"})},
		{"an In value with a space", in("prod", "prod west")},
		{"an In value that ends with '.'", in("prod.")},
		{"In without values", in()},
		{"NotIn without values", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpNotIn}}}},
		{"Exists with values", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpExists, Values: []string{"prod"}}}}},
		{"DoesNotExist with values", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpDoesNotExist, Values: []string{"prod"}}}}},
		{"an unknown operator", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: "Near", Values: []string{"prod"}}}}},
		{"an operator of another case", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{{Key: "env", Operator: "in", Values: []string{"prod"}}}}},
		{"an empty key", withKey("")},
		{"a key with a space", withKey("env west")},
		{"a key with two slashes", withKey("example.com/env/west")},
		{"a key whose name has 64 characters", withKey(strings.Repeat("a", 64))},
		{"a key whose prefix is not a DNS subdomain", withKey("Example.com/env")},
		{"a key whose prefix has 254 characters", withKey(subdomain(254) + "/env")},
	} {
		if _, err := tc.sel.AsSelector(); err == nil {
			t.Errorf("%s: the selector parses; the case tests nothing", tc.name)
			continue
		}
		for _, place := range selectorPlaces {
			for _, obj := range propagationsWith(place, tc.sel) {
				err := cl.Create(t.Context(), obj, client.DryRunAll)
				if !apierrors.IsInvalid(err) {
					t.Errorf("%s in %s of a %T: err = %v, want it refused as invalid", tc.name, place.name, obj, err)
				}
			}
		}
	}
}

// TestSelectorsThatParseAreAccepted: the CRD's rules accept every
// selector that parses, up to the largest its bounds allow, wherever a
// Propagation or a ClusterPropagation holds one, and a spec whose every
// selector is that large fits the API server's cost budget.
func TestSelectorsThatParseAreAccepted(t *testing.T) {
	cl := newClient(t, propagationAPIServer(t))
	longestKey := subdomain(253) + "/" + strings.Repeat("k", 63)
	longestValue := strings.Repeat("v", 63)
	fullLabels := func() *fleetv1alpha1.LabelSelector {
		s := &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{}}
		for i := range 64 {
			s.MatchLabels[fmt.Sprintf("%02d%s", i, longestKey[2:])] = fleetv1alpha1.LabelValue(longestValue)
		}
		return s
	}
	full := fullLabels()
	for i := range 32 {
		r := fleetv1alpha1.LabelSelectorRequirement{Key: fmt.Sprintf("%02d%s", i, longestKey[2:]), Operator: metav1.LabelSelectorOpNotIn}
		for j := range 256 {
			r.Values = append(r.Values, fmt.Sprintf("%03d%s", j, longestValue[3:]))
		}
		full.MatchExpressions = append(full.MatchExpressions, r)
	}
	for _, tc := range []struct {
		name string
		sel  *fleetv1alpha1.LabelSelector
	}{
		{"an empty selector", &fleetv1alpha1.LabelSelector{}},
		{"matchLabels", fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod", "example.com/tier": "Gold_1.a-b", "empty": ""})},
		{"each operator", &fleetv1alpha1.LabelSelector{MatchExpressions: []fleetv1alpha1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}},
			{Key: "region", Operator: metav1.LabelSelectorOpNotIn, Values: []string{""}},
			{Key: "fleet.fleetkube.io/member", Operator: metav1.LabelSelectorOpExists},
			{Key: "Legacy_Key.1", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}},
		{"every bound at its largest: 64 labels, 32 expressions of 256 values, the longest keys and values", full},
	} {
		if _, err := tc.sel.AsSelector(); err != nil {
			t.Errorf("%s: the selector does not parse: %v", tc.name, err)
			continue
		}
		for _, place := range selectorPlaces {
			for _, obj := range propagationsWith(place, tc.sel) {
				if err := cl.Create(t.Context(), obj, client.DryRunAll); err != nil {
					t.Errorf("%s in %s of a %T: %v", tc.name, place.name, obj, err)
				}
			}
		}
	}

	// Every selector of the spec at its bounds of keys, the most the key
	// rule can cost: 64 resources, 32 overrides and the members, each with
	// 64 labels of the longest key (2.4 MB). A ClusterPropagation has the
	// same schema and rules.
	spec := fleetv1alpha1.PropagationSpec{}
	selectorPlaces[0].set(&spec, fullLabels())
	for range 64 {
		selectorPlaces[1].set(&spec, fullLabels())
	}
	for range 32 {
		selectorPlaces[2].set(&spec, fullLabels())
	}
	if err := cl.Create(t.Context(), propagationsOf(spec)[0], client.DryRunAll); err != nil {
		t.Errorf("a Propagation whose every selector has 64 labels of the longest key: %v", err)
	}
}

// propagationAPIServer is the package's API server with the Propagation
// and ClusterPropagation CRDs installed.
func propagationAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	apiServer(t, "fleet.fleetkube.io_clusterpropagations.yaml")
	return apiServer(t, "fleet.fleetkube.io_propagations.yaml")
}

// propagationsWith is a Propagation and a ClusterPropagation, each with
// s in place and nothing else amiss.
func propagationsWith(place selectorPlace, s *fleetv1alpha1.LabelSelector) []client.Object {
	spec := fleetv1alpha1.PropagationSpec{}
	place.set(&spec, s)
	if len(spec.Resources) == 0 {
		spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}}
	}
	return propagationsOf(spec)
}

// propagationsOf is a Propagation and a ClusterPropagation of spec.
func propagationsOf(spec fleetv1alpha1.PropagationSpec) []client.Object {
	return []client.Object{
		&fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "selectors"}, Spec: spec},
		&fleetv1alpha1.ClusterPropagation{ObjectMeta: metav1.ObjectMeta{Name: "selectors"}, Spec: spec},
	}
}

// subdomain is a DNS subdomain of n characters: labels of at most 63
// characters, joined by dots.
func subdomain(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.Repeat("d", min(63, n-b.Len())))
	}
	return b.String()
}
