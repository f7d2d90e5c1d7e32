package apply

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func TestOwnerOfTrustsOnlyTheFleetsIdentity(t *testing.T) {
	copyLabelled := func(labels map[string]string) metav1.Object {
		return &metav1.ObjectMeta{Labels: labels}
	}
	tests := map[string]struct {
		labels map[string]string
		proven bool
		want   owner
	}{
		"stamped with this fleet's identity": {map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.FleetIDLabel: "id-a", fleetv1alpha1.PropagationLabel: "web"}, false, ours},
		"stamped, of another Propagation":    {map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.FleetIDLabel: "id-a", fleetv1alpha1.PropagationLabel: "api"}, false, otherPropagation},
		"another fleet's, same namespace":    {map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.FleetIDLabel: "id-b", fleetv1alpha1.PropagationLabel: "web"}, true, otherFleet},
		"old, of another namespace's fleet":  {map[string]string{fleetv1alpha1.FleetLabel: "fleet-b", fleetv1alpha1.PropagationLabel: "web"}, true, otherFleet},
		"old, proven":                        {map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.PropagationLabel: "web"}, true, ours},
		"old, proven, of another Propagation": {
			map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.PropagationLabel: "api"}, true, otherPropagation,
		},
		"old, not proven": {map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.PropagationLabel: "web"}, false, unproven},
		"no copy":         {map[string]string{"app": "web"}, false, notACopy},
		"a namespace this fleet made": {
			map[string]string{fleetv1alpha1.FleetLabel: "fleet-a", fleetv1alpha1.FleetIDLabel: "id-a"}, false, notACopy,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ownerOf(copyLabelled(tc.labels), "fleet-a", "id-a", "web", func() bool { return tc.proven }); got != tc.want {
				t.Errorf("ownerOf = %d, want %d", got, tc.want)
			}
		})
	}
}
