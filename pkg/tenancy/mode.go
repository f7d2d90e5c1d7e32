package tenancy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Mode is whether tenancy is enforced, from run's --tenancy (Auto, Enforce
// or Off; empty is Off, as before tenancy) and, for Auto, the fleet's
// identity ConfigMap: a fleet created by a version that knows tenancy
// enforces it, an older fleet does not until its admin says Enforce.
func Mode(flag string, identity *corev1.ConfigMap) (string, error) {
	switch flag {
	case fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff:
		return flag, nil
	case "":
		return fleetv1alpha1.TenancyOff, nil
	case fleetv1alpha1.TenancyAuto:
		if identity != nil && identity.Data[fleetv1alpha1.FleetTenancyKey] == fleetv1alpha1.TenancyEnforce {
			return fleetv1alpha1.TenancyEnforce, nil
		}
		return fleetv1alpha1.TenancyOff, nil
	}
	return "", fmt.Errorf("tenancy %q: want %s, %s or %s", flag, fleetv1alpha1.TenancyAuto, fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff)
}
