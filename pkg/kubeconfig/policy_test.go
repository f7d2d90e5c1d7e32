package kubeconfig_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

func execPlugin(command string) *clientcmdapi.ExecConfig {
	return &clientcmdapi.ExecConfig{
		APIVersion:      "client.authentication.k8s.io/v1",
		Command:         command,
		Args:            []string{"get-token"},
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
}

// withServer returns an edit that sets the cluster's server and drops its CA.
func withServer(url string) func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {
	return func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		cl.Server = url
		cl.CertificateAuthorityData = nil
	}
}

// withUser returns a good kubeconfig after edit has changed its user.
func withUser(tb testing.TB, edit func(*clientcmdapi.AuthInfo)) []byte {
	return kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { edit(u) })
}

// withBasicAuth returns a good kubeconfig whose user has a username and
// password instead of a token.
func withBasicAuth(tb testing.TB, username, password string) []byte {
	return withUser(tb, func(u *clientcmdapi.AuthInfo) { u.Token, u.Username, u.Password = "", username, password })
}

func nestedYAML(depth int) []byte {
	return []byte("apiVersion: v1\nkind: Config\nx: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n")
}

const billionLaughs = `apiVersion: v1
kind: Config
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

const aliasedNames = `apiVersion: v1
kind: Config
current-context: &name member
clusters:
- name: *name
  cluster:
    server: https://member.example.com:6443
users:
- name: admin
  user:
    token: ` + kubeconfigtest.Token + `
contexts:
- name: *name
  context:
    cluster: *name
    user: admin
`

const mergeKey = `apiVersion: v1
kind: Config
current-context: member
clusters:
- name: member
  cluster:
    server: https://member.example.com:6443
users:
- name: base
  user: &base {token: ` + kubeconfigtest.Token + `}
- name: admin
  user:
    <<: *base
contexts:
- name: member
  context: {cluster: member, user: admin}
`

const jsonKubeconfig = `{"apiVersion": "v1", "kind": "Config", "current-context": "member",
 "clusters": [{"name": "member", "cluster": {"server": "https://member.example.com:6443"}}],
 "users": [{"name": "admin", "user": {"token": "` + kubeconfigtest.Token + `"}}],
 "contexts": [{"name": "member", "context": {"cluster": "member", "user": "admin"}}]}`

type parseCase struct {
	policy kubeconfig.Policy
	data   []byte
	// reason is the expected RefusedError.Reason; "" means accepted.
	reason string
}

func parseCases(tb testing.TB) map[string]parseCase {
	tb.Helper()
	good := kubeconfigtest.Build(tb, nil)
	return map[string]parseCase{
		// Accepted.
		"token": {data: good},
		"client certificate": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.ClientCertificateData = []byte(kubeconfigtest.CertData)
			u.ClientKeyData = []byte(kubeconfigtest.KeyData)
		})},
		"basic auth": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.Username, u.Password = "admin", kubeconfigtest.Password
		})},
		"json":                    {data: []byte(jsonKubeconfig)},
		"https to loopback":       {data: kubeconfigtest.Build(tb, withServer("https://127.0.0.1:6443"))},
		"good under every option": {policy: kubeconfigtest.Permissive, data: good},
		"insecure TLS allowed": {
			policy: kubeconfig.Policy{AllowInsecureTLS: true},
			data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
				cl.CertificateAuthorityData = nil
				cl.InsecureSkipTLSVerify = true
			}),
		},
		"exec command allowed": {
			policy: kubeconfig.Policy{AllowExecCommands: []string{"aws", "kubelogin"}},
			data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
				u.Token, u.Exec = "", execPlugin("kubelogin")
			}),
		},
		"plain http to 127.0.0.1 allowed": {policy: kubeconfig.Policy{AllowPlainHTTPLoopback: true}, data: kubeconfigtest.Build(tb, withServer("http://127.0.0.1:8080"))},
		"plain http to ::1 allowed":       {policy: kubeconfig.Policy{AllowPlainHTTPLoopback: true}, data: kubeconfigtest.Build(tb, withServer("http://[::1]:8080"))},
		"plain http to localhost allowed": {policy: kubeconfig.Policy{AllowPlainHTTPLoopback: true}, data: kubeconfigtest.Build(tb, withServer("http://localhost:8080"))},
		"proxy allowed": {policy: kubeconfig.Policy{AllowProxy: true}, data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://proxy.example.com:3128"
		})},
		"link-local allowed":    {policy: kubeconfig.Policy{AllowLinkLocal: true}, data: kubeconfigtest.Build(tb, withServer("https://169.254.10.10:6443"))},
		"metadata name allowed": {policy: kubeconfig.Policy{AllowLinkLocal: true}, data: kubeconfigtest.Build(tb, withServer("https://metadata.google.internal"))},

		// Malformed or oversize input.
		"over the size limit": {data: slices.Concat(good, make([]byte, kubeconfig.MaxKubeconfigBytes)), reason: "KubeconfigTooLarge"},
		"unterminated flow":   {data: slices.Concat(good, []byte("\nusers: [{name: admin, user: {token: "+kubeconfigtest.Token)), reason: "KubeconfigMalformed"},
		"binary":              {data: []byte{0xff, 0xfe, 0x00, 0x9c}, reason: "KubeconfigMalformed"},
		"truncated json":      {data: []byte(jsonKubeconfig[:len(jsonKubeconfig)/2]), reason: "KubeconfigMalformed"},
		"not a Config":        {data: []byte("apiVersion: v1\nkind: Pod\n"), reason: "KubeconfigMalformed"},
		"secret as the kind":  {data: []byte("apiVersion: v1\nkind: " + kubeconfigtest.Token + "\n"), reason: "KubeconfigMalformed"},
		"wrong field type":    {data: []byte(strings.Replace(jsonKubeconfig, `"token": "`+kubeconfigtest.Token+`"`, `"token": ["`+kubeconfigtest.Token+`"]`, 1)), reason: "KubeconfigMalformed"},
		"duplicate user": {data: []byte(strings.Replace(jsonKubeconfig, `"users": [`,
			`"users": [{"name": "admin", "user": {"password": "`+kubeconfigtest.Password+`"}}, `, 1)), reason: "KubeconfigMalformed"},
		"nested past the YAML parser's limit": {data: nestedYAML(20000), reason: kubeconfig.ReasonKubeconfigTooComplex},
		"flat over the structure budget":      {data: kubeconfigtest.Flat(12 * (kubeconfig.MaxKubeconfigElements + 100)), reason: kubeconfig.ReasonKubeconfigTooComplex},
		"flow list over the structure budget": {data: []byte("apiVersion: v1\nkind: Config\nx: [" + strings.Repeat("1,", kubeconfig.MaxKubeconfigElements) + "1]\n"),
			reason: kubeconfig.ReasonKubeconfigTooComplex},
		"comment lines under the structure budget": {data: slices.Concat(good, bytes.Repeat([]byte("# a comment line\n"), kubeconfig.MaxKubeconfigElements/2))},
		"nested too deep":                          {data: nestedYAML(40), reason: "KubeconfigTooDeep"},
		"billion laughs":                           {data: []byte(billionLaughs), reason: "YAMLAliasRefused"},
		"aliased names":                            {data: []byte(aliasedNames), reason: "YAMLAliasRefused"},
		"merge key":                                {data: []byte(mergeKey), reason: "YAMLAliasRefused"},
		"anchor in json": {data: []byte(strings.Replace(jsonKubeconfig, `"current-context": "member"`, `"current-context": &c "member"`, 1)),
			reason: "YAMLAliasRefused"},

		// Contexts.
		"empty":                   {data: nil, reason: "NoCurrentContext"},
		"no current context":      {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) { c.CurrentContext = "" }), reason: "NoCurrentContext"},
		"unknown current context": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) { c.CurrentContext = "other" }), reason: "NoCurrentContext"},
		"context names unknown cluster": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) { c.Contexts["member"].Cluster = "other" }),
			reason: "UnknownCluster"},
		"context names unknown user": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) { c.Contexts["member"].AuthInfo = "other" }),
			reason: "UnknownUser"},

		// Files: never allowed.
		"token file": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.TokenFile = "", "/var/run/kubeconfigtest.Secrets/kubernetes.io/serviceaccount/token"
		}), reason: "FileReference"},
		"client certificate file": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKeyData = "", "/etc/kubernetes/pki/admin.crt", []byte(kubeconfigtest.KeyData)
		}), reason: "FileReference"},
		"client key file": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKey = "", []byte(kubeconfigtest.CertData), "/etc/kubernetes/pki/admin.key"
		}), reason: "FileReference"},
		"certificate authority file": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.CertificateAuthority = nil, "/etc/kubernetes/pki/ca.crt"
		}), reason: "FileReference"},
		"file in an unused user": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{TokenFile: "/etc/shadow"}
		}), reason: "FileReference"},

		// Plugins.
		"exec plugin": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("kubelogin")
		}), reason: "ExecPluginRefused"},
		"exec command not listed": {policy: kubeconfig.Policy{AllowExecCommands: []string{"kubelogin"}}, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("sh")
		}), reason: "ExecPluginRefused"},
		"exec command by another path": {policy: kubeconfig.Policy{AllowExecCommands: []string{"kubelogin"}}, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("/tmp/kubelogin")
		}), reason: "ExecPluginRefused"},
		"exec in an unused user": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: execPlugin("kubelogin")}
		}), reason: "ExecPluginRefused"},
		"auth provider": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"id-token": kubeconfigtest.Token}}
		}), reason: "AuthProviderRefused"},
		"auth provider with every option": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}), reason: "AuthProviderRefused"},

		// TLS and server URLs.
		"insecure TLS": {data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = nil, true
		}), reason: "InsecureTLSRefused"},
		"plain http":                 {data: kubeconfigtest.Build(tb, withServer("http://member.example.com")), reason: "PlainHTTPRefused"},
		"plain http to loopback":     {data: kubeconfigtest.Build(tb, withServer("http://127.0.0.1:8080")), reason: "PlainHTTPRefused"},
		"plain http to non-loopback": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, withServer("http://10.0.0.1:8080")), reason: "PlainHTTPRefused"},
		"plain http to loopback lookalike": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, withServer("http://localhost.example.com:8080")),
			reason: "PlainHTTPRefused"},
		"server without scheme": {data: kubeconfigtest.Build(tb, withServer("member.example.com:6443")), reason: "ServerURLInvalid"},
		"server without host":   {data: kubeconfigtest.Build(tb, withServer("https://")), reason: "ServerURLInvalid"},
		"no server":             {data: kubeconfigtest.Build(tb, withServer("")), reason: "ServerURLInvalid"},
		"unix socket server":    {data: kubeconfigtest.Build(tb, withServer("unix:///var/run/docker.sock")), reason: "ServerURLInvalid"},
		"ftp server":            {data: kubeconfigtest.Build(tb, withServer("ftp://member.example.com/?token="+kubeconfigtest.Token)), reason: "ServerURLInvalid"},

		// Proxies and addresses.
		"proxy": {data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://proxy.example.com:3128"
		}), reason: "ProxyRefused"},
		"proxy without host": {policy: kubeconfig.Policy{AllowProxy: true}, data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://"
		}), reason: "ProxyURLInvalid"},
		"proxy with bad scheme": {policy: kubeconfig.Policy{AllowProxy: true}, data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "ftp://user:" + kubeconfigtest.Password + "@proxy.example.com"
		}), reason: "ProxyURLInvalid"},
		"proxy to metadata": {policy: kubeconfig.Policy{AllowProxy: true}, data: kubeconfigtest.Build(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://user:" + kubeconfigtest.Password + "@169.254.169.254"
		}), reason: "LinkLocalAddressRefused"},
		"metadata IPv4":          {data: kubeconfigtest.Build(tb, withServer("https://169.254.169.254")), reason: "LinkLocalAddressRefused"},
		"link-local IPv6":        {data: kubeconfigtest.Build(tb, withServer("https://[fe80::1]:6443")), reason: "LinkLocalAddressRefused"},
		"link-local IPv6 zone":   {data: kubeconfigtest.Build(tb, withServer("https://[fe80::1%25eth0]:6443")), reason: "LinkLocalAddressRefused"},
		"IPv4-mapped link-local": {data: kubeconfigtest.Build(tb, withServer("https://[::ffff:169.254.169.254]")), reason: "LinkLocalAddressRefused"},
		"metadata name":          {data: kubeconfigtest.Build(tb, withServer("https://metadata.google.internal")), reason: "LinkLocalAddressRefused"},
		"metadata name spelled":  {data: kubeconfigtest.Build(tb, withServer("https://Metadata.Google.Internal.:443")), reason: "LinkLocalAddressRefused"},
		"AWS IPv6 metadata":      {data: kubeconfigtest.Build(tb, withServer("https://[fd00:ec2:0::254]")), reason: "LinkLocalAddressRefused"},
		"link-local plain http":  {policy: kubeconfig.Policy{AllowPlainHTTPLoopback: true}, data: kubeconfigtest.Build(tb, withServer("http://169.254.169.254")), reason: "PlainHTTPRefused"},
		"link-local unused cluster": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) {
			c.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://169.254.169.254"}
		}), reason: "LinkLocalAddressRefused"},

		// Header values: what client-go would send in a header must be one.
		"token with CR LF":         {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.Token = kubeconfigtest.Token + "\r\nX-Injected: 1" }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"token with trailing LF":   {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.Token = kubeconfigtest.Token + "\n" }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"token with NUL in JSON":   {data: []byte(strings.Replace(jsonKubeconfig, kubeconfigtest.Token, kubeconfigtest.Token+`\u0000`, 1)), reason: kubeconfig.ReasonInvalidHeaderValue},
		"token with DEL in YAML":   {data: []byte(strings.Replace(string(kubeconfigtest.Build(tb, nil)), "token: "+kubeconfigtest.Token, `token: "`+kubeconfigtest.Token+`\x7f"`, 1)), reason: kubeconfig.ReasonInvalidHeaderValue},
		"username with LF":         {data: withBasicAuth(tb, "admin\n", kubeconfigtest.Password), reason: kubeconfig.ReasonInvalidHeaderValue},
		"password with CR":         {data: withBasicAuth(tb, "admin", kubeconfigtest.Password+"\r"), reason: kubeconfig.ReasonInvalidHeaderValue},
		"impersonated user":        {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.Impersonate = "jane\r\nX-Injected: 1" }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"impersonated uid":         {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.ImpersonateUID = "uid\n" }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"impersonated group":       {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.ImpersonateGroups = []string{"dev", "ops\n"} }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"impersonated extra key":   {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.ImpersonateUserExtra = map[string][]string{"scope\r\n": {"a"}} }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"impersonated extra value": {data: withUser(tb, func(u *clientcmdapi.AuthInfo) { u.ImpersonateUserExtra = map[string][]string{"scope": {"a", "b\n"}} }), reason: kubeconfig.ReasonInvalidHeaderValue},
		"header value in an unused user": {data: kubeconfigtest.Edit(tb, func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{Token: kubeconfigtest.Token + "\r\n"}
		}), reason: kubeconfig.ReasonInvalidHeaderValue},
		"header values with tabs and UTF-8": {data: withUser(tb, func(u *clientcmdapi.AuthInfo) {
			u.Impersonate, u.ImpersonateGroups = "jöhn\tdoe", []string{"développeurs"}
			u.ImpersonateUserExtra = map[string][]string{"scope": {"lecture écriture"}}
		})},

		// Passes the policy, refused by client-go.
		"token and basic auth": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Username, u.Password = "admin", kubeconfigtest.Password
		}), reason: "KubeconfigInvalid"},
		"certificate without key": {data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData = "", []byte(kubeconfigtest.CertData)
		}), reason: "KubeconfigInvalid"},
		"exec with secret in a bad field": {policy: kubeconfigtest.Permissive, data: kubeconfigtest.Build(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("kubelogin")
			u.Exec.InteractiveMode = clientcmdapi.ExecInteractiveMode(kubeconfigtest.Token)
		}), reason: "KubeconfigInvalid"},
	}
}

func TestPolicyParse(t *testing.T) {
	for name, tc := range parseCases(t) {
		t.Run(name, func(t *testing.T) {
			cfg, err := tc.policy.Parse(tc.data)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Parse() = %v, want accepted", err)
				}
				if cfg == nil || cfg.Host == "" {
					t.Fatalf("Parse() = %+v, want a config with a host", cfg)
				}
				return
			}
			refused, ok := errors.AsType[*kubeconfig.RefusedError](err)
			if !ok {
				t.Fatalf("Parse() error = %v, want a *RefusedError", err)
			}
			if refused.Reason != tc.reason {
				t.Errorf("Reason = %q (%s), want %q", refused.Reason, refused.Message, tc.reason)
			}
			if refused.Message == "" {
				t.Error("Message is empty")
			}
			if cfg != nil {
				t.Errorf("Parse() config = %+v, want nil when refused", cfg)
			}
			for _, secret := range kubeconfigtest.Secrets {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains credential %q", err, secret)
				}
			}
		})
	}
}

func TestPolicyParseBuildsConfig(t *testing.T) {
	cfg, err := kubeconfig.Policy{}.Parse(kubeconfigtest.Build(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://member.example.com:6443" || cfg.BearerToken != kubeconfigtest.Token || string(cfg.CAData) != kubeconfigtest.CAData {
		t.Errorf("Parse() = host %q, token %q, CA %q; want the kubeconfig's", cfg.Host, cfg.BearerToken, cfg.CAData)
	}

	cfg, err = kubeconfig.Policy{}.Parse(kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token, u.ClientCertificateData, u.ClientKeyData = "", []byte(kubeconfigtest.CertData), []byte(kubeconfigtest.KeyData)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.CertData) != kubeconfigtest.CertData || string(cfg.KeyData) != kubeconfigtest.KeyData || cfg.BearerToken != "" {
		t.Error("Parse() did not carry the client certificate and key over")
	}

	cfg, err = kubeconfigtest.Permissive.Parse(kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = nil, true
		cl.ProxyURL = "socks5://proxy.example.com:1080"
		u.Token, u.Exec = "", execPlugin("kubelogin")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Insecure || cfg.Proxy == nil || cfg.ExecProvider == nil || cfg.ExecProvider.Command != "kubelogin" {
		t.Errorf("Parse() = insecure %v, proxy set %v, exec %v; want all from the kubeconfig", cfg.Insecure, cfg.Proxy != nil, cfg.ExecProvider)
	}
}

func TestPolicyParseReadsNoFiles(t *testing.T) {
	const marker = "file-marker-5d0c1b"
	dir := t.TempDir()
	path := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(marker), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token, cert, key, ca := path("token"), path("client.crt"), path("client.key"), path("ca.crt")

	edits := map[string]func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo){
		"tokenFile": func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Token, u.TokenFile = "", token },
		"client certificate and key": func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKey = "", cert, key
		},
		"certificate authority": func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.CertificateAuthority = nil, ca
		},
		"every file": func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.CertificateAuthority = nil, ca
			u.Token, u.TokenFile, u.ClientCertificate, u.ClientKey = "", token, cert, key
		},
	}
	for name, edit := range edits {
		for policyName, policy := range map[string]kubeconfig.Policy{"strict": {}, "permissive": kubeconfigtest.Permissive} {
			t.Run(name+"/"+policyName, func(t *testing.T) {
				cfg, err := policy.Parse(kubeconfigtest.Build(t, edit))
				if refused, ok := errors.AsType[*kubeconfig.RefusedError](err); !ok || refused.Reason != "FileReference" {
					t.Errorf("Parse() error = %v, want FileReference", err)
				}
				if cfg != nil {
					t.Error("Parse() returned a config for a kubeconfig naming files")
					for _, field := range []string{cfg.BearerToken, string(cfg.CAData), string(cfg.CertData), string(cfg.KeyData)} {
						if strings.Contains(field, marker) {
							t.Error("the config holds the content of a file")
						}
					}
				}
				if err != nil && (strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), dir)) {
					t.Errorf("error %q quotes a file or its path", err)
				}
			})
		}
	}
}

func TestPolicyParseRunsNoCommands(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	plugin := filepath.Join(dir, "plugin.sh")
	script := fmt.Sprintf("#!/bin/sh\ntouch %q\n", ran)
	if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	data := kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token, u.Exec = "", execPlugin(plugin)
		u.Exec.ProvideClusterInfo = true
	})

	if _, err := (kubeconfig.Policy{}).Parse(data); err == nil {
		t.Error("Parse() accepted an exec plugin under the strict policy")
	}
	cfg, err := kubeconfig.Policy{AllowExecCommands: []string{plugin}}.Parse(data)
	if err != nil {
		t.Fatalf("Parse() with the command allowed = %v", err)
	}
	if cfg.ExecProvider == nil || cfg.ExecProvider.Command != plugin {
		t.Errorf("Parse() exec provider = %v, want command %q", cfg.ExecProvider, plugin)
	}
	if _, err := os.Stat(ran); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the exec plugin ran during Parse (stat: %v)", err)
	}

	// The plugin does leave the file when it runs, so the check above can fail.
	if err := exec.CommandContext(t.Context(), plugin).Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatalf("running the plugin left no file: %v", err)
	}
}

// A refusal an operator may lift names the flag that lifts it, and the
// command to allow when it is a plain name.
func TestRefusalNamesTheWayOut(t *testing.T) {
	for name, tc := range map[string]struct {
		data      []byte
		want, not string
	}{
		"exec plugin": {data: kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("gke-gcloud-auth-plugin")
		}), want: "--allow-exec-plugin=gke-gcloud-auth-plugin"},
		"exec plugin that is no plain name": {data: kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("sh -c 'echo s3cr3t'")
		}), want: "--allow-exec-plugin=<command>", not: "s3cr3t"},
		"insecure TLS": {data: kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = nil, true
		}), want: "--allow-insecure-tls"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kubeconfig.Policy{}.Parse(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.not != "" && strings.Contains(err.Error(), tc.not)) {
				t.Errorf("refusal %v: want it to name %q", err, tc.want)
			}
		})
	}
}
