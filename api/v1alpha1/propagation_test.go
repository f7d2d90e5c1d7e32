package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestPropagationCountsPrintZero writes a status as the controller does,
// a merge patch that leaves out the counts that stay 0: `kubectl get
// propagations` still prints them as 0, not blank, so that none applied
// and not known yet look different.
func TestPropagationCountsPrintZero(t *testing.T) {
	cfg := apiServer(t, "fleet.fleetkube.io_propagations.yaml")
	cl := newClient(t, cfg)
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}},
		},
	}
	if err := cl.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	before := p.DeepCopy()
	p.Status.Selected, p.Status.Applied = 2, 2
	if err := cl.Status().Patch(t.Context(), p, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	_, cells := printed(t, cfg, "propagations", "default")
	for name, want := range map[string]any{"Selected": float64(2), "Applied": float64(2), "Drifted": float64(0), "Failed": float64(0)} {
		if cells[name] != want {
			t.Errorf("column %s = %#v, want %#v", name, cells[name], want)
		}
	}
}
