package propagation

import (
	"testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestSelectorThatDoesNotParseDeselectsNoNamedOut: with names and a
// selector that does not parse, a member the names leave out is not
// deselected either: every member is held.
func TestSelectorThatDoesNotParseDeselectsNoNamedOut(t *testing.T) {
	t.Parallel()
	p := &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Members: fleetv1alpha1.MemberSelector{
		Names:    []string{"east"},
		Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"env": "has space"}},
	}}}
	for _, name := range []string{"east", "west"} {
		if selected, err := selects(p, name, map[string]string{"env": "prod"}); err == nil {
			t.Errorf("selects(%s) = %v, nil; want the selector's error, which holds the member", name, selected)
		}
	}
}
