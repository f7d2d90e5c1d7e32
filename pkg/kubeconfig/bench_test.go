package kubeconfig_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// The header and claims of a service account token, as the API server issues
// them for a projected volume.
const (
	jwtHeader = `{"alg":"RS256","kid":"Xq1w9yV3c2n8bKp0LrT5sD7fG4hJ6mZaEoUiYtRwQ"}`
	jwtClaims = `{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":1798761600,"iat":1767225600,` +
		`"iss":"https://kubernetes.default.svc.cluster.local","jti":"5b0d7c4e-2a61-4f3b-9e8d-1c7a6f2b3d90",` +
		`"kubernetes.io":{"namespace":"fleet-system","node":{"name":"worker-1","uid":"8c2d4e6f-1a3b-4c5d-9e7f-0a1b2c3d4e5f"},` +
		`"pod":{"name":"fleet-manager-7d9f8c6b5-x2k4p","uid":"3e5a7c9b-2d4f-4a6c-8e0b-1f3d5a7c9e2b"},` +
		`"serviceaccount":{"name":"fleet-manager","uid":"0f4e8a2c-7b19-4d6e-a3c5-9e1b2d7f6a48"},"warnafter":1767229207},` +
		`"nbf":1767225600,"sub":"system:serviceaccount:fleet-system:fleet-manager"}`
)

// BenchmarkParse measures Policy.Parse, under the zero policy, on a
// kubeconfig with an embedded CA, client certificate and key ("typical"),
// one with the CA and a bearer token ("token"), and one refused for naming
// a client certificate file ("refused"). The certificates and keys are
// real RSA 2048 PEM; the token is shaped and sized like a service account
// token.
func BenchmarkParse(b *testing.B) {
	cert, key, err := certutil.GenerateSelfSignedCertKey("member.example.com", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	signature := make([]byte, 256) // RS256 with a 2048-bit key
	rand.Read(signature)
	enc := base64.RawURLEncoding
	token := enc.EncodeToString([]byte(jwtHeader)) + "." + enc.EncodeToString([]byte(jwtClaims)) + "." + enc.EncodeToString(signature)
	for _, bc := range []struct {
		name string
		edit func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)
		// reason is the expected RefusedError.Reason; "" means accepted.
		reason string
	}{
		{name: "typical", edit: func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData = cert
			u.Token, u.ClientCertificateData, u.ClientKeyData = "", cert, key
		}},
		{name: "token", edit: func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData = cert
			u.Token = token
		}},
		{name: "refused", edit: func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData = cert
			u.Token, u.ClientCertificate, u.ClientKeyData = "", "/etc/kubernetes/pki/admin.crt", key
		}, reason: "FileReference"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := kubeconfigtest.Build(b, bc.edit)
			var policy kubeconfig.Policy
			_, err := policy.Parse(data)
			refused, _ := errors.AsType[*kubeconfig.RefusedError](err)
			switch {
			case bc.reason == "" && err != nil:
				b.Fatalf("Parse() = %v, want accepted", err)
			case bc.reason != "" && (refused == nil || refused.Reason != bc.reason):
				b.Fatalf("Parse() error = %v, want reason %s", err, bc.reason)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = policy.Parse(data)
			}
		})
	}
}
