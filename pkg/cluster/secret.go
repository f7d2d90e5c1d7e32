package cluster

import (
	corev1 "k8s.io/api/core/v1"
)

// The native registration format: a Secret in the fleet namespace.
const (
	// KubeconfigLabel marks a Secret as a registration when set to "true".
	KubeconfigLabel = "fleet.fleetkube.io/kubeconfig"
	// ClusterNameAnnotation overrides the cluster name, which is otherwise
	// the Secret's name.
	ClusterNameAnnotation = "fleet.fleetkube.io/cluster-name"
	// KubeconfigKey is the data key that holds the kubeconfig.
	KubeconfigKey = "kubeconfig"
)

// Registration is a member cluster as a Secret registers it.
type Registration struct {
	ClusterName string
	Kubeconfig  []byte
}

// ClusterNameOf returns the cluster name a native Secret registers.
func ClusterNameOf(s *corev1.Secret) string {
	if name := s.Annotations[ClusterNameAnnotation]; name != "" {
		return name
	}
	return s.Name
}

// FromSecret reads a native registration Secret. The kubeconfig is not
// checked here: Policy.Parse does that when the member is built.
func FromSecret(s *corev1.Secret) (Registration, error) {
	reg := Registration{ClusterName: ClusterNameOf(s), Kubeconfig: s.Data[KubeconfigKey]}
	if err := ValidateName(reg.ClusterName); err != nil {
		return reg, &RefusedError{Reason: "InvalidClusterName", Message: err.Error() + "; set the annotation " + ClusterNameAnnotation + " to override it"}
	}
	if len(reg.Kubeconfig) == 0 {
		return reg, refuse("MissingKubeconfig", "the Secret has no data key %q", KubeconfigKey)
	}
	return reg, nil
}
