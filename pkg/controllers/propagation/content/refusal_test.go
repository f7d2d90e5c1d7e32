package content

import (
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

func object(fields map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: fields}
}

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

// kubeconfigYAML is a kubeconfig with a cluster and a user.
const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters:
- name: east
  cluster: {server: https://east.example}
users:
- name: admin
  user: {token: secret}
contexts:
- name: east
  context: {cluster: east, user: admin}
current-context: east
`

// secretHolding is an Opaque Secret app of team holding text under key,
// in data, or in stringData when plain.
func secretHolding(key, text string, plain bool) *unstructured.Unstructured {
	obj := hubSecret("team", "app", corev1.SecretTypeOpaque, nil)
	if plain {
		obj.Object["stringData"] = map[string]any{key: text}
	} else {
		obj.Object["data"] = map[string]any{key: base64.StdEncoding.EncodeToString([]byte(text))}
	}
	return obj
}

// padded is obj with a null value beside its others in field, as an
// Envelope's manifest may hold.
func padded(obj *unstructured.Unstructured, field string) *unstructured.Unstructured {
	obj.Object[field].(map[string]any)["pad"] = nil
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
		"a Cluster API kubeconfig":                       {hubSecret("team", "east-kubeconfig", registry.ClusterAPISecretType, nil), string(registry.ClusterAPISecretType)},
		"a Cluster API CA":                               {hubSecret("team", "east-ca", registry.ClusterAPISecretType, nil), string(registry.ClusterAPISecretType)},
		"an Argo CD cluster":                             {hubSecret("argocd", "east", "", map[string]any{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType}), registry.ArgoCDSecretTypeLabel},
		"an Argo CD repository":                          {hubSecret("argocd", "repo", "", map[string]any{registry.ArgoCDSecretTypeLabel: "repository"}), registry.ArgoCDSecretTypeLabel},
		"a service account token":                        {hubSecret("team", "t", corev1.SecretTypeServiceAccountToken, nil), string(corev1.SecretTypeServiceAccountToken)},
		"a bootstrap token":                              {hubSecret("kube-system", "bootstrap-token-a", corev1.SecretTypeBootstrapToken, nil), string(corev1.SecretTypeBootstrapToken)},
		"an image pull Secret":                           {hubSecret("team", "pull", corev1.SecretTypeDockerConfigJson, nil), ""},
		"an opaque Secret":                               {hubSecret("team", "app", corev1.SecretTypeOpaque, map[string]any{"app": "web"}), ""},
		"a kubeconfig-named opaque Secret":               {hubSecret("team", "east-kubeconfig", corev1.SecretTypeOpaque, nil), "-kubeconfig"},
		"a kubeconfig-named untyped Secret":              {hubSecret("team", "kubeconfig", "", nil), ""},
		"a kubeconfig under key kubeconfig":              {secretHolding("kubeconfig", kubeconfigYAML, false), "kubeconfig"},
		"a kubeconfig under key value":                   {secretHolding("value", kubeconfigYAML, false), "kubeconfig"},
		"a kubeconfig in stringData":                     {secretHolding("value", kubeconfigYAML, true), "kubeconfig"},
		"a kubeconfig beside a null value":               {padded(secretHolding("kubeconfig", kubeconfigYAML, false), "data"), "kubeconfig"},
		"a kubeconfig in stringData beside a null value": {padded(secretHolding("value", kubeconfigYAML, true), "stringData"), "kubeconfig"},
		"a kubeconfig under another key":                 {secretHolding("config", kubeconfigYAML, false), ""},
		"a kubeconfig with no user":                      {secretHolding("kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://east}\n", false), ""},
		"text under key value":                           {secretHolding("value", "not a kubeconfig: [", false), ""},
		"a ConfigMap labelled like a registration": {
			object(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "team", "name": "x", "labels": map[string]any{registry.KubeconfigLabel: "true"}}}), "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rule, refused := Refusal(tc.obj, "fleet-system")
			if refused != (tc.rule != "") || !strings.Contains(rule, tc.rule) {
				t.Errorf("refusal = %q, %v; want a rule naming %q", rule, refused, tc.rule)
			}
		})
	}
}
