package member

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"net/http"
	"net/url"
	"reflect"
	"sync/atomic"

	"golang.org/x/oauth2"
	"k8s.io/client-go/rest"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// credentials are one kubeconfig of a member, parsed. A rotation replaces
// them whole; the member's transport reads the current token at every
// request and the current client certificate at every TLS handshake.
type credentials struct {
	// fingerprint is the hash of the kubeconfig bytes.
	fingerprint [sha256.Size]byte
	// config is the kubeconfig as Policy.Parse returned it, credentials
	// included, to compare the next kubeconfig with.
	config *rest.Config
	token  string
	// cert is nil when the kubeconfig has no client certificate.
	cert *tls.Certificate
}

func newCredentials(fingerprint [sha256.Size]byte, cfg *rest.Config) (*credentials, error) {
	c := &credentials{fingerprint: fingerprint, config: cfg, token: cfg.BearerToken}
	if len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, kubeconfig.Refuse("KubeconfigInvalid", "client-certificate-data and client-key-data are not a matching certificate and key")
		}
		c.cert = &cert
	}
	return c, nil
}

// rotatable reports whether cfg authenticates with nothing but a bearer
// token or a client certificate, or both, which a member can replace in
// place. Exec plugins and basic auth keep client-go's own handling.
func rotatable(cfg *rest.Config) bool {
	return cfg.ExecProvider == nil && cfg.AuthProvider == nil && cfg.Username == "" && cfg.Password == ""
}

// credentialsOnly reports whether parsed kubeconfigs a and b differ in
// nothing but their bearer token and client certificate and key, with the
// same kinds present in both. Anything else, such as the server, CA, TLS
// server name, proxy or insecure flag, needs a new member.
func credentialsOnly(a, b *rest.Config) bool {
	if !rotatable(a) || !rotatable(b) ||
		(a.BearerToken == "") != (b.BearerToken == "") ||
		(len(a.CertData) == 0) != (len(b.CertData) == 0) ||
		proxyURL(a) != proxyURL(b) {
		return false
	}
	return reflect.DeepEqual(withoutCredentials(a), withoutCredentials(b))
}

// withoutCredentials returns a shallow copy of cfg without its token,
// client certificate and proxy function, which DeepEqual cannot compare.
func withoutCredentials(cfg *rest.Config) rest.Config {
	c := *cfg
	c.BearerToken = ""
	c.CertData, c.KeyData = nil, nil
	c.Proxy = nil
	return c
}

// proxyURL returns the proxy of cfg. clientcmd sets it as http.ProxyURL,
// which gives the same URL for every request.
func proxyURL(cfg *rest.Config) string {
	if cfg.Proxy == nil {
		return ""
	}
	u, err := cfg.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "server"}})
	if err != nil || u == nil {
		return ""
	}
	return u.String()
}

// rotate makes next m's credentials if they differ from the current ones
// in nothing but the token and client certificate, and reports whether it
// did. When the token or certificate changed, m's connections are closed,
// so that every client reconnects with the new ones: watches opened with
// the old token would otherwise stay open after it is revoked. The cache
// is kept; informers watch again from their last resource version. The
// new credentials are reviewed at once, so that the member's status says
// soon whether they work.
func (m *member) rotate(next *credentials) bool {
	cur := m.creds.Load()
	if !credentialsOnly(cur.config, next.config) {
		return false
	}
	m.creds.Store(next)
	if p := m.prober.Load(); p != nil {
		defer p.reviewSoon()
	}
	if cur.token != next.token || !bytes.Equal(cur.config.CertData, next.config.CertData) || !bytes.Equal(cur.config.KeyData, next.config.KeyData) {
		m.closeConnections()
		m.log.Info("Rotated member credentials")
	}
	return true
}

// tokenSource hands out a member's current bearer token. The token never
// expires on its own; a rotation replaces it.
type tokenSource struct{ creds *atomic.Pointer[credentials] }

func (s tokenSource) Token() (*oauth2.Token, error) {
	return &oauth2.Token{AccessToken: s.creds.Load().token}, nil
}
