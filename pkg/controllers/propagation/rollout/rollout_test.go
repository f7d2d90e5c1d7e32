package rollout

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// planNow is when every plan of these tests is made.
var planNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// member is a member not in maintenance, given assigned, whose last run
// says p.
func member(name string, assigned int64, p Progress) Member {
	return Member{Name: name, Assigned: assigned, Progress: p}
}

// inTier is m with label tier=tier.
func inTier(tier string, m Member) Member {
	m.Labels = map[string]string{"tier": tier}
	return m
}

// inMaintenance is m in maintenance mode.
func inMaintenance(mode fleetv1alpha1.MaintenanceMode, m Member) Member {
	m.Maintenance = mode
	return m
}

// unknown is the progress of a member no run has reported on.
var unknown = Progress{}

// availableAt is the progress of a member whose copies of revision have
// been Available for an hour.
func availableAt(revision int64) Progress {
	return availableFor(revision, time.Hour)
}

// availableFor is the progress of a member whose copies of revision have
// been Available for d.
func availableFor(revision int64, d time.Duration) Progress {
	return Progress{Known: true, Revision: revision, Available: true, AvailableSince: planNow.Add(-d), Holding: true}
}

// applyingAt is the progress of a member whose copies of revision are not
// Available yet.
func applyingAt(revision int64) Progress {
	return Progress{Known: true, Revision: revision, Holding: true,
		Reason: fleetv1alpha1.ReasonNotAvailable, Message: "Deployment web: 1 of 3 replicas available"}
}

// failedAt is the progress of a member that failed to apply revision.
func failedAt(revision int64, reason, message string) Progress {
	return Progress{Known: true, Revision: revision, Failed: true, Holding: true, Reason: reason, Message: message}
}

// gone is the progress of a drained member whose copies are removed.
var gone = Progress{Known: true}

// progressive is a Progressive strategy tuned by tuning.
func progressive(tuning *fleetv1alpha1.ProgressiveRollout) fleetv1alpha1.PropagationSpec {
	return fleetv1alpha1.PropagationSpec{Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: tuning}}
}

// paused is spec, paused.
func paused(spec fleetv1alpha1.PropagationSpec) fleetv1alpha1.PropagationSpec {
	spec.Paused = true
	return spec
}

// wantRollout is what a plan should say of the rollout.
type wantRollout struct {
	assigned        map[string]int64 // members given none left out
	phase           fleetv1alpha1.RolloutPhase
	reason, message string
	updated, failed int32
	after           time.Duration
}

// planCase is a rollout to plan.
type planCase struct {
	name    string
	spec    fleetv1alpha1.PropagationSpec
	target  int64
	members []Member
	// kept are the revisions the hub holds; nil for 1 to target.
	kept []int64
	// refused is why the hub refused a revision of the current content.
	refused string
	want    wantRollout
}

// revisionsUpTo are revisions 1 to n.
func revisionsUpTo(n int64) []int64 {
	var revisions []int64
	for i := int64(1); i <= n; i++ {
		revisions = append(revisions, i)
	}
	return revisions
}

// runPlanCases plans each case and checks what it says of the rollout.
func runPlanCases(t *testing.T, cases []planCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			members := slices.Clone(c.members)
			kept := c.kept
			if kept == nil {
				kept = revisionsUpTo(c.target)
			}
			plan := PlanOf(Input{Spec: &c.spec, Target: c.target, Members: members, Now: planNow, Kept: kept, Refused: c.refused})
			if !reflect.DeepEqual(members, c.members) {
				t.Errorf("PlanOf changed its input members to %+v", members)
			}
			checkRollout(t, plan, c.target, c.want)
		})
	}
}

// checkRollout checks what plan, of the rollout of target, says of it.
func checkRollout(t *testing.T, plan Plan, target int64, want wantRollout) {
	t.Helper()
	s := plan.Status
	if got := assignments(t, s); !maps.Equal(got, want.assigned) {
		t.Errorf("assigned %v, want %v", got, want.assigned)
	}
	if s.Revision != target {
		t.Errorf("revision %d, want %d", s.Revision, target)
	}
	if s.Phase != want.phase || s.Reason != want.reason {
		t.Errorf("phase %s, reason %s, want %s, %s", s.Phase, s.Reason, want.phase, want.reason)
	}
	if s.Message != want.message {
		t.Errorf("message %q, want %q", s.Message, want.message)
	}
	if s.Updated != want.updated || s.Failed != want.failed {
		t.Errorf("updated %d, failed %d, want %d, %d", s.Updated, s.Failed, want.updated, want.failed)
	}
	if plan.After != want.after {
		t.Errorf("after %v, want %v", plan.After, want.after)
	}
}

// assignments are the revisions status gives each member, checking that
// its members are sorted by revision and by name.
func assignments(t *testing.T, s fleetv1alpha1.RolloutStatus) map[string]int64 {
	t.Helper()
	assigned := map[string]int64{}
	for i, r := range s.Members {
		if (i > 0 && s.Members[i-1].Revision >= r.Revision) || r.Revision == 0 || !slices.IsSorted(r.Names) {
			t.Errorf("members %+v are not sorted, or list revision 0", s.Members)
		}
		for _, name := range r.Names {
			assigned[name] = r.Revision
		}
	}
	return assigned
}

func TestPlanDefaults(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:    "no revision yet keeps assignments",
		target:  0,
		members: []Member{member("a", 1, availableAt(1)), member("b", 0, unknown)},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "WaitingForRevision", message: "no revision yet",
		},
	}, {
		name:    "strategy unset is All",
		target:  2,
		members: []Member{member("c", 2, unknown), member("b", 0, unknown), member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2, "c": 2},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 3 members run revision 2; in flight: a, b, c",
		},
	}, {
		name:    "Progressive untuned: one at a time, in name order",
		spec:    progressive(nil),
		target:  2,
		members: []Member{member("c", 1, availableAt(1)), member("b", 1, availableAt(1)), member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 1, "c": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 3 members run revision 2; in flight: a",
		},
	}, {
		name:    "minSuccessTime unset: done once Available",
		spec:    progressive(&fleetv1alpha1.ProgressiveRollout{}),
		target:  2,
		members: []Member{member("a", 2, availableFor(2, 0)), member("b", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "1 of 2 members run revision 2; in flight: b",
			updated: 1,
		},
	}, {
		name:    "no members: never Complete, nothing was rolled out",
		target:  1,
		members: nil,
		want: wantRollout{
			assigned: map[string]int64{},
			phase:    fleetv1alpha1.RolloutProgressing, reason: fleetv1alpha1.ReasonNoMembersSelected,
			message: "no member takes revision 1: none is selected, or every one selected is cordoned or drained",
		},
	}, {
		name:    "every member cordoned: never Complete",
		target:  2,
		members: []Member{inMaintenance(fleetv1alpha1.MaintenanceCordon, member("a", 1, availableAt(1)))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: fleetv1alpha1.ReasonNoMembersSelected,
			message: "no member takes revision 2: none is selected, or every one selected is cordoned or drained; 1 cordoned member keeps its revision",
		},
	}})
}

// TestPlanPinned: a rollout of the revision spec.revision pins is
// Pinned, not Complete, once done while a newer revision exists; it is
// Complete when the pin is the newest, and Progressing until done.
func TestPlanPinned(t *testing.T) {
	pinned := fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](1)}
	for _, c := range []struct {
		name    string
		newest  int64
		members []Member
		want    wantRollout
	}{{
		name:    "done, a newer revision held back",
		newest:  3,
		members: []Member{member("a", 1, availableAt(1)), member("b", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1, "b": 1},
			phase:    fleetv1alpha1.RolloutPinned, reason: fleetv1alpha1.ReasonPinnedToOlderRevision, updated: 2,
			message: "2 members run revision 1; spec.revision pins it: the newest, revision 3, is not rolled out until the pin is removed (fleet-manager rollout unpin)",
		},
	}, {
		name:    "not done yet",
		newest:  3,
		members: []Member{member("a", 1, availableAt(1)), member("b", 3, availableAt(3))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1, "b": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing", updated: 1,
			message: "1 of 2 members run revision 1; in flight: b",
		},
	}, {
		name:    "pinned to the newest",
		newest:  1,
		members: []Member{member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", updated: 1,
			message: "1 member runs revision 1",
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			plan := PlanOf(Input{Spec: &pinned, Target: 1, Newest: c.newest, Members: slices.Clone(c.members), Now: planNow, Kept: revisionsUpTo(c.newest)})
			checkRollout(t, plan, 1, c.want)
		})
	}
}

// TestPlanHeldByTheHub: a pin the hub does not keep, or a revision of
// the current content it refused, is named in the rollout's reason and
// message; a refusal fails a rollout that is not pinned, which is never
// Complete at the revision before.
func TestPlanHeldByTheHub(t *testing.T) {
	const refused = "the hub refused a new revision (1800321 bytes): etcdserver: request is too large"
	runPlanCases(t, []planCase{{
		name:    "a pin the hub does not keep",
		spec:    fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](2)},
		target:  2,
		kept:    []int64{1, 3},
		members: []Member{member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2},
			phase:    fleetv1alpha1.RolloutProgressing, reason: fleetv1alpha1.ReasonRevisionInvalid,
			message: "spec.revision 2 is not kept: it cannot be rolled out",
		},
	}, {
		name:    "a refused revision fails a rollout done at the revision before",
		target:  1,
		refused: refused,
		members: []Member{member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutFailed, reason: fleetv1alpha1.ReasonRevisionRefused, message: refused,
			updated: 1,
		},
	}, {
		name:    "a refused first revision fails the rollout",
		target:  0,
		refused: refused,
		members: []Member{member("a", 0, unknown)},
		want: wantRollout{
			assigned: map[string]int64{},
			phase:    fleetv1alpha1.RolloutFailed, reason: fleetv1alpha1.ReasonRevisionRefused, message: refused,
		},
	}, {
		name:    "pinned: the pin is rolled out, the refusal named",
		spec:    fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](1)},
		target:  1,
		refused: refused,
		members: []Member{member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutComplete, reason: fleetv1alpha1.ReasonRevisionRefused, message: refused,
			updated: 1,
		},
	}, {
		name:    "a pin the hub keeps is not named",
		spec:    fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](1)},
		target:  1,
		kept:    []int64{1},
		members: []Member{member("a", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "1 member runs revision 1",
			updated: 1,
		},
	}})
}

func TestPlanAll(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:   "every member at once",
		spec:   fleetv1alpha1.PropagationSpec{Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutAll}},
		target: 5,
		members: []Member{
			member("a", 4, availableAt(4)), member("b", 5, availableAt(5)), member("c", 0, unknown),
			member("d", 3, applyingAt(3)), member("e", 5, applyingAt(5)), member("f", 5, availableAt(4)),
			member("g", 4, availableAt(4)),
		},
		want: wantRollout{
			assigned: map[string]int64{"a": 5, "b": 5, "c": 5, "d": 5, "e": 5, "f": 5, "g": 5},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "1 of 7 members run revision 5; in flight: a, c, d, e, f and 1 more",
			updated: 1,
		},
	}, {
		name:    "complete",
		target:  5,
		members: []Member{member("a", 5, availableAt(5)), member("b", 5, availableAt(5))},
		want: wantRollout{
			assigned: map[string]int64{"a": 5, "b": 5},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "2 members run revision 5",
			updated: 2,
		},
	}, {
		name:    "Progressive tuning is not read",
		spec:    fleetv1alpha1.PropagationSpec{Strategy: fleetv1alpha1.RolloutStrategy{Progressive: &fleetv1alpha1.ProgressiveRollout{MinSuccessTime: &metav1.Duration{Duration: 2 * time.Hour}}}},
		target:  5,
		members: []Member{member("a", 5, availableAt(5))},
		want: wantRollout{
			assigned: map[string]int64{"a": 5},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "1 member runs revision 5",
			updated: 1,
		},
	}})
}

// progressing is a Progressing rollout's want.
func progressing(assigned map[string]int64, updated int32, message string) wantRollout {
	return wantRollout{assigned: assigned, phase: fleetv1alpha1.RolloutProgressing, reason: "Progressing", message: message, updated: updated}
}

// tiered is a fleet of tiers canary (c1), eu (e1, e2, e3), us (u1, u2)
// and none (x1), each at revision 1 and Available, but those of given,
// which are given revision 2 and whose progress given says.
func tiered(given map[string]Progress) []Member {
	tierOf := map[string]string{"c1": "canary", "e1": "eu", "e2": "eu", "e3": "eu", "u1": "us", "u2": "us", "x1": ""}
	var members []Member
	for _, name := range []string{"u2", "x1", "e3", "c1", "e1", "u1", "e2"} {
		m := member(name, 1, availableAt(1))
		if p, ok := given[name]; ok {
			m = member(name, 2, p)
		}
		if tierOf[name] != "" {
			m = inTier(tierOf[name], m)
		}
		members = append(members, m)
	}
	return members
}

func TestPlanProgressive(t *testing.T) {
	tuning := fleetv1alpha1.ProgressiveRollout{
		GroupBy: "tier", Groups: []string{"canary", "eu", "us"}, MaxConcurrency: ptr.To(intstr.FromInt32(2)),
	}
	tiers := progressive(&tuning)
	done, applying := availableAt(2), applyingAt(2)
	runPlanCases(t, []planCase{{
		name:    "the canary first, alone in its group",
		spec:    tiers,
		target:  2,
		members: tiered(nil),
		want: progressing(map[string]int64{"c1": 2, "e1": 1, "e2": 1, "e3": 1, "u1": 1, "u2": 1, "x1": 1}, 0,
			"0 of 7 members run revision 2; in flight: c1"),
	}, {
		name:    "canary done: eu, two at a time, in name order",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 1, "u1": 1, "u2": 1, "x1": 1}, 1,
			"1 of 7 members run revision 2; in flight: e1, e2"),
	}, {
		name:    "a slot frees: the next of eu",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": applying}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 1, "u2": 1, "x1": 1}, 2,
			"2 of 7 members run revision 2; in flight: e2, e3"),
	}, {
		name:    "a slot is free but eu is not done: us waits",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": applying, "e3": done}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 1, "u2": 1, "x1": 1}, 3,
			"3 of 7 members run revision 2; in flight: e2"),
	}, {
		name:    "eu done: us",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": done, "e3": done}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 2, "u2": 2, "x1": 1}, 4,
			"4 of 7 members run revision 2; in flight: u1, u2"),
	}, {
		name:    "a slot is free but us is not done: the others wait",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": done, "e3": done, "u1": done, "u2": applying}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 2, "u2": 2, "x1": 1}, 5,
			"5 of 7 members run revision 2; in flight: u2"),
	}, {
		name:    "us done: the rest",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": done, "e3": done, "u1": done, "u2": done}),
		want: progressing(map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 2, "u2": 2, "x1": 2}, 6,
			"6 of 7 members run revision 2; in flight: x1"),
	}, {
		name:    "complete",
		spec:    tiers,
		target:  2,
		members: tiered(map[string]Progress{"c1": done, "e1": done, "e2": done, "e3": done, "u1": done, "u2": done, "x1": done}),
		want: wantRollout{
			assigned: map[string]int64{"c1": 2, "e1": 2, "e2": 2, "e3": 2, "u1": 2, "u2": 2, "x1": 2},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "7 members run revision 2",
			updated: 7,
		},
	}, {
		name: "a failed member holds its group's successors",
		spec: func() fleetv1alpha1.PropagationSpec {
			tolerant := tuning
			tolerant.MaxFailures = ptr.To[int32](2)
			return progressive(&tolerant)
		}(),
		target:  2,
		members: tiered(map[string]Progress{"c1": failedAt(2, fleetv1alpha1.ReasonInvalid, "Deployment web: invalid")}),
		want: wantRollout{
			assigned: map[string]int64{"c1": 2, "e1": 1, "e2": 1, "e3": 1, "u1": 1, "u2": 1, "x1": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 7 members run revision 2; failed: c1", failed: 1,
		},
	}, {
		name:   "a first rollout goes in order too",
		spec:   tiers,
		target: 1,
		members: []Member{
			inTier("eu", member("e2", 0, unknown)), inTier("eu", member("e1", 0, unknown)),
			inTier("canary", member("c1", 0, unknown)), inTier("us", member("u1", 0, unknown)),
		},
		want: progressing(map[string]int64{"c1": 1}, 0, "0 of 4 members run revision 1; in flight: c1"),
	}})
}

// fresh is n members named m000 on, given no revision yet.
func fresh(n int) []Member {
	var members []Member
	for i := range n {
		members = append(members, member(fmt.Sprintf("m%03d", i), 0, unknown))
	}
	return members
}

func TestPlanMaxConcurrency(t *testing.T) {
	for _, c := range []struct {
		name           string
		maxConcurrency intstr.IntOrString
		members        int
		want           int
	}{
		{"10% of 100", intstr.FromString("10%"), 100, 10},
		{"10% of 5, at least 1", intstr.FromString("10%"), 5, 1},
		{"25% of 10, rounded down", intstr.FromString("25%"), 10, 2},
		{"a number", intstr.FromInt32(3), 10, 3},
		// Values the hub refuses, stored before it did, hold the rollout.
		{"0: held", intstr.FromInt32(0), 10, 0},
		{"-1: held", intstr.FromInt32(-1), 10, 0},
		{"0%: held", intstr.FromString("0%"), 10, 0},
		{"not a percentage: held", intstr.FromString("ten"), 10, 0},
		{"a number as a string: held", intstr.FromString("3"), 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: &c.maxConcurrency})
			// Cordoned members count in no percentage, nor in flight.
			members := append(fresh(c.members), inMaintenance(fleetv1alpha1.MaintenanceCordon, member("zz", 0, unknown)))
			for i := range 20 {
				members = append(members, inMaintenance(fleetv1alpha1.MaintenanceCordon, member(fmt.Sprintf("zz%02d", i), 1, unknown)))
			}
			plan := PlanOf(Input{Spec: &spec, Target: 1, Members: members, Now: planNow})
			got := 0
			for name, revision := range assignments(t, plan.Status) {
				if revision == 1 && !strings.HasPrefix(name, "zz") {
					got++
				}
			}
			if got != c.want {
				t.Errorf("%d members given the revision, want %d", got, c.want)
			}
			if held := plan.Status.Phase == fleetv1alpha1.RolloutStopped && plan.Status.Reason == fleetv1alpha1.ReasonInvalid &&
				strings.Contains(plan.Status.Message, "maxConcurrency "+c.maxConcurrency.String()); held != (c.want == 0) {
				t.Errorf("phase %s, reason %s, message %q: held %t, want %t", plan.Status.Phase, plan.Status.Reason, plan.Status.Message, held, c.want == 0)
			}
		})
	}
}

// after is w, to be planned again after d.
func after(d time.Duration, w wantRollout) wantRollout {
	w.after = d
	return w
}

func TestPlanMinSuccessTime(t *testing.T) {
	spec := progressive(&fleetv1alpha1.ProgressiveRollout{
		MaxConcurrency: ptr.To(intstr.FromInt32(3)), MinSuccessTime: &metav1.Duration{Duration: 10 * time.Minute},
	})
	runPlanCases(t, []planCase{{
		name:   "Available, not for long enough: in flight till the first is done",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, availableFor(2, 4*time.Minute)), member("b", 2, availableFor(2, 8*time.Minute)),
			member("c", 1, availableAt(1)), member("d", 1, availableAt(1)),
		},
		want: after(2*time.Minute, progressing(map[string]int64{"a": 2, "b": 2, "c": 2, "d": 1}, 0,
			"0 of 4 members run revision 2; in flight: a, b, c")),
	}, {
		name:   "one done, the other not yet",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, availableFor(2, 10*time.Minute)), member("b", 2, availableFor(2, 9*time.Minute)),
			member("c", 2, applyingAt(2)), member("d", 1, availableAt(1)),
		},
		want: after(time.Minute, progressing(map[string]int64{"a": 2, "b": 2, "c": 2, "d": 2}, 1,
			"1 of 4 members run revision 2; in flight: b, c, d")),
	}, {
		name:    "Available with another revision: nothing to wait for",
		spec:    spec,
		target:  2,
		members: []Member{member("a", 2, availableAt(2)), member("b", 2, availableFor(1, time.Minute))},
		want:    progressing(map[string]int64{"a": 2, "b": 2}, 1, "1 of 2 members run revision 2; in flight: b"),
	}, {
		name:   "a cordoned member is not waited for",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, availableAt(2)),
			inMaintenance(fleetv1alpha1.MaintenanceCordon, member("b", 2, availableFor(2, time.Minute))),
		},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "1 member runs revision 2",
			updated: 1,
		},
	}})
}

func TestPlanUnknownProgress(t *testing.T) {
	spec := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(2))})
	runPlanCases(t, []planCase{{
		name:   "after a restart, members given the revision are in flight",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, unknown), member("b", 2, unknown), member("c", 1, unknown), member("d", 1, unknown),
		},
		want: progressing(map[string]int64{"a": 2, "b": 2, "c": 1, "d": 1}, 0,
			"0 of 4 members run revision 2; in flight: a, b"),
	}, {
		name:   "one reported done: one slot",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, unknown), member("b", 2, availableAt(2)), member("c", 1, unknown), member("d", 1, unknown),
		},
		want: progressing(map[string]int64{"a": 2, "b": 2, "c": 2, "d": 1}, 1,
			"1 of 4 members run revision 2; in flight: a, c"),
	}, {
		name:   "a failure of another revision is not one of this",
		spec:   spec,
		target: 2,
		members: []Member{
			member("a", 2, failedAt(1, fleetv1alpha1.ReasonInvalid, "Deployment web: invalid")), member("b", 1, availableAt(1)),
		},
		want: progressing(map[string]int64{"a": 2, "b": 2}, 0, "0 of 2 members run revision 2; in flight: a, b"),
	}})
}

func TestPlanStopped(t *testing.T) {
	deadline := failedAt(2, fleetv1alpha1.ReasonProgressDeadlineExceeded, "Deployment web: 0 of 3 replicas available")
	tolerant := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(3)), MaxFailures: ptr.To[int32](2)})
	runPlanCases(t, []planCase{{
		name:    "an All rollout never stops, but ends Failed once every member ran it or failed",
		target:  2,
		members: []Member{member("a", 2, availableAt(2)), member("b", 2, deadline)},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2},
			phase:    fleetv1alpha1.RolloutFailed, reason: fleetv1alpha1.ReasonMembersFailed,
			message: "revision 2 failed in 1 of 2 members: member b: Deployment web: 0 of 3 replicas available (ProgressDeadlineExceeded)",
			updated: 1, failed: 1,
		},
	}, {
		name:    "an All rollout with a member still in flight is Progressing",
		target:  2,
		members: []Member{member("a", 2, applyingAt(2)), member("b", 2, deadline)},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 2 members run revision 2; in flight: a; failed: b",
			failed:  1,
		},
	}, {
		name:   "the first failure stops it by default",
		spec:   progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(3))}),
		target: 2,
		members: []Member{
			member("m1", 2, availableAt(2)), member("m3", 2, failedAt(2, fleetv1alpha1.ReasonInvalid, "Deployment web: spec.replicas: Invalid value")),
			member("m2", 2, applyingAt(2)), member("m4", 1, availableAt(1)), member("m5", 0, unknown),
		},
		want: wantRollout{
			// m5 joins a stopped rollout: it is given the revision most
			// of its group runs besides the stopped one.
			assigned: map[string]int64{"m1": 2, "m2": 2, "m3": 2, "m4": 1, "m5": 1},
			phase:    fleetv1alpha1.RolloutStopped, reason: fleetv1alpha1.ReasonRolloutStopped,
			message: "stopped after 1 failed member (maxFailures 1): member m3: Deployment web: spec.replicas: Invalid value (Invalid)",
			updated: 1, failed: 1,
		},
	}, {
		name:    "short of maxFailures: failures hold slots",
		spec:    tolerant,
		target:  2,
		members: []Member{member("a", 2, deadline), member("b", 2, applyingAt(2)), member("c", 1, availableAt(1)), member("d", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2, "c": 2, "d": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 4 members run revision 2; in flight: b, c; failed: a", failed: 1,
		},
	}, {
		name:    "maxFailures reached: no member is given the revision",
		spec:    tolerant,
		target:  2,
		members: []Member{member("a", 2, deadline), member("b", 2, deadline), member("c", 1, availableAt(1)), member("d", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2, "c": 1, "d": 1},
			phase:    fleetv1alpha1.RolloutStopped, reason: fleetv1alpha1.ReasonRolloutStopped,
			message: "stopped after 2 failed members (maxFailures 2): member a: Deployment web: 0 of 3 replicas available (ProgressDeadlineExceeded)",
			failed:  2,
		},
	}, {
		name:    "stopped, even when paused",
		spec:    paused(tolerant),
		target:  2,
		members: []Member{member("a", 2, deadline), member("b", 2, failedAt(2, "", ""))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 2},
			phase:    fleetv1alpha1.RolloutStopped, reason: fleetv1alpha1.ReasonRolloutStopped,
			message: "stopped after 2 failed members (maxFailures 2): member a: Deployment web: 0 of 3 replicas available (ProgressDeadlineExceeded)",
			failed:  2,
		},
	}})

	t.Run("a long message is cut to 1024 bytes", func(t *testing.T) {
		long := failedAt(2, fleetv1alpha1.ReasonInvalid, strings.Repeat("é", 1000))
		spec := progressive(nil)
		plan := PlanOf(Input{Spec: &spec, Target: 2, Members: []Member{member("a", 2, long)}, Now: planNow})
		message := plan.Status.Message
		if len(message) > 1024 || len(message) < 1020 || !strings.HasPrefix(message, "stopped after 1 failed member") || !utf8.ValidString(message) {
			t.Errorf("message of %d bytes %q, want the first 1024 or so, valid UTF-8", len(message), message)
		}
	})
}

func TestPlanPaused(t *testing.T) {
	tiers := paused(progressive(&fleetv1alpha1.ProgressiveRollout{
		GroupBy: "tier", Groups: []string{"canary", "eu", "us"}, MaxConcurrency: ptr.To(intstr.FromInt32(2)),
	}))
	runPlanCases(t, []planCase{{
		name:   "joiners get their group's revision; no one else moves",
		spec:   tiers,
		target: 3,
		members: []Member{
			inTier("canary", member("c1", 3, availableAt(3))), inTier("canary", member("c2", 0, unknown)),
			inTier("eu", member("e1", 3, availableAt(3))), inTier("eu", member("e2", 2, availableAt(2))),
			inTier("eu", member("e3", 2, availableAt(2))), inTier("eu", member("e4", 1, availableAt(1))),
			inTier("eu", member("e5", 0, unknown)),
			inTier("us", member("u1", 0, unknown)), inTier("us", member("u2", 0, unknown)),
			// A cordoned member's revision is not its group's.
			inMaintenance(fleetv1alpha1.MaintenanceCordon, inTier("us", member("u3", 2, availableAt(2)))),
		},
		want: wantRollout{
			assigned: map[string]int64{"c1": 3, "c2": 3, "e1": 3, "e2": 2, "e3": 2, "e4": 1, "e5": 2, "u3": 2},
			phase:    fleetv1alpha1.RolloutPaused, reason: "Paused",
			message: "paused: 2 of 9 members run revision 3; 1 cordoned member keeps its revision",
			updated: 2,
		},
	}, {
		name:   "All: a tie goes to the higher revision",
		spec:   paused(fleetv1alpha1.PropagationSpec{}),
		target: 3,
		members: []Member{
			member("a", 1, availableAt(1)), member("b", 2, availableAt(2)), member("c", 3, availableAt(3)), member("j", 0, unknown),
		},
		want: wantRollout{
			assigned: map[string]int64{"a": 1, "b": 2, "c": 3, "j": 2},
			phase:    fleetv1alpha1.RolloutPaused, reason: "Paused", message: "paused: 1 of 4 members run revision 3",
			updated: 1,
		},
	}, {
		name:    "All: the rollout is done, a joiner gets the revision",
		spec:    paused(fleetv1alpha1.PropagationSpec{}),
		target:  3,
		members: []Member{member("a", 3, availableAt(3)), member("j", 0, unknown)},
		want: wantRollout{
			assigned: map[string]int64{"a": 3, "j": 3},
			phase:    fleetv1alpha1.RolloutPaused, reason: "Paused", message: "paused: 1 of 2 members run revision 3",
			updated: 1,
		},
	}, {
		name:    "complete even when paused",
		spec:    paused(fleetv1alpha1.PropagationSpec{}),
		target:  3,
		members: []Member{member("a", 3, availableAt(3))},
		want: wantRollout{
			assigned: map[string]int64{"a": 3},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete", message: "1 member runs revision 3",
			updated: 1,
		},
	}})
}

func TestPlanRollback(t *testing.T) {
	spec := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))})
	spec.Revision = ptr.To[int64](2)
	runPlanCases(t, []planCase{{
		name:    "the first member goes back",
		spec:    spec,
		target:  2,
		members: []Member{member("c", 3, availableAt(3)), member("a", 3, availableAt(3)), member("b", 3, availableAt(3))},
		want:    progressing(map[string]int64{"a": 2, "b": 3, "c": 3}, 0, "0 of 3 members run revision 2; in flight: a"),
	}, {
		name:    "it runs revision 2 while revision 3 is reported: in flight",
		spec:    spec,
		target:  2,
		members: []Member{member("c", 3, availableAt(3)), member("a", 2, availableAt(3)), member("b", 3, availableAt(3))},
		want:    progressing(map[string]int64{"a": 2, "b": 3, "c": 3}, 0, "0 of 3 members run revision 2; in flight: a"),
	}, {
		name:    "then the next",
		spec:    spec,
		target:  2,
		members: []Member{member("c", 3, availableAt(3)), member("a", 2, availableAt(2)), member("b", 3, availableAt(3))},
		want:    progressing(map[string]int64{"a": 2, "b": 2, "c": 3}, 1, "1 of 3 members run revision 2; in flight: b"),
	}, {
		name:    "All: every member at once",
		spec:    fleetv1alpha1.PropagationSpec{Revision: ptr.To[int64](2)},
		target:  2,
		members: []Member{member("c", 3, availableAt(3)), member("a", 2, availableAt(2)), member("b", 3, availableAt(3))},
		want:    progressing(map[string]int64{"a": 2, "b": 2, "c": 2}, 1, "1 of 3 members run revision 2; in flight: b, c"),
	}})
}

func TestPlanMaintenance(t *testing.T) {
	cordoned := func(m Member) Member { return inMaintenance(fleetv1alpha1.MaintenanceCordon, m) }
	drained := func(m Member) Member { return inMaintenance(fleetv1alpha1.MaintenanceDrain, m) }
	runPlanCases(t, []planCase{{
		name:   "All: members in maintenance keep their revision, or none",
		target: 3,
		members: []Member{
			cordoned(member("a", 2, availableAt(2))), cordoned(member("b", 0, unknown)), drained(member("c", 2, availableAt(2))),
			member("d", 2, availableAt(2)), cordoned(member("e", 3, failedAt(3, fleetv1alpha1.ReasonInvalid, "invalid"))),
			cordoned(member("f", 1, availableAt(1))),
		},
		want: progressing(map[string]int64{"a": 2, "c": 2, "d": 3, "e": 3, "f": 1}, 0,
			"0 of 1 members run revision 3; in flight: d; 2 cordoned members keep their revision; 1 drained member keeps its revision"),
	}, {
		name:   "complete with members in maintenance",
		target: 3,
		members: []Member{
			cordoned(member("a", 2, availableAt(2))), member("d", 3, availableAt(3)), cordoned(member("e", 3, unknown)),
		},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "d": 3, "e": 3},
			phase:    fleetv1alpha1.RolloutComplete, reason: "Complete",
			message: "1 member runs revision 3; 1 cordoned member keeps its revision",
			updated: 1,
		},
	}, {
		name:   "Progressive: members in maintenance hold no slot, and are not waited for",
		spec:   progressive(&fleetv1alpha1.ProgressiveRollout{GroupBy: "tier", Groups: []string{"canary"}}),
		target: 3,
		members: []Member{
			cordoned(inTier("canary", member("c1", 3, unknown))), cordoned(inTier("canary", member("c2", 2, availableAt(2)))),
			inTier("canary", member("c3", 3, availableAt(3))), member("x", 2, availableAt(2)), member("y", 2, availableAt(2)),
		},
		want: progressing(map[string]int64{"c1": 3, "c2": 2, "c3": 3, "x": 3, "y": 2}, 1,
			"1 of 3 members run revision 3; in flight: x; 1 cordoned member keeps its revision"),
	}})
}

// drainCase is one plan of a rollout with drained members, from draining,
// the previous status.rollout.draining.
type drainCase struct {
	name     string
	spec     fleetv1alpha1.PropagationSpec
	members  []Member
	draining []string
	want     []string
	// wantWaits are the members waiting for the budget, each waiting for
	// wantWait.
	wantWaits []string
	wantWait  string
}

// runDrainCases plans each case, of revision 1, and checks which drained
// members drain and which wait.
func runDrainCases(t *testing.T, cases []drainCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := PlanOf(Input{Spec: &c.spec, Target: 1, Members: c.members, Draining: c.draining, Now: planNow})
			if !slices.Equal(plan.Status.Draining, c.want) {
				t.Errorf("draining %v, want %v", plan.Status.Draining, c.want)
			}
			var want map[string]string
			for _, name := range c.wantWaits {
				if want == nil {
					want = map[string]string{}
				}
				want[name] = c.wantWait
			}
			if !maps.Equal(plan.Waits, want) {
				t.Errorf("waits %v, want %v", plan.Waits, want)
			}
		})
	}
}

func TestPlanDrain(t *testing.T) {
	// fleet is members a and b, Available, and x, y and z, drained, whose
	// progress is as given (default: holding copies).
	fleet := func(progress map[string]Progress) []Member {
		members := []Member{member("b", 1, availableAt(1)), member("a", 1, availableAt(1))}
		for _, name := range []string{"z", "x", "y"} {
			p, ok := progress[name]
			if !ok {
				p = availableAt(1)
			}
			members = append(members, inMaintenance(fleetv1alpha1.MaintenanceDrain, member(name, 1, p)))
		}
		return members
	}
	one := "the disruption budget of maxUnavailable 1: 1 member unavailable"
	runDrainCases(t, []drainCase{{
		name:      "one at a time: the first",
		members:   fleet(nil),
		want:      []string{"x"},
		wantWaits: []string{"y", "z"}, wantWait: one,
	}, {
		name:      "while it holds copies, no other",
		members:   fleet(nil),
		draining:  []string{"x"},
		want:      []string{"x"},
		wantWaits: []string{"y", "z"}, wantWait: one,
	}, {
		name:      "once it holds none, the next",
		members:   fleet(map[string]Progress{"x": gone}),
		draining:  []string{"x"},
		want:      []string{"y"},
		wantWaits: []string{"z"}, wantWait: one,
	}, {
		name:     "then the last",
		members:  fleet(map[string]Progress{"x": gone, "y": gone}),
		draining: []string{"y"},
		want:     []string{"z"},
	}, {
		name:     "all gone",
		members:  fleet(map[string]Progress{"x": gone, "y": gone, "z": gone}),
		draining: []string{"z"},
	}, {
		name:      "progress unknown: may still hold copies",
		members:   fleet(map[string]Progress{"x": gone, "y": unknown}),
		draining:  []string{"y"},
		want:      []string{"y"},
		wantWaits: []string{"z"}, wantWait: one,
	}, {
		name:      "maxUnavailable 2: two at a time",
		spec:      fleetv1alpha1.PropagationSpec{DisruptionBudget: fleetv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To[int32](2)}},
		members:   fleet(nil),
		want:      []string{"x", "y"},
		wantWaits: []string{"z"}, wantWait: "the disruption budget of maxUnavailable 2: 2 members unavailable",
	}, {
		name:    "no revision yet: drained all the same",
		members: []Member{inMaintenance(fleetv1alpha1.MaintenanceDrain, member("x", 0, unknown))},
		want:    []string{"x"},
	}})
}

func TestPlanDrainBlocked(t *testing.T) {
	drained := func(name string) Member {
		return inMaintenance(fleetv1alpha1.MaintenanceDrain, member(name, 1, availableAt(1)))
	}
	runDrainCases(t, []drainCase{{
		name:      "a member not Available",
		members:   []Member{member("a", 1, applyingAt(1)), member("b", 1, availableAt(1)), drained("x")},
		wantWaits: []string{"x"}, wantWait: "the disruption budget of maxUnavailable 1: 1 member unavailable",
	}, {
		name:      "a member given a revision whose progress is unknown",
		members:   []Member{member("a", 1, unknown), drained("x")},
		wantWaits: []string{"x"}, wantWait: "the disruption budget of maxUnavailable 1: 1 member unavailable",
	}, {
		name:    "a member given no revision does not count",
		members: []Member{inMaintenance(fleetv1alpha1.MaintenanceCordon, member("a", 0, unknown)), drained("x")},
		want:    []string{"x"},
	}, {
		name:      "a member draining keeps draining over budget",
		members:   []Member{member("a", 1, applyingAt(1)), drained("x"), drained("y")},
		draining:  []string{"x", "gone"},
		want:      []string{"x"},
		wantWaits: []string{"y"}, wantWait: "the disruption budget of maxUnavailable 1: 2 members unavailable",
	}, {
		name:     "a member no longer drained leaves draining",
		members:  []Member{member("a", 1, applyingAt(1)), inMaintenance(fleetv1alpha1.MaintenanceCordon, member("x", 1, availableAt(1)))},
		draining: []string{"x"},
	}})
}

// TestPlanGuardHoldsForEveryCause: whatever brings the planner its
// members (a new Propagation, a fast failure, a restart that left only
// the persisted record, a record behind the members' reports, members
// that join), no plan has more members between revisions than
// maxConcurrency allows, and a stopped rollout gives its revision to no
// one.
func TestPlanGuardHoldsForEveryCause(t *testing.T) {
	one := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))})
	staged := progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1)), GroupBy: "tier", Groups: []string{"canary", "prod"}})
	forbidden := failedAt(1, fleetv1alpha1.ReasonForbidden, "the member forbids the manager to create configmaps")
	runPlanCases(t, []planCase{{
		name:    "a first revision: one member",
		spec:    one,
		target:  1,
		members: fresh(3),
		want:    progressing(map[string]int64{"m000": 1}, 0, "0 of 3 members run revision 1; in flight: m000"),
	}, {
		name:    "a first revision, members each alone in a group: one member",
		spec:    staged,
		target:  1,
		members: []Member{inTier("prod", member("a", 0, unknown)), inTier("canary", member("c", 0, unknown)), member("z", 0, unknown)},
		want:    progressing(map[string]int64{"c": 1}, 0, "0 of 3 members run revision 1; in flight: c"),
	}, {
		name:    "a first revision, the first member in flight: the others wait",
		spec:    staged,
		target:  1,
		members: []Member{inTier("prod", member("a", 0, unknown)), inTier("canary", member("c", 1, applyingAt(1))), member("z", 0, unknown)},
		want:    progressing(map[string]int64{"c": 1}, 0, "0 of 3 members run revision 1; in flight: c"),
	}, {
		name:    "a first revision, the second given while the third joins behind it: one in flight",
		spec:    one,
		target:  1,
		members: []Member{member("a", 1, availableAt(1)), member("b", 1, applyingAt(1)), member("c", 0, unknown)},
		want:    progressing(map[string]int64{"a": 1, "b": 1}, 1, "1 of 3 members run revision 1; in flight: b"),
	}, {
		name:    "a fast failure stops the first revision: the other member holds nothing",
		spec:    one,
		target:  1,
		members: []Member{member("a", 1, forbidden), member("b", 0, unknown)},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutStopped, reason: fleetv1alpha1.ReasonRolloutStopped,
			message: "stopped after 1 failed member (maxFailures 1): member a: the member forbids the manager to create configmaps (Forbidden)",
			failed:  1,
		},
	}, {
		name:    "a fast failure short of maxFailures holds its slot",
		spec:    progressive(&fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1)), MaxFailures: ptr.To[int32](2)}),
		target:  1,
		members: []Member{member("a", 1, forbidden), member("b", 0, unknown)},
		want: wantRollout{
			assigned: map[string]int64{"a": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 2 members run revision 1; failed: a", failed: 1,
		},
	}, {
		name:    "a restart: only the record, the member given the revision is in flight",
		spec:    one,
		target:  1,
		members: []Member{member("a", 1, unknown), member("b", 0, unknown), member("c", 0, unknown)},
		want:    progressing(map[string]int64{"a": 1}, 0, "0 of 3 members run revision 1; in flight: a"),
	}, {
		name: "a stale record: the record alone decides",
		spec: one,
		// b reports revision 1, which a record newer than the planner's
		// gave it: the plan from the older one gives c nothing, and its
		// write, against the older version, is refused by the hub.
		target:  1,
		members: []Member{member("a", 1, applyingAt(1)), member("b", 0, applyingAt(1)), member("c", 0, unknown)},
		want:    progressing(map[string]int64{"a": 1}, 0, "0 of 3 members run revision 1; in flight: a"),
	}, {
		name:    "paused: a member joining a group that has the revision takes it only within the guard",
		spec:    paused(staged),
		target:  2,
		members: []Member{inTier("canary", member("a", 2, applyingAt(2))), inTier("canary", member("b", 0, unknown)), inTier("prod", member("p", 1, availableAt(1)))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "p": 1},
			phase:    fleetv1alpha1.RolloutPaused, reason: "Paused",
			message: "paused: 0 of 3 members run revision 2",
		},
	}})
}

// TestPlanDrainDownMember: a drained member that is down cannot remove
// its copies: it is given no part of the disruption budget, and one it had
// goes to a member that can act.
func TestPlanDrainDownMember(t *testing.T) {
	down := func(m Member) Member {
		m.Down = true
		return m
	}
	drained := func(name string, p Progress) Member {
		return inMaintenance(fleetv1alpha1.MaintenanceDrain, member(name, 1, p))
	}
	waitReady := "the member to be Ready: its copies are removed once it is back, within the disruption budget"
	budget := "the disruption budget of maxUnavailable 1: 1 member unavailable"
	for _, c := range []struct {
		name      string
		members   []Member
		draining  []string
		want      []string
		wantWaits map[string]string
	}{{
		name:      "never reported: the budget goes to a member that is up",
		members:   []Member{member("a", 1, availableAt(1)), down(drained("x", unknown)), drained("y", availableAt(1)), drained("z", availableAt(1))},
		want:      []string{"y"},
		wantWaits: map[string]string{"x": waitReady, "z": budget},
	}, {
		name:      "down while draining: its part of the budget goes to the next",
		members:   []Member{member("a", 1, availableAt(1)), down(drained("x", availableAt(1))), drained("y", availableAt(1))},
		draining:  []string{"x"},
		want:      []string{"y"},
		wantWaits: map[string]string{"x": waitReady},
	}, {
		name:     "back: it drains in turn",
		members:  []Member{member("a", 1, availableAt(1)), drained("x", availableAt(1)), drained("y", gone)},
		draining: []string{"y"},
		want:     []string{"x"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			spec := fleetv1alpha1.PropagationSpec{}
			plan := PlanOf(Input{Spec: &spec, Target: 1, Members: c.members, Draining: c.draining, Now: planNow})
			if !slices.Equal(plan.Status.Draining, c.want) {
				t.Errorf("draining %v, want %v", plan.Status.Draining, c.want)
			}
			if !maps.Equal(plan.Waits, c.wantWaits) {
				t.Errorf("waits %v, want %v", plan.Waits, c.wantWaits)
			}
		})
	}
}

// TestPlanRevisionNotLoaded: a member whose run could not load the
// revision it is given reports that revision, failed: it counts toward
// maxFailures, not as in flight.
func TestPlanRevisionNotLoaded(t *testing.T) {
	notLoaded := failedAt(2, fleetv1alpha1.ReasonRevisionInvalid, "revision 2 is not on the hub")
	notLoaded.Holding = false
	runPlanCases(t, []planCase{{
		name:    "the rollout stops",
		spec:    progressive(nil),
		target:  2,
		members: []Member{member("a", 2, notLoaded), member("b", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 2, "b": 1},
			phase:    fleetv1alpha1.RolloutStopped, reason: fleetv1alpha1.ReasonRolloutStopped,
			message: "stopped after 1 failed member (maxFailures 1): member a: revision 2 is not on the hub (RevisionInvalid)",
			failed:  1,
		},
	}, {
		name:    "the revision it had before is no failure of this one",
		spec:    progressive(nil),
		target:  3,
		members: []Member{member("a", 3, notLoaded), member("b", 1, availableAt(1))},
		want: wantRollout{
			assigned: map[string]int64{"a": 3, "b": 1},
			phase:    fleetv1alpha1.RolloutProgressing, reason: "Progressing",
			message: "0 of 2 members run revision 3; in flight: a",
		},
	}})
}
