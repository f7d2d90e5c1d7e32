package registry

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// FleetID returns the identity of the fleet of namespace, read from its
// ConfigMap fleetv1alpha1.FleetIdentityName, which it creates (immutable,
// with a new UID) when there is none. Whoever creates it first wins; the
// others read it. reader must read from the API server, not a cache.
//
// A fleet it creates enforces tenancy by default: the ConfigMap also holds
// fleetv1alpha1.FleetTenancyKey: Enforce, which run --tenancy=Auto reads.
// A fleet created before tenancy has no such key, and being immutable
// never gains one, so Auto leaves it Off until its admin says Enforce.
func FleetID(ctx context.Context, reader client.Reader, writer client.Writer, namespace string) (string, error) {
	key := types.NamespacedName{Namespace: namespace, Name: fleetv1alpha1.FleetIdentityName}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fleetv1alpha1.FleetIdentityName, Labels: map[string]string{fleetv1alpha1.FleetLabel: namespace}},
			Data: map[string]string{
				fleetv1alpha1.FleetIdentityKey: string(uuid.NewUUID()),
				fleetv1alpha1.FleetTenancyKey:  fleetv1alpha1.TenancyEnforce,
			},
			Immutable: ptr.To(true),
		}
		err = writer.Create(ctx, cm)
		if apierrors.IsAlreadyExists(err) {
			err = reader.Get(ctx, key, cm)
		}
	}
	if err != nil {
		return "", fmt.Errorf("reading the fleet's identity, ConfigMap %s: %w", key, err)
	}
	id := cm.Data[fleetv1alpha1.FleetIdentityKey]
	if id == "" || len(validation.IsValidLabelValue(id)) > 0 {
		return "", fmt.Errorf("ConfigMap %s holds no valid fleet identity under %q: it must be a label value of up to 63 characters", key, fleetv1alpha1.FleetIdentityKey)
	}
	return id, nil
}
