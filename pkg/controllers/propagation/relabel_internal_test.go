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

// TestBehind: under strategy All, a member whose last run applied the
// content of a revision older than the newest is behind (its run of the
// newest has not reported: Ready waits for it); one at the newest, one
// whose content no revision holds, one of a content that came back (the
// newest revision holds it again), or one under another strategy is not.
func TestBehind(t *testing.T) {
	all := &fleetv1alpha1.Propagation{}
	paused := &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Paused: true}}
	rev := func(n int64, hash string) fleetv1alpha1.PropagationRevision {
		return fleetv1alpha1.PropagationRevision{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleetv1alpha1.RevisionHashLabel: hash}}, Revision: n}
	}
	of := func(hash string) memberResult {
		return memberResult{result: fleetv1alpha1.ResultApplied, available: metav1.ConditionTrue, revision: hash, labelled: 1}
	}
	revs := []fleetv1alpha1.PropagationRevision{rev(1, "a"), rev(2, "b"), rev(3, "c")}
	for _, tc := range []struct {
		name string
		p    *fleetv1alpha1.Propagation
		res  memberResult
		revs []fleetv1alpha1.PropagationRevision
		want bool
	}{
		{"revision 2 of 3", all, of("b"), revs, true},
		{"revision 1 of 3", all, of("a"), revs, true},
		{"the newest", all, of("c"), revs, false},
		{"content no revision holds, unlabelled", all, memberResult{result: fleetv1alpha1.ResultApplied, available: metav1.ConditionTrue, revision: "d"}, revs, false},
		{"content that came back as revision 4", all, of("a"), append(revs[:3:3], rev(4, "a")), false},
		{"no result's content", all, of(""), revs, false},
		{"no revision", all, of("b"), nil, false},
		{"paused", paused, of("b"), revs, false},
		{"pinned", &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](2)}}, of("a"), revs, false},
	} {
		newest := int64(0)
		if len(tc.revs) > 0 {
			newest = tc.revs[len(tc.revs)-1].Revision
		}
		if got := tc.res.behind(tc.p, tc.revs, newest); got != tc.want {
			t.Errorf("%s: behind = %v, want %v", tc.name, got, tc.want)
		}
	}
}
