package kubeconfig_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

func TestDescribeCredential(t *testing.T) {
	issued := time.Unix(1_800_000_000, 0)
	expires := issued.Add(24 * time.Hour)
	saToken := signedToken(t, jwt.MapClaims{
		"iat": issued.Unix(), "exp": expires.Unix(), "sub": "system:serviceaccount:fleet-system:fleet-manager",
		"kubernetes.io": map[string]any{"namespace": "fleet-system", "serviceaccount": map[string]any{"name": "fleet-manager", "uid": "x"}},
	})
	notBefore := signedToken(t, jwt.MapClaims{"nbf": issued.Unix(), "exp": expires.Unix()})
	cert := certificate(t, issued, expires)
	cases := map[string]struct {
		cfg  rest.Config
		want kubeconfig.Credential
	}{
		"service account token": {rest.Config{BearerToken: saToken}, kubeconfig.Credential{Type: kubeconfig.CredentialToken, IssuedAt: issued, Expiry: expires,
			ServiceAccount: types.NamespacedName{Namespace: "fleet-system", Name: "fleet-manager"}}},
		"other JWT, nbf":        {rest.Config{BearerToken: notBefore}, kubeconfig.Credential{Type: kubeconfig.CredentialToken, IssuedAt: issued, Expiry: expires}},
		"opaque token":          {rest.Config{BearerToken: "abcdef.0123456789abcdef"}, kubeconfig.Credential{Type: kubeconfig.CredentialToken}},
		"client certificate":    {rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: cert, KeyData: []byte("key")}}, kubeconfig.Credential{Type: kubeconfig.CredentialClientCertificate, IssuedAt: issued, Expiry: expires}},
		"garbage certificate":   {rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: []byte("nope")}}, kubeconfig.Credential{Type: kubeconfig.CredentialClientCertificate}},
		"token and certificate": {rest.Config{BearerToken: saToken, TLSClientConfig: rest.TLSClientConfig{CertData: cert}}, kubeconfig.Credential{Type: kubeconfig.CredentialToken, IssuedAt: issued, Expiry: expires, ServiceAccount: types.NamespacedName{Namespace: "fleet-system", Name: "fleet-manager"}}},
		"exec plugin":           {rest.Config{ExecProvider: &clientcmdapi.ExecConfig{Command: "kubelogin"}}, kubeconfig.Credential{Type: kubeconfig.CredentialExecPlugin}},
		"basic auth":            {rest.Config{Username: "u", Password: "p"}, kubeconfig.Credential{Type: kubeconfig.CredentialBasicAuth}},
		"none":                  {rest.Config{}, kubeconfig.Credential{Type: kubeconfig.CredentialNone}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := kubeconfig.DescribeCredential(&tc.cfg)
			if !got.IssuedAt.Equal(tc.want.IssuedAt) || !got.Expiry.Equal(tc.want.Expiry) || got.Type != tc.want.Type || got.ServiceAccount != tc.want.ServiceAccount {
				t.Errorf("DescribeCredential = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := kubeconfig.DescribeCredential(&rest.Config{BearerToken: saToken}).Lifetime(); got != 24*time.Hour {
		t.Errorf("Lifetime = %s, want 24h", got)
	}
}

func signedToken(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("test key"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func certificate(t *testing.T, notBefore, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "user"}, NotBefore: notBefore, NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
