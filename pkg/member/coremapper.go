package member

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// coreKinds are the kinds of the core group's v1 that every Kubernetes
// API server serves, with their scope: their REST mappings never change,
// so a member needs no discovery request to watch them.
var coreKinds = map[string]meta.RESTScope{
	"ConfigMap": meta.RESTScopeNamespace, "Secret": meta.RESTScopeNamespace, "Service": meta.RESTScopeNamespace,
	"Pod": meta.RESTScopeNamespace, "ServiceAccount": meta.RESTScopeNamespace, "Endpoints": meta.RESTScopeNamespace,
	"Event": meta.RESTScopeNamespace, "PersistentVolumeClaim": meta.RESTScopeNamespace, "LimitRange": meta.RESTScopeNamespace,
	"ResourceQuota": meta.RESTScopeNamespace, "ReplicationController": meta.RESTScopeNamespace, "PodTemplate": meta.RESTScopeNamespace,
	"Namespace": meta.RESTScopeRoot, "Node": meta.RESTScopeRoot, "PersistentVolume": meta.RESTScopeRoot,
}

// coreMappings holds the REST mappings of coreKinds.
var coreMappings = func() *meta.DefaultRESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	for kind, scope := range coreKinds {
		m.Add(schema.GroupVersionKind{Version: "v1", Kind: kind}, scope)
	}
	return m
}()

// withCoreMappings answers RESTMapping for coreKinds at once and asks
// next for everything else: the first watch of a member, of ConfigMaps or
// Secrets say, waits for no discovery request.
type withCoreMappings struct{ meta.RESTMapper }

func (m withCoreMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if _, core := coreKinds[gk.Kind]; core && gk.Group == "" && (len(versions) == 0 || slices.Contains(versions, "v1")) {
		return coreMappings.RESTMapping(gk, "v1")
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}
