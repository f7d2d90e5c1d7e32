package kubeconfig

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// CredentialType is the kind of credential a kubeconfig authenticates
// with.
type CredentialType string

// The credential types, named as MemberCluster status names them.
const (
	CredentialToken             CredentialType = "Token"
	CredentialClientCertificate CredentialType = "ClientCertificate"
	CredentialExecPlugin        CredentialType = "ExecPlugin"
	CredentialBasicAuth         CredentialType = "BasicAuth"
	CredentialNone              CredentialType = "None"
)

// Credential describes the credential of a parsed kubeconfig without
// holding it.
type Credential struct {
	Type CredentialType
	// IssuedAt and Expiry bound the credential's lifetime: a token's iat
	// and exp claims (nbf when it has no iat), a client certificate's
	// notBefore and notAfter. Zero when unknown.
	IssuedAt, Expiry time.Time
	// ServiceAccount is the service account a Kubernetes service account
	// token names; empty for any other credential.
	ServiceAccount types.NamespacedName
}

// Lifetime returns how long the credential is valid for from issue to
// expiry, 0 when either is unknown.
func (c Credential) Lifetime() time.Duration {
	if c.IssuedAt.IsZero() || c.Expiry.IsZero() || !c.Expiry.After(c.IssuedAt) {
		return 0
	}
	return c.Expiry.Sub(c.IssuedAt)
}

// serviceAccountClaims are the claims of a service account token: the
// registered ones, and the service account Kubernetes adds.
type serviceAccountClaims struct {
	jwt.RegisteredClaims
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// DescribeCredential describes what cfg, a kubeconfig Policy.Parse
// accepted, authenticates with. A token's claims are read without
// checking its signature: they only say when to renew it, and the member,
// which checks it, has the last word.
func DescribeCredential(cfg *rest.Config) Credential {
	switch {
	case cfg.ExecProvider != nil || cfg.AuthProvider != nil:
		return Credential{Type: CredentialExecPlugin}
	case cfg.BearerToken != "":
		return describeToken(cfg.BearerToken)
	case len(cfg.CertData) > 0:
		return describeCertificate(cfg.CertData)
	case cfg.Username != "" || cfg.Password != "":
		return Credential{Type: CredentialBasicAuth}
	default:
		return Credential{Type: CredentialNone}
	}
}

func describeToken(token string) Credential {
	c := Credential{Type: CredentialToken}
	var claims serviceAccountClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &claims); err != nil {
		return c // not a JWT: an opaque token, with no expiry to read
	}
	if claims.ExpiresAt != nil {
		c.Expiry = claims.ExpiresAt.Time
	}
	switch {
	case claims.IssuedAt != nil:
		c.IssuedAt = claims.IssuedAt.Time
	case claims.NotBefore != nil:
		c.IssuedAt = claims.NotBefore.Time
	}
	if sa := claims.Kubernetes; sa.Namespace != "" && sa.ServiceAccount.Name != "" {
		c.ServiceAccount = types.NamespacedName{Namespace: sa.Namespace, Name: sa.ServiceAccount.Name}
	}
	return c
}

func describeCertificate(certPEM []byte) Credential {
	c := Credential{Type: CredentialClientCertificate}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return c
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return c
	}
	c.IssuedAt, c.Expiry = cert.NotBefore, cert.NotAfter
	return c
}

// WithoutUserinfo returns the URL s without its user and password, which
// may be credentials; an empty s stays empty. An s that is not a URL is an
// error that does not repeat it.
func WithoutUserinfo(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", errors.New("not a URL") // url's error repeats s
	}
	u.User = nil
	return u.String(), nil
}
