package propagation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestRelabelOwed: under strategy All, a member that converged before
// the revision of its content existed owes the label of that revision;
// one labelled, one whose content no revision holds (refused by the hub),
// one under another strategy, or one that did not converge owes none.
func TestRelabelOwed(t *testing.T) {
	all := &fleetv1alpha1.Propagation{}
	paused := &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Paused: true}}
	rev := func(n int64, hash string) fleetv1alpha1.PropagationRevision {
		return fleetv1alpha1.PropagationRevision{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleetv1alpha1.RevisionHashLabel: hash}}, Revision: n}
	}
	converged := memberResult{result: fleetv1alpha1.ResultApplied, available: metav1.ConditionTrue, revision: "b"}
	labelled := converged
	labelled.labelled = 2
	failed := converged
	failed.result, failed.available = fleetv1alpha1.ResultFailed, metav1.ConditionFalse
	revs := []fleetv1alpha1.PropagationRevision{rev(1, "a"), rev(2, "b")}
	for _, tc := range []struct {
		name string
		p    *fleetv1alpha1.Propagation
		res  memberResult
		revs []fleetv1alpha1.PropagationRevision
		want int64
	}{
		{"applied before revision 2", all, converged, revs, 2},
		{"labelled", all, labelled, revs, 0},
		{"no revision of its content", all, converged, revs[:1], 0},
		{"no revision at all", all, converged, nil, 0},
		{"paused", paused, converged, revs, 0},
		{"pinned", &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](1)}}, converged, revs, 0},
		{"failed", all, failed, revs, 0},
	} {
		if got := tc.res.relabelOwed(tc.p, tc.revs); got != tc.want {
			t.Errorf("%s: relabelOwed = %d, want %d", tc.name, got, tc.want)
		}
	}
}
