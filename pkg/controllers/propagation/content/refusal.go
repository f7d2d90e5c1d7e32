package content

import (
	"encoding/base64"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The rules of refusal. Each names what is never copied, so that a
// Refused result says which rule an object broke.
const (
	RuleFleetNamespace = "nothing of the fleet namespace, which holds the fleet's credentials, is copied"
	ruleNative         = "a Secret labelled " + registry.KubeconfigLabel + " registers a member and is never copied"
	ruleMCR            = "a Secret labelled " + registry.MulticlusterRuntimeLabel + " registers a member and is never copied"
	ruleClusterAPI     = "a Secret of type " + string(registry.ClusterAPISecretType) + " holds Cluster API cluster credentials and is never copied"
	ruleClusterAPIName = "a Secret named <cluster>" + registry.ClusterAPINameSuffix + ", as Cluster API names cluster credentials, is never copied, whatever its type"
	ruleKubeconfig     = "a Secret whose data key kubeconfig or value holds a kubeconfig with a cluster and a user is never copied"
	ruleArgoCD         = "a Secret labelled " + registry.ArgoCDSecretTypeLabel + " holds Argo CD credentials and is never copied"
	ruleToken          = "a Secret of type " + string(corev1.SecretTypeServiceAccountToken) + " holds a service account's token and is never copied"
	ruleBootstrap      = "a Secret of type " + string(corev1.SecretTypeBootstrapToken) + " holds a token to join the hub and is never copied"
)

// Refusal returns the rule that forbids copying hub object obj, if one
// does: nothing of the fleet's credentials is ever copied. It refuses
//   - every object of the fleet namespace, and the namespace itself;
//   - every Secret a registration format would read, whether or not the
//     format is enabled: labelled as a native or a multicluster-runtime
//     registration (with any value), of Cluster API's Secret type (any
//     name: its CA, etcd and service account key Secrets are credentials
//     too), or labelled with Argo CD's Secret type (any value: cluster,
//     repository and repo-creds Secrets all hold credentials);
//   - every Secret named as Cluster API names kubeconfigs (a name ending
//     in -kubeconfig), whatever its type: the name is how Cluster API's
//     own tools find it;
//   - every Secret whose data key kubeconfig or value (the native and
//     Cluster API keys) holds a kubeconfig with at least one cluster and
//     one user, whatever its name, type or labels;
//   - service account token and bootstrap token Secrets.
func Refusal(obj *unstructured.Unstructured, fleetNamespace string) (rule string, refused bool) {
	if obj.GetNamespace() == fleetNamespace || obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) && obj.GetName() == fleetNamespace {
		return RuleFleetNamespace, true
	}
	if gvk := obj.GroupVersionKind(); gvk.Group != "" || gvk.Kind != "Secret" {
		return "", false
	}
	l := obj.GetLabels()
	typ, _, _ := unstructured.NestedString(obj.Object, "type")
	for _, r := range []struct {
		broken bool
		rule   string
	}{
		{hasLabel(l, registry.KubeconfigLabel), ruleNative},
		{hasLabel(l, registry.MulticlusterRuntimeLabel), ruleMCR},
		{typ == string(registry.ClusterAPISecretType), ruleClusterAPI},
		{strings.HasSuffix(obj.GetName(), registry.ClusterAPINameSuffix), ruleClusterAPIName},
		{hasLabel(l, registry.ArgoCDSecretTypeLabel), ruleArgoCD},
		{typ == string(corev1.SecretTypeServiceAccountToken), ruleToken},
		{typ == string(corev1.SecretTypeBootstrapToken), ruleBootstrap},
		{holdsKubeconfig(obj), ruleKubeconfig},
	} {
		if r.broken {
			return r.rule, true
		}
	}
	return "", false
}

func hasLabel(l map[string]string, key string) bool {
	_, ok := l[key]
	return ok
}

// holdsKubeconfig reports whether Secret obj's key kubeconfig or value,
// in data or (an Envelope's manifest) stringData, holds a kubeconfig
// naming at least one cluster and one user. It only parses:
// clientcmd.Load reads no file a kubeconfig names.
func holdsKubeconfig(obj *unstructured.Unstructured) bool {
	for _, key := range []string{"kubeconfig", "value"} {
		// Read key by key: another key's value of another type (null)
		// must not hide this one.
		var values [][]byte
		if encoded, ok, _ := unstructured.NestedString(obj.Object, "data", key); ok {
			if raw, err := base64.StdEncoding.DecodeString(encoded); err == nil {
				values = append(values, raw)
			}
		}
		if s, ok, _ := unstructured.NestedString(obj.Object, "stringData", key); ok {
			values = append(values, []byte(s))
		}
		for _, raw := range values {
			if cfg, err := clientcmd.Load(raw); err == nil && len(cfg.Clusters) > 0 && len(cfg.AuthInfos) > 0 {
				return true
			}
		}
	}
	return false
}
