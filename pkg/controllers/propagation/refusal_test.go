package propagation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

func hubSecret(namespace, name string, typ corev1.SecretType, labels map[string]any) *unstructured.Unstructured {
	obj := object(map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"namespace": namespace, "name": name, "labels": labels},
		"data":     map[string]any{"k": "dg=="},
	})
	if typ != "" {
		obj.Object["type"] = string(typ)
	}
	return obj
}

func TestRefusalKeepsTheFleetsCredentials(t *testing.T) {
	configMap := object(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "fleet-system", "name": "x"}})
	tests := map[string]struct {
		obj  *unstructured.Unstructured
		rule string // "" when copied
	}{
		"anything of the fleet namespace": {configMap, "fleet namespace"},
		"a native registration":           {hubSecret("team", "east", "", map[string]any{registry.KubeconfigLabel: "true"}), registry.KubeconfigLabel},
		"a native label of another value": {hubSecret("team", "east", "", map[string]any{registry.KubeconfigLabel: "false"}), registry.KubeconfigLabel},
		"a multicluster-runtime registration": {
			hubSecret("team", "east", "", map[string]any{registry.MulticlusterRuntimeLabel: "true"}), registry.MulticlusterRuntimeLabel,
		},
		"a Cluster API kubeconfig":         {hubSecret("team", "east-kubeconfig", registry.ClusterAPISecretType, nil), string(registry.ClusterAPISecretType)},
		"a Cluster API CA":                 {hubSecret("team", "east-ca", registry.ClusterAPISecretType, nil), string(registry.ClusterAPISecretType)},
		"an Argo CD cluster":               {hubSecret("argocd", "east", "", map[string]any{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType}), registry.ArgoCDSecretTypeLabel},
		"an Argo CD repository":            {hubSecret("argocd", "repo", "", map[string]any{registry.ArgoCDSecretTypeLabel: "repository"}), registry.ArgoCDSecretTypeLabel},
		"a service account token":          {hubSecret("team", "t", corev1.SecretTypeServiceAccountToken, nil), string(corev1.SecretTypeServiceAccountToken)},
		"a bootstrap token":                {hubSecret("kube-system", "bootstrap-token-a", corev1.SecretTypeBootstrapToken, nil), string(corev1.SecretTypeBootstrapToken)},
		"an image pull Secret":             {hubSecret("team", "pull", corev1.SecretTypeDockerConfigJson, nil), ""},
		"an opaque Secret":                 {hubSecret("team", "app", corev1.SecretTypeOpaque, map[string]any{"app": "web"}), ""},
		"a kubeconfig-named opaque Secret": {hubSecret("team", "east-kubeconfig", corev1.SecretTypeOpaque, nil), ""},
		"a ConfigMap labelled like a registration": {
			object(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "team", "name": "x", "labels": map[string]any{registry.KubeconfigLabel: "true"}}}), "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rule, refused := refusal(tc.obj, "fleet-system")
			if refused != (tc.rule != "") || !strings.Contains(rule, tc.rule) {
				t.Errorf("refusal = %q, %v; want a rule naming %q", rule, refused, tc.rule)
			}
		})
	}
}
