package registry_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// argoCDSecret returns an Argo CD cluster Secret named name with the given
// server and config, the config marshalled to JSON unless it is a []byte.
func argoCDSecret(t *testing.T, name, server string, config any) *corev1.Secret {
	t.Helper()
	raw, ok := config.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(config); err != nil {
			t.Fatal(err)
		}
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "cluster-" + name,
			Namespace: "argocd",
			Labels:    map[string]string{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType},
		},
		Data: map[string][]byte{"name": []byte(name), "config": raw},
	}
	if server != "" {
		s.Data["server"] = []byte(server)
	}
	return s
}

// An Argo CD Secret read twice yields the same kubeconfig bytes: the pool
// fingerprints them and rebuilds the member when they change, so an exec
// env built in map order rebuilt it on every read (issue 11, item 2).
func TestArgoCDKubeconfigIsDeterministic(t *testing.T) {
	secret := argoCDSecret(t, "exec", "https://member.example.com", map[string]any{
		"execProviderConfig": map[string]any{
			"command":    "fleet-credentials",
			"args":       []string{"token", "--cluster", "member"},
			"apiVersion": "client.authentication.k8s.io/v1",
			"env": map[string]string{
				"AWS_REGION": "eu-west-1", "AWS_PROFILE": "fleet", "HOME": "/home/fleet", "PATH": "/usr/bin",
				"TOKEN_AUDIENCE": "member", "TZ": "UTC", "LANG": "C", "XDG_CACHE_HOME": "/tmp/cache",
			},
		},
		"tlsClientConfig": map[string]any{"caData": []byte("ca"), "serverName": "member"},
	})
	read := registry.ArgoCDFormat("argocd").Read
	first, err := read(secret)
	if err != nil {
		t.Fatalf("Read() error = %v", err)
	}
	for i := range 50 {
		reg, err := read(secret)
		if err != nil {
			t.Fatalf("Read() error = %v", err)
		}
		if !bytes.Equal(reg.Kubeconfig, first.Kubeconfig) {
			t.Fatalf("read %d: the kubeconfig differs from the first read:\n%s\nfirst:\n%s", i+2, reg.Kubeconfig, first.Kubeconfig)
		}
	}
}

// The credentials the tests put in Secrets; no refusal message may hold them.
const (
	testToken    = "argocd-bearer-token-0123456789"
	testPassword = "argocd-password-0123456789"
)

// TestArgoCDMapping checks every field of the Argo CD config that reaches
// the kubeconfig, on the kubeconfig clientcmd loads back.
func TestArgoCDMapping(t *testing.T) {
	const server = "https://member.example.com:6443"
	never := clientcmdapi.NeverExecInteractiveMode
	for name, tc := range map[string]struct {
		config any
		// edit, if set, changes the Secret after it is built.
		edit        func(*corev1.Secret)
		wantName    string
		wantCluster clientcmdapi.Cluster
		wantUser    clientcmdapi.AuthInfo
	}{
		"bearer token": {
			config:      map[string]any{"bearerToken": testToken},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"basic auth": {
			config:      map[string]any{"username": "admin", "password": testPassword},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{Username: "admin", Password: testPassword},
		},
		"TLS client certificate": {
			config:      map[string]any{"tlsClientConfig": map[string]any{"certData": []byte("cert PEM"), "keyData": []byte("key PEM")}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert PEM"), ClientKeyData: []byte("key PEM")},
		},
		"CA data": {
			config:      map[string]any{"bearerToken": testToken, "tlsClientConfig": map[string]any{"caData": []byte("CA PEM")}},
			wantCluster: clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("CA PEM")},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"server name": {
			config:      map[string]any{"bearerToken": testToken, "tlsClientConfig": map[string]any{"serverName": "api.internal"}},
			wantCluster: clientcmdapi.Cluster{Server: server, TLSServerName: "api.internal"},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"insecure": {
			config:      map[string]any{"bearerToken": testToken, "tlsClientConfig": map[string]any{"insecure": true}},
			wantCluster: clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"proxy": {
			config:      map[string]any{"bearerToken": testToken, "proxyUrl": "http://proxy.example.com:3128"},
			wantCluster: clientcmdapi.Cluster{Server: server, ProxyURL: "http://proxy.example.com:3128"},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"every TLS field together": {
			config: map[string]any{"bearerToken": testToken, "tlsClientConfig": map[string]any{
				"caData": []byte("CA PEM"), "serverName": "api.internal", "certData": []byte("cert PEM"), "keyData": []byte("key PEM"),
			}},
			wantCluster: clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("CA PEM"), TLSServerName: "api.internal"},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken, ClientCertificateData: []byte("cert PEM"), ClientKeyData: []byte("key PEM")},
		},
		"exec plugin": {
			config: map[string]any{"execProviderConfig": map[string]any{
				"command":    "fleet-credentials",
				"args":       []string{"token", "--cluster", "member"},
				"env":        map[string]string{"TZ": "UTC", "AWS_REGION": "eu-west-1", "HOME": "/home/fleet"},
				"apiVersion": "client.authentication.k8s.io/v1",
			}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command: "fleet-credentials",
				Args:    []string{"token", "--cluster", "member"},
				// In name order, not the config's.
				Env: []clientcmdapi.ExecEnvVar{
					{Name: "AWS_REGION", Value: "eu-west-1"}, {Name: "HOME", Value: "/home/fleet"}, {Name: "TZ", Value: "UTC"},
				},
				APIVersion:      "client.authentication.k8s.io/v1",
				InteractiveMode: never,
			}},
		},
		"exec plugin without args or env": {
			config:      map[string]any{"execProviderConfig": map[string]any{"command": "fleet-credentials", "apiVersion": "client.authentication.k8s.io/v1beta1"}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command: "fleet-credentials", APIVersion: "client.authentication.k8s.io/v1beta1", InteractiveMode: never,
			}},
		},
		"AWS with cluster name only": {
			config:      map[string]any{"awsAuthConfig": map[string]any{"clusterName": "prod-eks"}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command:         "argocd-k8s-auth",
				Args:            []string{"aws", "--cluster-name", "prod-eks"},
				APIVersion:      "client.authentication.k8s.io/v1beta1",
				InteractiveMode: never,
			}},
		},
		"AWS with role and profile": {
			config: map[string]any{"awsAuthConfig": map[string]any{
				"clusterName": "prod-eks", "roleARN": "arn:aws:iam::123456789012:role/fleet", "profile": "fleet",
			}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command:         "argocd-k8s-auth",
				Args:            []string{"aws", "--cluster-name", "prod-eks", "--role-arn", "arn:aws:iam::123456789012:role/fleet", "--profile", "fleet"},
				APIVersion:      "client.authentication.k8s.io/v1beta1",
				InteractiveMode: never,
			}},
		},
		"exec plugin wins over AWS": {
			config: map[string]any{
				"execProviderConfig": map[string]any{"command": "fleet-credentials", "apiVersion": "client.authentication.k8s.io/v1"},
				"awsAuthConfig":      map[string]any{"clusterName": "prod-eks"},
			},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command: "fleet-credentials", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: never,
			}},
		},
		"token and exec together": {
			config: map[string]any{
				"bearerToken":        testToken,
				"execProviderConfig": map[string]any{"command": "fleet-credentials", "apiVersion": "client.authentication.k8s.io/v1"},
			},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser: clientcmdapi.AuthInfo{Token: testToken, Exec: &clientcmdapi.ExecConfig{
				Command: "fleet-credentials", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: never,
			}},
		},
		"empty config": {
			config:      map[string]any{},
			wantCluster: clientcmdapi.Cluster{Server: server},
		},
		"fields Argo CD has and fleet-manager ignores": {
			config:      map[string]any{"bearerToken": testToken, "disableCompression": true, "tlsClientConfig": map[string]any{"nextProtos": []string{"h2"}}},
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"name from the annotation": {
			config: map[string]any{"bearerToken": testToken},
			edit: func(s *corev1.Secret) {
				s.Annotations = map[string]string{registry.ClusterNameAnnotation: "renamed"}
			},
			wantName:    "renamed",
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
		"an invalid name with a valid annotation": {
			config: map[string]any{"bearerToken": testToken},
			edit: func(s *corev1.Secret) {
				s.Data["name"] = []byte("In-Cluster (prod)")
				s.Annotations = map[string]string{registry.ClusterNameAnnotation: "prod"}
			},
			wantName:    "prod",
			wantCluster: clientcmdapi.Cluster{Server: server},
			wantUser:    clientcmdapi.AuthInfo{Token: testToken},
		},
	} {
		t.Run(name, func(t *testing.T) {
			secret := argoCDSecret(t, "member", server, tc.config)
			if tc.edit != nil {
				tc.edit(secret)
			}
			reg, err := registry.ArgoCDFormat("argocd").Read(secret)
			if err != nil {
				t.Fatalf("Read() error = %v", err)
			}
			wantName := tc.wantName
			if wantName == "" {
				wantName = "member"
			}
			if reg.ClusterName != wantName {
				t.Errorf("ClusterName = %q, want %q", reg.ClusterName, wantName)
			}
			cfg, err := clientcmd.Load(reg.Kubeconfig)
			if err != nil {
				t.Fatalf("clientcmd.Load() error = %v; kubeconfig:\n%s", err, reg.Kubeconfig)
			}
			wantContext := clientcmdapi.Context{Cluster: "argocd", AuthInfo: "argocd"}
			if cfg.CurrentContext != "argocd" || len(cfg.Contexts) != 1 || cfg.Contexts["argocd"] == nil || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
				t.Fatalf("want one context, cluster and user, all named argocd; kubeconfig:\n%s", reg.Kubeconfig)
			}
			if got := *cfg.Contexts["argocd"]; !reflect.DeepEqual(withoutExtensions(got), wantContext) {
				t.Errorf("context = %#v, want %#v", got, wantContext)
			}
			if got := *cfg.Clusters["argocd"]; !reflect.DeepEqual(withoutExtensions(got), tc.wantCluster) {
				t.Errorf("cluster = %#v\nwant      %#v\nkubeconfig:\n%s", got, tc.wantCluster, reg.Kubeconfig)
			}
			if got := *cfg.AuthInfos["argocd"]; !reflect.DeepEqual(withoutExtensions(got), tc.wantUser) {
				t.Errorf("user = %#v\nwant   %#v\nkubeconfig:\n%s", got, tc.wantUser, reg.Kubeconfig)
			}
		})
	}
}

// withoutExtensions drops the empty Extensions map clientcmd.Load gives
// every loaded object, so that it compares equal to a literal.
func withoutExtensions[T clientcmdapi.Cluster | clientcmdapi.AuthInfo | clientcmdapi.Context](v T) T {
	switch v := any(&v).(type) {
	case *clientcmdapi.Cluster:
		v.Extensions = nilIfEmpty(v.Extensions)
	case *clientcmdapi.AuthInfo:
		v.Extensions = nilIfEmpty(v.Extensions)
	case *clientcmdapi.Context:
		v.Extensions = nilIfEmpty(v.Extensions)
	}
	return v
}

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestArgoCDRefusals checks the Secrets readArgoCD refuses, and that no
// refusal repeats the credentials the Secret holds.
func TestArgoCDRefusals(t *testing.T) {
	credentials := map[string]any{"bearerToken": testToken, "username": "admin", "password": testPassword}
	oversize := []byte(`{"bearerToken":"` + testToken + `","password":"` + testPassword + `","proxyUrl":"`)
	oversize = append(oversize, bytes.Repeat([]byte("x"), kubeconfig.MaxKubeconfigBytes)...)
	oversize = append(oversize, `"}`...)
	overBudget := map[string]any{"bearerToken": testToken}
	for i := range kubeconfig.MaxKubeconfigElements {
		overBudget[fmt.Sprint("k", i)] = i
	}
	for name, tc := range map[string]struct {
		name, server string
		config       any
		edit         func(*corev1.Secret)
		wantReason   string
	}{
		"missing server": {
			name: "member", config: credentials, wantReason: "MissingServer",
		},
		"invalid JSON": {
			name: "member", server: "https://member.example.com",
			config:     []byte(`{"bearerToken":"` + testToken + `","password":"` + testPassword + `"`),
			wantReason: "KubeconfigMalformed",
		},
		"JSON of the wrong shape": {
			name: "member", server: "https://member.example.com",
			config:     []byte(`{"bearerToken":"` + testToken + `","password":"` + testPassword + `","tlsClientConfig":{"insecure":"` + testToken + `"}}`),
			wantReason: "KubeconfigMalformed",
		},
		"missing config": {
			name: "member", server: "https://member.example.com",
			edit:       func(s *corev1.Secret) { delete(s.Data, "config") },
			wantReason: "KubeconfigMalformed",
		},
		"oversize config": {
			name: "member", server: "https://member.example.com", config: oversize, wantReason: "KubeconfigTooLarge",
		},
		"config over the structure budget": {
			name: "member", server: "https://member.example.com", config: overBudget, wantReason: kubeconfig.ReasonKubeconfigTooComplex,
		},
		"invalid name": {
			name: "In-Cluster (prod)", server: "https://member.example.com", config: credentials, wantReason: "InvalidClusterName",
		},
		"missing name": {
			server: "https://member.example.com", config: credentials, wantReason: "InvalidClusterName",
		},
		"invalid name in the annotation": {
			name: "member", server: "https://member.example.com", config: credentials,
			edit: func(s *corev1.Secret) {
				s.Annotations = map[string]string{registry.ClusterNameAnnotation: "Member_1"}
			},
			wantReason: "InvalidClusterName",
		},
	} {
		t.Run(name, func(t *testing.T) {
			secret := argoCDSecret(t, tc.name, tc.server, tc.config)
			if tc.edit != nil {
				tc.edit(secret)
			}
			_, err := registry.ArgoCDFormat("argocd").Read(secret)
			checkRefused(t, err, tc.wantReason)
		})
	}
}

// TestArgoCDHeaderFields checks that a config field client-go sends in an
// HTTP header is refused when no header can carry it, and that the
// refusal names Argo CD's field (issue 12, defect 1).
func TestArgoCDHeaderFields(t *testing.T) {
	for field, config := range map[string]map[string]any{
		"bearerToken": {"bearerToken": testToken + "\r\nX-Injected: 1"},
		"username":    {"username": "admin\n", "password": testPassword},
		"password":    {"username": "admin", "password": testPassword + "\r"},
	} {
		t.Run(field, func(t *testing.T) {
			_, err := registry.ArgoCDFormat("argocd").Read(argoCDSecret(t, "member", "https://member.example.com", config))
			checkRefused(t, err, kubeconfig.ReasonInvalidHeaderValue)
			if err != nil && !strings.Contains(err.Error(), field) {
				t.Errorf("the refusal %q does not name the field %s", err, field)
			}
		})
	}
}

// checkRefused fails unless err is a *kubeconfig.RefusedError with reason,
// whose message holds neither testToken nor testPassword.
func checkRefused(t *testing.T, err error, reason string) {
	t.Helper()
	refused, ok := errors.AsType[*kubeconfig.RefusedError](err)
	if !ok {
		t.Fatalf("Read() error = %v, want a *kubeconfig.RefusedError with reason %s", err, reason)
	}
	if refused.Reason != reason {
		t.Errorf("Reason = %q (%v), want %q", refused.Reason, err, reason)
	}
	if refused.Message == "" {
		t.Errorf("the refusal has no message")
	}
	for _, secret := range []string{testToken, testPassword} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the refusal %q repeats a credential of the Secret", err)
		}
	}
}

// secret returns a Secret namespace/name with the given data.
func secret(namespace, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data}
}

func withAnnotation(s *corev1.Secret, name string) *corev1.Secret {
	s.Annotations = map[string]string{registry.ClusterNameAnnotation: name}
	return s
}

var testKubeconfig = []byte("apiVersion: v1\nkind: Config\n")

// TestLabelledKubeconfigFormats checks the native and multicluster-runtime
// formats, which differ only in their label.
func TestLabelledKubeconfigFormats(t *testing.T) {
	for name, tc := range map[string]struct {
		format registry.Format
		label  string
	}{
		"native":               {format: registry.NativeFormat("fleet"), label: registry.KubeconfigLabel},
		"multicluster-runtime": {format: registry.MulticlusterRuntimeFormat("fleet"), label: registry.MulticlusterRuntimeLabel},
	} {
		t.Run(name, func(t *testing.T) {
			f := tc.format
			if f.Name != name {
				t.Errorf("Name = %q, want %q", f.Name, name)
			}
			if !reflect.DeepEqual(f.Namespaces, []string{"fleet"}) {
				t.Errorf("Namespaces = %q, want [fleet]", f.Namespaces)
			}
			if !f.Label.Matches(labels.Set{tc.label: "true"}) {
				t.Errorf("Label %q does not match %s=true", f.Label, tc.label)
			}
			for _, set := range []labels.Set{{tc.label: "false"}, {}, {"other": "true"}} {
				if f.Label.Matches(set) {
					t.Errorf("Label %q matches %v", f.Label, set)
				}
			}
			if f.Field != nil && !f.Field.Empty() {
				t.Errorf("Field = %q, want none", f.Field)
			}
			if !f.Match(secret("fleet", "member", nil)) {
				t.Errorf("Match() = false for a Secret the selector picked")
			}
			checkReads(t, f, map[string]readCase{
				"name from the Secret": {
					secret: secret("fleet", "member-1", map[string][]byte{"kubeconfig": testKubeconfig}), wantName: "member-1",
				},
				"name from the annotation": {
					secret:   withAnnotation(secret("fleet", "member-1", map[string][]byte{"kubeconfig": testKubeconfig}), "prod.eu"),
					wantName: "prod.eu",
				},
				"missing key": {
					secret: secret("fleet", "member-1", map[string][]byte{"value": testKubeconfig}), wantReason: "MissingKubeconfig",
				},
				"empty key": {
					secret: secret("fleet", "member-1", map[string][]byte{"kubeconfig": {}}), wantReason: "MissingKubeconfig",
				},
				"over the structure budget": {
					secret:     secret("fleet", "member-1", map[string][]byte{"kubeconfig": kubeconfigtest.Flat(kubeconfig.MaxKubeconfigBytes)}),
					wantReason: kubeconfig.ReasonKubeconfigTooComplex,
				},
				"invalid name in the annotation": {
					secret:     withAnnotation(secret("fleet", "member-1", map[string][]byte{"kubeconfig": testKubeconfig}), "Member_1"),
					wantReason: "InvalidClusterName",
				},
			})
		})
	}
}

func TestClusterAPIFormat(t *testing.T) {
	namespaces := []string{"capi-a", "capi-b"}
	f := registry.ClusterAPIFormat(namespaces)
	namespaces[0] = "changed"
	if f.Name != "cluster-api" {
		t.Errorf("Name = %q, want cluster-api", f.Name)
	}
	if !reflect.DeepEqual(f.Namespaces, []string{"capi-a", "capi-b"}) {
		t.Errorf("Namespaces = %q, want [capi-a capi-b], a copy of the argument", f.Namespaces)
	}
	if len(registry.ClusterAPIFormat(nil).Namespaces) != 0 {
		t.Errorf("ClusterAPIFormat(nil).Namespaces = %q, want none (all)", registry.ClusterAPIFormat(nil).Namespaces)
	}
	if !f.Label.Empty() {
		t.Errorf("Label = %q, want everything", f.Label)
	}
	if !f.AnnotationInFleetOnly {
		t.Error("AnnotationInFleetOnly = false: a Secret in any namespace names any cluster")
	}
	if !f.Field.Matches(fields.Set{"type": "cluster.x-k8s.io/secret"}) || f.Field.Matches(fields.Set{"type": "Opaque"}) {
		t.Errorf("Field = %q, want type=cluster.x-k8s.io/secret", f.Field)
	}

	typed := func(s *corev1.Secret, typ corev1.SecretType) *corev1.Secret {
		s.Type = typ
		return s
	}
	for name, tc := range map[string]struct {
		secret *corev1.Secret
		want   bool
	}{
		"type and suffix":   {secret: typed(secret("capi-a", "prod-kubeconfig", nil), registry.ClusterAPISecretType), want: true},
		"no suffix":         {secret: typed(secret("capi-a", "prod-ca", nil), registry.ClusterAPISecretType)},
		"suffix not at end": {secret: typed(secret("capi-a", "prod-kubeconfig-old", nil), registry.ClusterAPISecretType)},
		"another type":      {secret: typed(secret("capi-a", "prod-kubeconfig", nil), corev1.SecretTypeOpaque)},
		"no type":           {secret: secret("capi-a", "prod-kubeconfig", nil)},
	} {
		if got := f.Match(tc.secret); got != tc.want {
			t.Errorf("%s: Match() = %v, want %v", name, got, tc.want)
		}
	}

	labelled := func(s *corev1.Secret, cluster string) *corev1.Secret {
		s.Labels = map[string]string{registry.ClusterAPIClusterLabel: cluster}
		return s
	}
	checkReads(t, f, map[string]readCase{
		"name from the label": {
			secret:   labelled(secret("capi-a", "prod-kubeconfig", map[string][]byte{"value": testKubeconfig}), "prod-eu"),
			wantName: "capi-a.prod-eu",
		},
		"name from the Secret": {
			secret:   secret("capi-b", "prod-kubeconfig", map[string][]byte{"value": testKubeconfig}),
			wantName: "capi-b.prod",
		},
		"name from the annotation": {
			secret:   withAnnotation(labelled(secret("capi-a", "prod-kubeconfig", map[string][]byte{"value": testKubeconfig}), "prod-eu"), "eu"),
			wantName: "eu",
		},
		"missing key": {
			secret:     secret("capi-a", "prod-kubeconfig", map[string][]byte{"kubeconfig": testKubeconfig}),
			wantReason: "MissingKubeconfig",
		},
		"invalid name": {
			secret:     labelled(secret("capi-a", "prod-kubeconfig", map[string][]byte{"value": testKubeconfig}), "Prod_EU"),
			wantReason: "InvalidClusterName",
		},
	})
}

func TestArgoCDFormat(t *testing.T) {
	f := registry.ArgoCDFormat("argocd")
	if f.Name != "argocd" {
		t.Errorf("Name = %q, want argocd", f.Name)
	}
	if !reflect.DeepEqual(f.Namespaces, []string{"argocd"}) {
		t.Errorf("Namespaces = %q, want [argocd]", f.Namespaces)
	}
	if !f.Label.Matches(labels.Set{registry.ArgoCDSecretTypeLabel: "cluster"}) {
		t.Errorf("Label %q does not match Argo CD cluster Secrets", f.Label)
	}
	if f.Label.Matches(labels.Set{registry.ArgoCDSecretTypeLabel: "repository"}) {
		t.Errorf("Label %q matches Argo CD repository Secrets", f.Label)
	}
	if !f.Match(secret("argocd", "cluster-prod", nil)) {
		t.Errorf("Match() = false for a Secret the selector picked")
	}
}

type readCase struct {
	secret *corev1.Secret
	// wantName is the cluster name of an accepted Secret; wantReason the
	// refusal's reason otherwise.
	wantName, wantReason string
}

// checkReads reads each case's Secret with f. An accepted one must give its
// cluster name and the Secret's kubeconfig bytes unchanged.
func checkReads(t *testing.T, f registry.Format, cases map[string]readCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reg, err := f.Read(tc.secret)
			if tc.wantReason != "" {
				checkRefused(t, err, tc.wantReason)
				return
			}
			if err != nil {
				t.Fatalf("Read() error = %v", err)
			}
			want := registry.Registration{ClusterName: tc.wantName, Kubeconfig: testKubeconfig}
			if !reflect.DeepEqual(reg, want) {
				t.Errorf("Read() = %+v, want %+v", reg, want)
			}
		})
	}
}
