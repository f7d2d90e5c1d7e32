package member

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestMapperReadsLegacyDiscovery(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []string
	)
	docs := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":   `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}}]}`,
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]}]}`,
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.Path)
		mu.Unlock()
		if accept := r.Header.Get("Accept"); strings.Contains(accept, "apidiscovery.k8s.io") {
			t.Errorf("%s asked for %q", r.URL.Path, accept)
		}
		doc, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(doc))
	}))
	defer server.Close()

	mapper, err := newMapper(&rest.Config{Host: server.URL}, server.Client())
	if err != nil {
		t.Fatal(err)
	}
	mapping, err := mapper.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); mapping.Resource != want {
		t.Errorf("ConfigMap maps to %v, want %v", mapping.Resource, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(requests, "/apis/apps/v1") {
		t.Errorf("requests %v read the resources of a group no one asked for", requests)
	}
}
