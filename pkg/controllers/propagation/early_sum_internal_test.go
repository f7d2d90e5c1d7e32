package propagation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestFlappingMemberKeepsStatusSumsBounded: a member whose results
// alternate converged and failed within one generation, as fast as the
// status requests come, gets at most one paced sum per StatusInterval and
// two early ones (one per complete picture) per generation, however
// often it flaps.
func TestFlappingMemberKeepsStatusSumsBounded(t *testing.T) {
	r := &reconciler{lastStatus: map[propagationKey]statusSum{}}
	key := propagationKey{Namespace: "team", Name: "web"}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 3}}
	rs := newResults()
	members := []*registry.Cluster{{Name: "east", State: fleetv1alpha1.MemberStateReady}, {Name: "west", State: fleetv1alpha1.MemberStateReady}}
	selected := func(*registry.Cluster) bool { return true }
	converged := memberResult{result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonApplied, available: metav1.ConditionTrue, generation: 3}
	failed := memberResult{result: fleetv1alpha1.ResultFailed, reason: "Forbidden", available: metav1.ConditionFalse, generation: 3}
	rs.set(key, "east", converged)
	start := time.Now()
	sums := 0
	for i := range 2000 {
		if i%2 == 0 {
			rs.set(key, "west", converged)
		} else {
			rs.set(key, "west", failed)
		}
		pic := rs.picture(key, p, members, selected)
		if r.statusWait(key, p.Generation, pic) > 0 {
			continue
		}
		sums++
		r.statusSummed(key, p.Generation, pic)
	}
	intervals := int(time.Since(start)/StatusInterval) + 1
	if limit := intervals + 2; sums > limit {
		t.Errorf("%d status sums in %d intervals of a flapping member: over %d", sums, intervals, limit)
	}
	t.Logf("%d sums of 2000 flaps in %s", sums, time.Since(start).Round(time.Millisecond))
}

// TestPictureNeverCompleteWithoutAResult: a picture is never
// complete (no early Ready or failed sum) while a selected member has no
// result of the generation, while every member is deselected, or when a
// member converged only at an older generation.
func TestPictureNeverCompleteWithoutAResult(t *testing.T) {
	key := propagationKey{Namespace: "team", Name: "web"}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 2}}
	members := []*registry.Cluster{{Name: "east", State: fleetv1alpha1.MemberStateReady}, {Name: "west", State: fleetv1alpha1.MemberStateReady}}
	old := memberResult{result: fleetv1alpha1.ResultApplied, available: metav1.ConditionTrue, generation: 1}
	now := old
	now.generation = 2
	removing := now
	removing.removing = true
	for _, tc := range []struct {
		name       string
		east, west *memberResult
		selected   bool
	}{
		{"west has no result", &now, nil, true},
		{"west's is of generation 1", &now, &old, true},
		{"both of generation 1", &old, &old, true},
		{"no member selected, none reported", nil, nil, false},
		{"both removing", &removing, &removing, false},
	} {
		rs := newResults()
		if tc.east != nil {
			rs.set(key, "east", *tc.east)
		}
		if tc.west != nil {
			rs.set(key, "west", *tc.west)
		}
		sel := func(*registry.Cluster) bool { return tc.selected }
		if got := rs.picture(key, p, members, sel); got != pictureOutstanding {
			t.Errorf("%s: picture %d, want outstanding", tc.name, got)
		}
	}
}
