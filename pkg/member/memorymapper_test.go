package member

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// discoveryServer serves docs at their paths; the test changes them
// holding mu.
func discoveryServer(t *testing.T, mu *sync.Mutex, docs map[string]string) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		doc, ok := docs[r.URL.Path]
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(doc))
	}))
	t.Cleanup(server.Close)
	return server
}

func TestMappersShareWhatTheyLearn(t *testing.T) {
	docs := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":   `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}]}`,
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]},{"name":"namespaces","singularName":"namespace","namespaced":false,"kind":"Namespace","verbs":["get"]}]}`,
	}
	var mu sync.Mutex
	a := discoveryServer(t, &mu, docs)
	b := discoveryServer(t, &mu, docs)
	c := discoveryServer(t, &mu, map[string]string{
		"/api":    docs["/api"],
		"/apis":   docs["/apis"],
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get"]}]}`,
	})
	var mappers []*lazyMapper
	for _, s := range []*httptest.Server{a, b, c} {
		m, err := newMapper(&rest.Config{Host: s.URL}, s.Client())
		if err != nil {
			t.Fatal(err)
		}
		mapping, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if want := (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); mapping.Resource != want || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Errorf("ConfigMap maps to %v, %s; want %v, namespaced", mapping.Resource, mapping.Scope.Name(), want)
		}
		mappers = append(mappers, m.(*lazyMapper))
	}
	if mappers[0].getMapper() != mappers[1].getMapper() || mappers[0].known[""] != mappers[1].known[""] || mappers[0].groups["example.com"] != mappers[2].groups["example.com"] {
		t.Error("two members that read the same documents do not share what they learned")
	}
	if mappers[0].getMapper() == mappers[2].getMapper() || mappers[0].known[""] == mappers[2].known[""] {
		t.Error("members that read different documents share what they learned")
	}
	if _, err := mappers[2].RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind only another member serves: %v, want no match", err)
	}

	// One member learns a group the other does not know: the other's
	// mappings stay as they were, and the two no longer share a mapper.
	mu.Lock()
	docs["/apis/example.com/v1"] = `{"kind":"APIResourceList","groupVersion":"example.com/v1","resources":[{"name":"widgets","singularName":"widget","namespaced":false,"kind":"Widget","verbs":["get"]}]}`
	mu.Unlock()
	mapping, err := mappers[0].RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Widget"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}); mapping.Resource != want || mapping.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("Widget maps to %v, %s; want %v, cluster-scoped", mapping.Resource, mapping.Scope.Name(), want)
	}
	if mappers[0].getMapper() == mappers[1].getMapper() {
		t.Error("a member that learned a group shares its mapper with one that did not")
	}
	if _, err := mappers[1].getMapper().RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Widget"}); !meta.IsNoMatchError(err) {
		t.Errorf("the other member's mapper maps Widget: %v", err)
	}
	if _, err := mappers[1].RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil {
		t.Error(err)
	}
}

func TestMapperForgetsAGroupVersionGone(t *testing.T) {
	docs := map[string]string{
		"/api":                 `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":                `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}]}`,
		"/apis/example.com/v1": `{"kind":"APIResourceList","groupVersion":"example.com/v1","resources":[{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["get"]}]}`,
	}
	var mu sync.Mutex
	s := discoveryServer(t, &mu, docs)
	m, err := newMapper(&rest.Config{Host: s.URL}, s.Client())
	if err != nil {
		t.Fatal(err)
	}
	widget := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	if _, err := m.RESTMapping(widget); err != nil {
		t.Fatal(err)
	}
	// The CRD moves to v2: a miss for v2 reads v2; v1, gone, is forgotten.
	mu.Lock()
	delete(docs, "/apis/example.com/v1")
	docs["/apis"] = `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v2","version":"v2"}],"preferredVersion":{"groupVersion":"example.com/v2","version":"v2"}}]}`
	docs["/apis/example.com/v2"] = `{"kind":"APIResourceList","groupVersion":"example.com/v2","resources":[{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["get"]}]}`
	mu.Unlock()
	mapping, err := m.RESTMapping(widget, "v2")
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Resource.Version != "v2" {
		t.Errorf("Widget maps to %v, want v2", mapping.Resource)
	}
	if _, err := m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Gadget"}, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind of a version gone: %v, want no match", err)
	}
	lm := m.(*lazyMapper)
	lm.mu.RLock()
	defer lm.mu.RUnlock()
	if g := lm.known["example.com"]; g != nil && g.VersionedResources["v1"] != nil {
		t.Error("the mapper still knows example.com/v1, which is gone")
	}
}
