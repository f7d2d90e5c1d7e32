package cluster_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/pkg/cluster"
)

// Credential material in the test kubeconfigs. No error may contain it.
const (
	testToken    = "tok-3f9c2e81d7"
	testPassword = "pw-77d1a0c5e3"
	testCertData = "-----BEGIN CERTIFICATE-----\ncert-a41b9f07\n-----END CERTIFICATE-----\n"
	testKeyData  = "-----BEGIN EC PRIVATE KEY-----\nkey-c02e58b6\n-----END EC PRIVATE KEY-----\n"
	testCAData   = "-----BEGIN CERTIFICATE-----\nca-91d3\n-----END CERTIFICATE-----\n"
)

var testSecrets = []string{testToken, testPassword, "cert-a41b9f07", "key-c02e58b6"}

// permissivePolicy allows everything a Policy can allow.
var permissivePolicy = cluster.Policy{
	AllowInsecureTLS:       true,
	AllowExecCommands:      []string{"kubelogin"},
	AllowPlainHTTPLoopback: true,
	AllowProxy:             true,
	AllowLinkLocal:         true,
}

// buildKubeconfig returns a good kubeconfig with one context, "member", after
// edit has changed its cluster and user.
func buildKubeconfig(tb testing.TB, edit func(cl *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo)) []byte {
	tb.Helper()
	cl := &clientcmdapi.Cluster{Server: "https://member.example.com:6443", CertificateAuthorityData: []byte(testCAData)}
	user := &clientcmdapi.AuthInfo{Token: testToken}
	if edit != nil {
		edit(cl, user)
	}
	return writeKubeconfig(tb, &clientcmdapi.Config{
		CurrentContext: "member",
		Clusters:       map[string]*clientcmdapi.Cluster{"member": cl},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": user},
		Contexts:       map[string]*clientcmdapi.Context{"member": {Cluster: "member", AuthInfo: "admin"}},
	})
}

// editKubeconfig returns a good kubeconfig after edit has changed the whole
// config.
func editKubeconfig(tb testing.TB, edit func(c *clientcmdapi.Config)) []byte {
	tb.Helper()
	c, err := clientcmd.Load(buildKubeconfig(tb, nil))
	if err != nil {
		tb.Fatal(err)
	}
	edit(c)
	return writeKubeconfig(tb, c)
}

func writeKubeconfig(tb testing.TB, c *clientcmdapi.Config) []byte {
	tb.Helper()
	data, err := clientcmd.Write(*c)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

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
    token: ` + testToken + `
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
  user: &base {token: ` + testToken + `}
- name: admin
  user:
    <<: *base
contexts:
- name: member
  context: {cluster: member, user: admin}
`

const jsonKubeconfig = `{"apiVersion": "v1", "kind": "Config", "current-context": "member",
 "clusters": [{"name": "member", "cluster": {"server": "https://member.example.com:6443"}}],
 "users": [{"name": "admin", "user": {"token": "` + testToken + `"}}],
 "contexts": [{"name": "member", "context": {"cluster": "member", "user": "admin"}}]}`

type parseCase struct {
	policy cluster.Policy
	data   []byte
	// reason is the expected RefusedError.Reason; "" means accepted.
	reason string
}

func parseCases(tb testing.TB) map[string]parseCase {
	tb.Helper()
	good := buildKubeconfig(tb, nil)
	return map[string]parseCase{
		// Accepted.
		"token": {data: good},
		"client certificate": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.ClientCertificateData = []byte(testCertData)
			u.ClientKeyData = []byte(testKeyData)
		})},
		"basic auth": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.Username, u.Password = "admin", testPassword
		})},
		"json":                    {data: []byte(jsonKubeconfig)},
		"https to loopback":       {data: buildKubeconfig(tb, withServer("https://127.0.0.1:6443"))},
		"good under every option": {policy: permissivePolicy, data: good},
		"insecure TLS allowed": {
			policy: cluster.Policy{AllowInsecureTLS: true},
			data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
				cl.CertificateAuthorityData = nil
				cl.InsecureSkipTLSVerify = true
			}),
		},
		"exec command allowed": {
			policy: cluster.Policy{AllowExecCommands: []string{"aws", "kubelogin"}},
			data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
				u.Token, u.Exec = "", execPlugin("kubelogin")
			}),
		},
		"plain http to 127.0.0.1 allowed": {policy: cluster.Policy{AllowPlainHTTPLoopback: true}, data: buildKubeconfig(tb, withServer("http://127.0.0.1:8080"))},
		"plain http to ::1 allowed":       {policy: cluster.Policy{AllowPlainHTTPLoopback: true}, data: buildKubeconfig(tb, withServer("http://[::1]:8080"))},
		"plain http to localhost allowed": {policy: cluster.Policy{AllowPlainHTTPLoopback: true}, data: buildKubeconfig(tb, withServer("http://localhost:8080"))},
		"proxy allowed": {policy: cluster.Policy{AllowProxy: true}, data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://proxy.example.com:3128"
		})},
		"link-local allowed":    {policy: cluster.Policy{AllowLinkLocal: true}, data: buildKubeconfig(tb, withServer("https://169.254.10.10:6443"))},
		"metadata name allowed": {policy: cluster.Policy{AllowLinkLocal: true}, data: buildKubeconfig(tb, withServer("https://metadata.google.internal"))},

		// Malformed or oversize input.
		"over the size limit": {data: slices.Concat(good, make([]byte, cluster.MaxKubeconfigBytes)), reason: "KubeconfigTooLarge"},
		"unterminated flow":   {data: slices.Concat(good, []byte("\nusers: [{name: admin, user: {token: "+testToken)), reason: "KubeconfigMalformed"},
		"binary":              {data: []byte{0xff, 0xfe, 0x00, 0x9c}, reason: "KubeconfigMalformed"},
		"truncated json":      {data: []byte(jsonKubeconfig[:len(jsonKubeconfig)/2]), reason: "KubeconfigMalformed"},
		"not a Config":        {data: []byte("apiVersion: v1\nkind: Pod\n"), reason: "KubeconfigMalformed"},
		"secret as the kind":  {data: []byte("apiVersion: v1\nkind: " + testToken + "\n"), reason: "KubeconfigMalformed"},
		"wrong field type":    {data: []byte(strings.Replace(jsonKubeconfig, `"token": "`+testToken+`"`, `"token": ["`+testToken+`"]`, 1)), reason: "KubeconfigMalformed"},
		"duplicate user": {data: []byte(strings.Replace(jsonKubeconfig, `"users": [`,
			`"users": [{"name": "admin", "user": {"password": "`+testPassword+`"}}, `, 1)), reason: "KubeconfigMalformed"},
		"nested past the YAML parser's limit": {data: nestedYAML(20000), reason: "KubeconfigMalformed"},
		"nested too deep":                     {data: nestedYAML(40), reason: "KubeconfigTooDeep"},
		"billion laughs":                      {data: []byte(billionLaughs), reason: "YAMLAliasRefused"},
		"aliased names":                       {data: []byte(aliasedNames), reason: "YAMLAliasRefused"},
		"merge key":                           {data: []byte(mergeKey), reason: "YAMLAliasRefused"},
		"anchor in json": {data: []byte(strings.Replace(jsonKubeconfig, `"current-context": "member"`, `"current-context": &c "member"`, 1)),
			reason: "YAMLAliasRefused"},

		// Contexts.
		"empty":                   {data: nil, reason: "NoCurrentContext"},
		"no current context":      {data: editKubeconfig(tb, func(c *clientcmdapi.Config) { c.CurrentContext = "" }), reason: "NoCurrentContext"},
		"unknown current context": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) { c.CurrentContext = "other" }), reason: "NoCurrentContext"},
		"context names unknown cluster": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) { c.Contexts["member"].Cluster = "other" }),
			reason: "UnknownCluster"},
		"context names unknown user": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) { c.Contexts["member"].AuthInfo = "other" }),
			reason: "UnknownUser"},

		// Files: never allowed.
		"token file": {policy: permissivePolicy, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.TokenFile = "", "/var/run/testSecrets/kubernetes.io/serviceaccount/token"
		}), reason: "FileReference"},
		"client certificate file": {policy: permissivePolicy, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKeyData = "", "/etc/kubernetes/pki/admin.crt", []byte(testKeyData)
		}), reason: "FileReference"},
		"client key file": {policy: permissivePolicy, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKey = "", []byte(testCertData), "/etc/kubernetes/pki/admin.key"
		}), reason: "FileReference"},
		"certificate authority file": {policy: permissivePolicy, data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.CertificateAuthority = nil, "/etc/kubernetes/pki/ca.crt"
		}), reason: "FileReference"},
		"file in an unused user": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{TokenFile: "/etc/shadow"}
		}), reason: "FileReference"},

		// Plugins.
		"exec plugin": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("kubelogin")
		}), reason: "ExecPluginRefused"},
		"exec command not listed": {policy: cluster.Policy{AllowExecCommands: []string{"kubelogin"}}, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("sh")
		}), reason: "ExecPluginRefused"},
		"exec command by another path": {policy: cluster.Policy{AllowExecCommands: []string{"kubelogin"}}, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("/tmp/kubelogin")
		}), reason: "ExecPluginRefused"},
		"exec in an unused user": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) {
			c.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: execPlugin("kubelogin")}
		}), reason: "ExecPluginRefused"},
		"auth provider": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"id-token": testToken}}
		}), reason: "AuthProviderRefused"},
		"auth provider with every option": {policy: permissivePolicy, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}), reason: "AuthProviderRefused"},

		// TLS and server URLs.
		"insecure TLS": {data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = nil, true
		}), reason: "InsecureTLSRefused"},
		"plain http":                 {data: buildKubeconfig(tb, withServer("http://member.example.com")), reason: "PlainHTTPRefused"},
		"plain http to loopback":     {data: buildKubeconfig(tb, withServer("http://127.0.0.1:8080")), reason: "PlainHTTPRefused"},
		"plain http to non-loopback": {policy: permissivePolicy, data: buildKubeconfig(tb, withServer("http://10.0.0.1:8080")), reason: "PlainHTTPRefused"},
		"plain http to loopback lookalike": {policy: permissivePolicy, data: buildKubeconfig(tb, withServer("http://localhost.example.com:8080")),
			reason: "PlainHTTPRefused"},
		"server without scheme": {data: buildKubeconfig(tb, withServer("member.example.com:6443")), reason: "ServerURLInvalid"},
		"server without host":   {data: buildKubeconfig(tb, withServer("https://")), reason: "ServerURLInvalid"},
		"no server":             {data: buildKubeconfig(tb, withServer("")), reason: "ServerURLInvalid"},
		"unix socket server":    {data: buildKubeconfig(tb, withServer("unix:///var/run/docker.sock")), reason: "ServerURLInvalid"},
		"ftp server":            {data: buildKubeconfig(tb, withServer("ftp://member.example.com/?token="+testToken)), reason: "ServerURLInvalid"},

		// Proxies and addresses.
		"proxy": {data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://proxy.example.com:3128"
		}), reason: "ProxyRefused"},
		"proxy without host": {policy: cluster.Policy{AllowProxy: true}, data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://"
		}), reason: "ProxyURLInvalid"},
		"proxy with bad scheme": {policy: cluster.Policy{AllowProxy: true}, data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "ftp://user:" + testPassword + "@proxy.example.com"
		}), reason: "ProxyURLInvalid"},
		"proxy to metadata": {policy: cluster.Policy{AllowProxy: true}, data: buildKubeconfig(tb, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.ProxyURL = "http://user:" + testPassword + "@169.254.169.254"
		}), reason: "LinkLocalAddressRefused"},
		"metadata IPv4":          {data: buildKubeconfig(tb, withServer("https://169.254.169.254")), reason: "LinkLocalAddressRefused"},
		"link-local IPv6":        {data: buildKubeconfig(tb, withServer("https://[fe80::1]:6443")), reason: "LinkLocalAddressRefused"},
		"link-local IPv6 zone":   {data: buildKubeconfig(tb, withServer("https://[fe80::1%25eth0]:6443")), reason: "LinkLocalAddressRefused"},
		"IPv4-mapped link-local": {data: buildKubeconfig(tb, withServer("https://[::ffff:169.254.169.254]")), reason: "LinkLocalAddressRefused"},
		"metadata name":          {data: buildKubeconfig(tb, withServer("https://metadata.google.internal")), reason: "LinkLocalAddressRefused"},
		"metadata name spelled":  {data: buildKubeconfig(tb, withServer("https://Metadata.Google.Internal.:443")), reason: "LinkLocalAddressRefused"},
		"AWS IPv6 metadata":      {data: buildKubeconfig(tb, withServer("https://[fd00:ec2:0::254]")), reason: "LinkLocalAddressRefused"},
		"link-local plain http":  {policy: cluster.Policy{AllowPlainHTTPLoopback: true}, data: buildKubeconfig(tb, withServer("http://169.254.169.254")), reason: "PlainHTTPRefused"},
		"link-local unused cluster": {data: editKubeconfig(tb, func(c *clientcmdapi.Config) {
			c.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://169.254.169.254"}
		}), reason: "LinkLocalAddressRefused"},

		// Passes the policy, refused by client-go.
		"token and basic auth": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Username, u.Password = "admin", testPassword
		}), reason: "KubeconfigInvalid"},
		"certificate without key": {data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData = "", []byte(testCertData)
		}), reason: "KubeconfigInvalid"},
		"exec with secret in a bad field": {policy: permissivePolicy, data: buildKubeconfig(tb, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", execPlugin("kubelogin")
			u.Exec.InteractiveMode = clientcmdapi.ExecInteractiveMode(testToken)
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
			refused, ok := errors.AsType[*cluster.RefusedError](err)
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
			for _, secret := range testSecrets {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains credential %q", err, secret)
				}
			}
		})
	}
}

func TestPolicyParseBuildsConfig(t *testing.T) {
	cfg, err := cluster.Policy{}.Parse(buildKubeconfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://member.example.com:6443" || cfg.BearerToken != testToken || string(cfg.CAData) != testCAData {
		t.Errorf("Parse() = host %q, token %q, CA %q; want the kubeconfig's", cfg.Host, cfg.BearerToken, cfg.CAData)
	}

	cfg, err = cluster.Policy{}.Parse(buildKubeconfig(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token, u.ClientCertificateData, u.ClientKeyData = "", []byte(testCertData), []byte(testKeyData)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.CertData) != testCertData || string(cfg.KeyData) != testKeyData || cfg.BearerToken != "" {
		t.Error("Parse() did not carry the client certificate and key over")
	}

	cfg, err = permissivePolicy.Parse(buildKubeconfig(t, func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
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
		for policyName, policy := range map[string]cluster.Policy{"strict": {}, "permissive": permissivePolicy} {
			t.Run(name+"/"+policyName, func(t *testing.T) {
				cfg, err := policy.Parse(buildKubeconfig(t, edit))
				if refused, ok := errors.AsType[*cluster.RefusedError](err); !ok || refused.Reason != "FileReference" {
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
	data := buildKubeconfig(t, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token, u.Exec = "", execPlugin(plugin)
		u.Exec.ProvideClusterInfo = true
	})

	if _, err := (cluster.Policy{}).Parse(data); err == nil {
		t.Error("Parse() accepted an exec plugin under the strict policy")
	}
	cfg, err := cluster.Policy{AllowExecCommands: []string{plugin}}.Parse(data)
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
