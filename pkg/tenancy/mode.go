package tenancy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

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

// Agreed is the mode a replica that shares its fleet with others applies,
// given its own and the modes the fleet's live replicas published, by
// replica name ("" for one that has not said): the strictest. It is
// Enforce when this replica or any other enforces, so that a replica whose
// flag lags behind a rollout never gives members what another would refuse;
// Off only once every replica says Off. A replica that has not said is a
// doubt, unless this one enforces anyway: err names it, and the caller
// holds until it says.
func Agreed(own string, replicas map[string]string) (string, error) {
	if own == fleetv1alpha1.TenancyEnforce {
		return own, nil
	}
	var silent []string
	for _, name := range slices.Sorted(maps.Keys(replicas)) {
		switch replicas[name] {
		case fleetv1alpha1.TenancyEnforce:
			return fleetv1alpha1.TenancyEnforce, nil
		case fleetv1alpha1.TenancyOff:
		default:
			silent = append(silent, name)
		}
	}
	if len(silent) > 0 {
		return "", fmt.Errorf("replicas %s have not published their tenancy mode on their Leases: the fleet's mode is not known", strings.Join(silent, ", "))
	}
	return own, nil
}
