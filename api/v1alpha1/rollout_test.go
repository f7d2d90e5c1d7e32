package v1alpha1_test

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestMaxConcurrencyBelowOneIsRefused: the hub refuses a maxConcurrency
// that lets no member be given a revision (0, a negative number, 0%) or
// that is no number nor percentage, and takes a number of at least 1 or
// a percentage above 0%.
func TestMaxConcurrencyBelowOneIsRefused(t *testing.T) {
	cl := newClient(t, apiServer(t, "fleet.fleetkube.io_propagations.yaml"))
	for i, c := range []struct {
		value intstr.IntOrString
		ok    bool
	}{
		{intstr.FromInt32(0), false},
		{intstr.FromInt32(-1), false},
		{intstr.FromString("0%"), false},
		{intstr.FromString("-5%"), false},
		{intstr.FromString("ten"), false},
		{intstr.FromString("3"), false},
		{intstr.FromInt32(1), true},
		{intstr.FromInt32(25), true},
		{intstr.FromString("10%"), true},
		{intstr.FromString("100%"), true},
	} {
		p := &fleetv1alpha1.Propagation{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("concurrency-%d", i)},
			Spec: fleetv1alpha1.PropagationSpec{
				Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}},
				Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
					MaxConcurrency: &c.value,
				}},
			},
		}
		err := cl.Create(t.Context(), p)
		switch {
		case c.ok && err != nil:
			t.Errorf("maxConcurrency %s: %v, want it taken", c.value.String(), err)
		case !c.ok && !apierrors.IsInvalid(err):
			t.Errorf("maxConcurrency %s: %v, want it refused as Invalid", c.value.String(), err)
		}
	}
}
