package controlplane

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RemoveNamespace deletes namespace name of the control plane cfg reaches
// and finalizes it at once: envtest runs no namespace controller, so a
// deleted namespace would otherwise stay Terminating for good. A missing
// namespace is no error.
func RemoveNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ns.Spec.Finalizers = nil
	if _, err = cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
