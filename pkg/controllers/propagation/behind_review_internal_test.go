package propagation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Review of the "behind" rule (status.go, docs/rollouts.md: "a hub change
// under All while a member's run of the previous content has reported").

func reviewRev(n int64, hash string) fleetv1alpha1.PropagationRevision {
	return fleetv1alpha1.PropagationRevision{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleetv1alpha1.RevisionHashLabel: hash}}, Revision: n}
}

// TestBehindOfAPrunedRevision: with revisionHistoryLimit 1, the sum that
// first judges a slow member behind (its last run applied revision 1,
// "a"; another member's run made revision 2, "b") also prunes revision 1:
// under All every member not in maintenance is given the newest, so
// rollout.RevisionsInUse keeps only 2. From the next sum on (one
// StatusInterval later, asked by the status write's own event) the
// member's content is held by no revision, behind is false, and the member
// counts applied: Ready is written while its run of "b" has not reported,
// the defect the rule was made for. Its result still says which revision
// labelled its copies (labelled 1 < 2), so it can be told behind without
// the pruned revision. Fails on the code under review.
func TestBehindOfAPrunedRevision(t *testing.T) {
	all := &fleetv1alpha1.Propagation{}
	applied := func(hash string, labelled int64) memberResult {
		return memberResult{result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonApplied, available: metav1.ConditionTrue, revision: hash, labelled: labelled}
	}
	for _, tc := range []struct {
		name string
		res  memberResult
		revs []fleetv1alpha1.PropagationRevision
		want bool
	}{
		// The first sum: revision 1 still listed.
		{"revision 1 of 2, before the prune", applied("a", 1), []fleetv1alpha1.PropagationRevision{reviewRev(1, "a"), reviewRev(2, "b")}, true},
		// The next sum: revision 1 pruned (limit 1).
		{"revision 1 of 2, pruned", applied("a", 1), []fleetv1alpha1.PropagationRevision{reviewRev(2, "b")}, true},
		// a -> b -> a under limit 1: a member still at b (its run of the
		// returned a not reported) once revision 2 is pruned.
		{"revision 2 of 3, pruned, content came back", applied("b", 2), []fleetv1alpha1.PropagationRevision{reviewRev(3, "a")}, true},
		// Guards: a member at the content that came back is not behind,
		// whatever its label says; one applied unlabelled is left to the
		// relabel rule.
		{"content that came back, pruned", applied("a", 1), []fleetv1alpha1.PropagationRevision{reviewRev(3, "a")}, false},
		{"unlabelled, no revision holds it", applied("c", 0), []fleetv1alpha1.PropagationRevision{reviewRev(2, "b")}, false},
	} {
		if got := tc.res.behind(all, tc.revs, tc.revs[len(tc.revs)-1].Revision); got != tc.want {
			t.Errorf("%s: behind = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBehindOfRefusedContentThatCameBack: the hub content goes a (1) ->
// b (2) -> a, and the hub refuses revision 3 (a used-up ResourceQuota).
// Member runs then apply a unlabelled (NewestOf finds b newest: Number
// 0): they hold the hub's newest content, but Number(revs, "a") is 1 < 2,
// so status lists them Pending "applied revision 1; applying revision 2",
// a revision they will never apply, and counts them neither applied nor
// available, while a member that still holds b (its run of a not
// reported) counts applied. Ready is False anyway (RevisionRefused), so
// this is a false status, not a Ready held: it lasts while the hub
// refuses. Fails on the code under review.
func TestBehindOfRefusedContentThatCameBack(t *testing.T) {
	all := &fleetv1alpha1.Propagation{}
	revs := []fleetv1alpha1.PropagationRevision{reviewRev(1, "a"), reviewRev(2, "b")}
	atHubContent := memberResult{result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonApplied, available: metav1.ConditionTrue, revision: "a", labelled: 0}
	if atHubContent.relabelOwed(all, revs) != 0 {
		t.Fatal("relabelOwed judges it: the test is of behind alone")
	}
	if atHubContent.behind(all, revs, 2) {
		t.Error("a member that applied the hub's current content (a, its revision 3 refused) is judged behind revision 2 (b), which no member will apply")
	}
}

// TestFailedResultIsNotBehind: a member whose run of revision 2 failed
// (a copy the member's schema rejects), then revision 3 is made by
// another member's run. status() tests behind before it lists the
// result, so the failed member is listed Pending, "applied revision 2;
// applying revision 3", and not counted failed (Ready's reason
// MembersPending, not MembersFailed) while status.rollout, planned from
// the results, says Failed naming it. It lasts until its run of 3
// reports (the hub change asked it). Fails on the code under review.
func TestFailedResultIsNotBehind(t *testing.T) {
	all := &fleetv1alpha1.Propagation{}
	revs := []fleetv1alpha1.PropagationRevision{reviewRev(1, "a"), reviewRev(2, "b"), reviewRev(3, "c")}
	failed := memberResult{result: fleetv1alpha1.ResultFailed, reason: fleetv1alpha1.ReasonInvalid, available: metav1.ConditionFalse, revision: "b", labelled: 2, failedRuns: 1}
	if failed.behind(all, revs, 3) {
		t.Error("a failed member is judged behind: status lists it Pending \"applied revision 2\" instead of Failed")
	}
}
