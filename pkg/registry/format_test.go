package registry_test

import (
	"bytes"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
