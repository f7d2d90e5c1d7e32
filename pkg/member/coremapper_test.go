package member

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// askedMapper fails every request, and counts them.
type askedMapper struct {
	meta.RESTMapper
	asked int
}

var errAsked = errors.New("asked the member")

func (m *askedMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	m.asked++
	return nil, errAsked
}

// TestCoreKindsNeedNoDiscovery: the core kinds every API server serves are
// mapped without asking the member; every other kind, or another version,
// is asked.
func TestCoreKindsNeedNoDiscovery(t *testing.T) {
	next := &askedMapper{}
	m := withCoreMappings{next}
	for gk, want := range map[schema.GroupKind]struct {
		resource string
		scope    meta.RESTScopeName
	}{
		{Kind: "ConfigMap"}: {"configmaps", meta.RESTScopeNameNamespace},
		{Kind: "Endpoints"}: {"endpoints", meta.RESTScopeNameNamespace},
		{Kind: "Namespace"}: {"namespaces", meta.RESTScopeNameRoot},
	} {
		mapping, err := m.RESTMapping(gk, "v1")
		if err != nil || mapping.Resource != (schema.GroupVersionResource{Version: "v1", Resource: want.resource}) || mapping.Scope.Name() != want.scope {
			t.Errorf("%s: %+v, %v; want %s, %s", gk.Kind, mapping, err, want.resource, want.scope)
		}
	}
	if next.asked != 0 {
		t.Fatalf("the member was asked %d times for core kinds", next.asked)
	}
	for _, ask := range []struct {
		gk       schema.GroupKind
		versions []string
	}{
		{schema.GroupKind{Group: "apps", Kind: "Deployment"}, []string{"v1"}},
		{schema.GroupKind{Group: "example.com", Kind: "ConfigMap"}, nil},
		{schema.GroupKind{Kind: "ConfigMap"}, []string{"v2"}},
	} {
		if _, err := m.RESTMapping(ask.gk, ask.versions...); !errors.Is(err, errAsked) {
			t.Errorf("%s %v: %v, want the member asked", ask.gk, ask.versions, err)
		}
	}
}
