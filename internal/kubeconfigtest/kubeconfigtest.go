// Package kubeconfigtest builds kubeconfigs for tests: a good one with one
// context, "member", that each test edits into what it needs.
package kubeconfigtest

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// Credential material in the test kubeconfigs. No error or log line may
// contain it.
const (
	Token    = "tok-3f9c2e81d7"
	Password = "pw-77d1a0c5e3"
	CertData = "-----BEGIN CERTIFICATE-----\ncert-a41b9f07\n-----END CERTIFICATE-----\n"
	KeyData  = "-----BEGIN EC PRIVATE KEY-----\nkey-c02e58b6\n-----END EC PRIVATE KEY-----\n"
	CAData   = "-----BEGIN CERTIFICATE-----\nca-91d3\n-----END CERTIFICATE-----\n"
)

// Secrets are the parts of the credential material above that are secret.
var Secrets = []string{Token, Password, "cert-a41b9f07", "key-c02e58b6"}

// Permissive allows everything a Policy can allow.
var Permissive = kubeconfig.Policy{
	AllowInsecureTLS:       true,
	AllowExecCommands:      []string{"kubelogin"},
	AllowPlainHTTPLoopback: true,
	AllowProxy:             true,
	AllowLinkLocal:         true,
}

// Build returns a good kubeconfig with one context, "member", after edit
// has changed its cluster and user.
func Build(tb testing.TB, edit func(cl *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo)) []byte {
	tb.Helper()
	cl := &clientcmdapi.Cluster{Server: "https://member.example.com:6443", CertificateAuthorityData: []byte(CAData)}
	user := &clientcmdapi.AuthInfo{Token: Token}
	if edit != nil {
		edit(cl, user)
	}
	return Write(tb, &clientcmdapi.Config{
		CurrentContext: "member",
		Clusters:       map[string]*clientcmdapi.Cluster{"member": cl},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": user},
		Contexts:       map[string]*clientcmdapi.Context{"member": {Cluster: "member", AuthInfo: "admin"}},
	})
}

// Edit returns a good kubeconfig after edit has changed the whole config.
func Edit(tb testing.TB, edit func(c *clientcmdapi.Config)) []byte {
	tb.Helper()
	c, err := clientcmd.Load(Build(tb, nil))
	if err != nil {
		tb.Fatal(err)
	}
	edit(c)
	return Write(tb, c)
}

// Write serializes c.
func Write(tb testing.TB, c *clientcmdapi.Config) []byte {
	tb.Helper()
	data, err := clientcmd.Write(*c)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// Flat returns a valid kubeconfig of about size bytes, with no current
// context and one key per line under preferences: decoded, it is a map
// of that many entries, though it is only a few bytes per key.
func Flat(size int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\npreferences:\n")
	for i := 0; b.Len() < size-16; i++ {
		fmt.Fprintf(&b, "  k%05d: %d\n", i, i%10)
	}
	return []byte(b.String())
}

// CredentialsOf returns the credential material of kubeconfigs, as a
// leak would show it: tokens, passwords, and the base64 and body lines of
// client keys and certificates.
func CredentialsOf(kubeconfigs ...[]byte) ([]string, error) {
	var secrets []string
	for _, kc := range kubeconfigs {
		raw, err := clientcmd.Load(kc)
		if err != nil {
			return nil, fmt.Errorf("unparsable test kubeconfig: %w", err)
		}
		for _, user := range raw.AuthInfos {
			for _, s := range []string{user.Token, user.Password} {
				if s != "" {
					secrets = append(secrets, s)
				}
			}
			for _, data := range [][]byte{user.ClientKeyData, user.ClientCertificateData} {
				if len(data) == 0 {
					continue
				}
				secrets = append(secrets, base64.StdEncoding.EncodeToString(data))
				for _, line := range strings.Split(string(data), "\n") {
					if len(line) > 40 { // a PEM body line
						secrets = append(secrets, line)
					}
				}
			}
		}
	}
	return secrets, nil
}
