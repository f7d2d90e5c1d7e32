package member

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWritesWaitForTheGate pins which requests the gate of a replica that
// cannot prove its Lease refuses (every one that could change the member)
// and that a refused request is not sent.
func TestWritesWaitForTheGate(t *testing.T) {
	t.Parallel()
	noProof := errors.New("no proof")
	for _, c := range []struct {
		method, path string
		sent         bool
	}{
		{http.MethodGet, "/api/v1/namespaces/a/configmaps", true},
		{http.MethodHead, "/version", true},
		{http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", true},
		{http.MethodPost, "/api/v1/namespaces/a/configmaps", false},
		{http.MethodPost, "/api/v1/namespaces/a/serviceaccounts/b/token", false},
		{http.MethodPut, "/api/v1/namespaces/a/configmaps/b", false},
		{http.MethodPatch, "/api/v1/namespaces/a/configmaps/b", false},
		{http.MethodDelete, "/api/v1/namespaces/a/configmaps/b", false},
	} {
		sent := false
		g := gatedWrites{name: "m", mayWrite: func(string) error { return noProof }, next: sender(func(*http.Request) {
			sent = true
		})}
		_, err := g.RoundTrip(httptest.NewRequest(c.method, "https://member"+c.path, nil))
		if sent != c.sent || (err == nil) != c.sent || (err != nil && !errors.Is(err, noProof)) {
			t.Errorf("%s %s without proof: sent %v, err %v; want sent %v", c.method, c.path, sent, err, c.sent)
		}
	}
}

type sender func(*http.Request)

func (s sender) RoundTrip(req *http.Request) (*http.Response, error) {
	s(req)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}
