package member

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/oauth2"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

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

// newTransport builds m's round tripper from cfg, which it leaves alone.
// The transport dials through m's dialer. For a rotatable cfg, the token
// and client certificate are left out of the transport's config and read
// from m.creds instead: the token by a token source at every request, the
// certificate at every TLS handshake.
//
// The member builds its http.Transport itself rather than through
// client-go's TLS transport cache: that cache would key it by m's dialer
// and certificate callback, which reach the transport again, and such an
// entry's cleanup keeps the member, and its whole fleet, from ever being
// collected.
func (m *member) newTransport(cfg *rest.Config) (http.RoundTripper, error) {
	cfg = rest.CopyConfig(cfg)
	var cert *transport.GetCertHolder
	if rotatable(cfg) {
		if cfg.BearerToken != "" {
			cfg.BearerToken = ""
			cfg.Wrap(transport.TokenSourceWrapTransport(tokenSource{&m.creds}))
		}
		if len(cfg.CertData) > 0 {
			cfg.CertData, cfg.KeyData = nil, nil
			cert = &transport.GetCertHolder{GetCert: func() (*tls.Certificate, error) { return m.creds.Load().cert, nil }}
		}
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, err
	}
	if cert != nil {
		tc.TLS.GetCertHolder = cert
	}
	tlsOnly := *tc // the TLS config reads it at every handshake
	tlsConfig, err := transport.TLSConfigFor(&tlsOnly)
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if tc.Proxy != nil {
		proxy = tc.Proxy
	}
	// As client-go's cache would build it.
	t := utilnet.SetOldTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         m.dialer.DialContext,
		DisableCompression:  tc.DisableCompression,
	})
	if err := m.configureHTTP2(t); err != nil {
		return nil, err
	}
	tc.Transport = t
	tc.TLS, tc.Proxy = transport.TLSConfig{}, nil
	return transport.New(tc)
}

// configureHTTP2 enables HTTP/2 on t as client-go does, with its
// connection health check, unless DISABLE_HTTP2 is set, and keeps track
// of the HTTP/2 connection m's requests use, for m's probes to PING.
func (m *member) configureHTTP2(t *http.Transport) error {
	if os.Getenv("DISABLE_HTTP2") != "" {
		return nil
	}
	t2, err := http2.ConfigureTransports(t)
	if err != nil {
		return err
	}
	t2.ReadIdleTimeout, t2.PingTimeout = 30*time.Second, 15*time.Second
	if t2.ConnPool != nil {
		m.h2 = &trackingPool{ClientConnPool: t2.ConnPool, lost: m.connLost}
		t2.ConnPool = m.h2
	}
	return nil
}

// trackingPool is an HTTP/2 connection pool that remembers the
// connection it last handed out, until that connection dies, and tells
// lost of each connection that dies or is going away.
type trackingPool struct {
	http2.ClientConnPool
	last atomic.Pointer[http2.ClientConn]
	lost func()
}

func (p *trackingPool) GetClientConn(req *http.Request, addr string) (*http2.ClientConn, error) {
	cc, err := p.ClientConnPool.GetClientConn(req, addr)
	if err == nil && p.last.Load() != cc {
		p.last.Store(cc)
	}
	return cc, err
}

func (p *trackingPool) MarkDead(cc *http2.ClientConn) {
	p.last.CompareAndSwap(cc, nil)
	p.lost()
	p.ClientConnPool.MarkDead(cc)
}

// ping sends a PING on the connection p last handed out, and waits for
// its answer. It fails with errNoConnection at once if there is none.
func (p *trackingPool) ping(ctx context.Context) error {
	cc := p.last.Load()
	if cc == nil || cc.State().Closed {
		return errNoConnection
	}
	return cc.Ping(ctx)
}

// errNoConnection fails the PING of a member with no HTTP/2 connection.
var errNoConnection = errors.New("no HTTP/2 connection to ping")

// rotate makes next m's credentials if they differ from the current ones
// in nothing but the token and client certificate, and reports whether it
// did. When the token or certificate changed, m's connections are closed,
// so that every client reconnects with the new ones: watches opened with
// the old token would otherwise stay open after it is revoked. The cache
// is kept; informers watch again from their last resource version.
func (m *member) rotate(next *credentials) bool {
	cur := m.creds.Load()
	if !credentialsOnly(cur.config, next.config) {
		return false
	}
	m.creds.Store(next)
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
