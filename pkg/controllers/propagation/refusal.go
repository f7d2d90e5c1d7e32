package propagation

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The rules of refusal. Each names what is never copied, so that a
// Refused result says which rule an object broke.
const (
	ruleFleetNamespace = "nothing of the fleet namespace, which holds the fleet's credentials, is copied"
	ruleNative         = "a Secret labelled " + registry.KubeconfigLabel + " registers a member and is never copied"
	ruleMCR            = "a Secret labelled " + registry.MulticlusterRuntimeLabel + " registers a member and is never copied"
	ruleClusterAPI     = "a Secret of type " + string(registry.ClusterAPISecretType) + " holds Cluster API cluster credentials and is never copied"
	ruleArgoCD         = "a Secret labelled " + registry.ArgoCDSecretTypeLabel + " holds Argo CD credentials and is never copied"
	ruleToken          = "a Secret of type " + string(corev1.SecretTypeServiceAccountToken) + " holds a service account's token and is never copied"
	ruleBootstrap      = "a Secret of type " + string(corev1.SecretTypeBootstrapToken) + " holds a token to join the hub and is never copied"
)

// refusal returns the rule that forbids copying hub object obj, if one
// does: nothing of the fleet's credentials is ever copied. It refuses
//   - every object of the fleet namespace, and the namespace itself;
//   - every Secret a registration format would read, whether or not the
//     format is enabled: labelled as a native or a multicluster-runtime
//     registration (with any value), of Cluster API's Secret type (any
//     name: its CA, etcd and service account key Secrets are credentials
//     too), or labelled with Argo CD's Secret type (any value: cluster,
//     repository and repo-creds Secrets all hold credentials);
//   - service account token and bootstrap token Secrets.
func refusal(obj *unstructured.Unstructured, fleetNamespace string) (rule string, refused bool) {
	if obj.GetNamespace() == fleetNamespace || obj.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) && obj.GetName() == fleetNamespace {
		return ruleFleetNamespace, true
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
		{hasLabel(l, registry.ArgoCDSecretTypeLabel), ruleArgoCD},
		{typ == string(corev1.SecretTypeServiceAccountToken), ruleToken},
		{typ == string(corev1.SecretTypeBootstrapToken), ruleBootstrap},
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
