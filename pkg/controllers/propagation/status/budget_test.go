package status

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// largestAllowedStatus is a status the API allows: 1,000 drifted
// members, each with 16 field paths and a message of the longest, all
// given revision 3 by the rollout.
func largestAllowedStatus() fleetv1alpha1.PropagationStatus {
	st := fleetv1alpha1.PropagationStatus{ObservedGeneration: 4, Selected: 1000, Drifted: 1000}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.PropagationReady, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonDrifted, Message: "1000 of 1000 members hold changed copies"})
	names := make([]string, 0, fleetv1alpha1.MaxListedMembers)
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for i := range fleetv1alpha1.MaxListedMembers {
		name := fmt.Sprintf("member-%04d", i)
		names = append(names, name)
		e := fleetv1alpha1.MemberPropagationStatus{
			Name: name, Result: fleetv1alpha1.ResultDrifted, Reason: fleetv1alpha1.ReasonDrifted,
			Message: strings.Repeat("m", fleetv1alpha1.MaxMemberMessageLength), Available: metav1.ConditionTrue,
			Revision: 3, ObservedGeneration: 4, LastConfirmedTime: &now, LastTransitionTime: now,
		}
		for j := range fleetv1alpha1.MaxDriftedFields {
			e.DriftedFields = append(e.DriftedFields, fmt.Sprintf("Deployment web-%02d: .spec.template.spec.containers[name=%s].env[name=VARIABLE_%02d].value", j, strings.Repeat("c", 20), j))
		}
		st.Members = append(st.Members, e)
	}
	st.Rollout = &fleetv1alpha1.RolloutStatus{Revision: 3, Phase: fleetv1alpha1.RolloutProgressing, Updated: 1000, Members: []fleetv1alpha1.RevisionMembers{{Revision: 3, Names: names}}}
	return st
}

// TestStatusFitsItsBudget cuts the largest status the API allows to its
// budget: the drift paths go first, the rollout's assignments and the
// counts stay, the condition StatusTruncated says what was cut; and the
// same status is cut the same way again, so it is not rewritten.
func TestStatusFitsItsBudget(t *testing.T) {
	st := largestAllowedStatus()
	if size := jsonSize(&st); size <= Budget {
		t.Fatalf("the largest status is %d bytes, within the budget of %d: the test proves nothing", size, Budget)
	}
	rollout := st.Rollout.DeepCopy()
	Fit(&st, Budget)
	if size := jsonSize(&st); size > Budget {
		t.Errorf("the status is %d bytes once fitted, over its budget of %d", size, Budget)
	}
	if !equality.Semantic.DeepEqual(st.Rollout, rollout) {
		t.Error("status.rollout, the members' assignments, was cut")
	}
	if st.Selected != 1000 || st.Drifted != 1000 || len(st.Members) != fleetv1alpha1.MaxListedMembers {
		t.Errorf("counts %d selected, %d drifted, %d listed; want 1000 of each: cutting drift paths is enough", st.Selected, st.Drifted, len(st.Members))
	}
	if st.Members[0].Message == "" || len(st.Members[0].DriftedFields) == 0 {
		t.Error("the first member listed lost its detail: the last listed are cut first")
	}
	c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationStatusTruncated)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "drifted fields of") {
		t.Fatalf("StatusTruncated: %+v; want True, naming the drifted fields cut", c)
	}
	// The next sum makes the same status, with the conditions written.
	again := largestAllowedStatus()
	again.Conditions = slices.Clone(st.Conditions)
	Fit(&again, Budget)
	if !equality.Semantic.DeepEqual(again, st) {
		t.Error("a fitted status is cut again differently: it would be rewritten at every sum")
	}

	small := fleetv1alpha1.PropagationStatus{Conditions: st.Conditions, Selected: 1}
	Fit(&small, Budget)
	if meta.FindStatusCondition(small.Conditions, fleetv1alpha1.PropagationStatusTruncated) != nil {
		t.Error("StatusTruncated stays on a status that fits")
	}
}

// TestStatusOverItsBudgetListsFewerMembers gives a budget that only
// cutting entries meets: the members beyond are counted only, and the
// rollout is whole.
func TestStatusOverItsBudgetListsFewerMembers(t *testing.T) {
	st := largestAllowedStatus()
	budget := 128 << 10
	Fit(&st, budget)
	data, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > budget {
		t.Errorf("the status is %d bytes, over its budget of %d", len(data), budget)
	}
	if len(st.Members) == 0 || len(st.Members) == fleetv1alpha1.MaxListedMembers || st.Drifted != 1000 {
		t.Errorf("%d members listed, %d counted drifted; want fewer listed, all counted", len(st.Members), st.Drifted)
	}
	if st.Members[0].Name != "member-0000" || len(st.Rollout.Members[0].Names) != 1000 {
		t.Errorf("first listed %s, %d members given revision 3; want member-0000 and all 1000", st.Members[0].Name, len(st.Rollout.Members[0].Names))
	}
	c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationStatusTruncated)
	if c == nil || !strings.Contains(c.Message, "not listed in status.members, counted only") {
		t.Errorf("StatusTruncated: %+v; want the members not listed named", c)
	}
}

func kindsOfGroup(group string, n int) []fleetv1alpha1.KindReference {
	kinds := make([]fleetv1alpha1.KindReference, n)
	for i := range kinds {
		kinds[i] = fleetv1alpha1.KindReference{APIVersion: group + "/v1", Kind: fmt.Sprintf("Kind%03d", i)}
	}
	return kinds
}

// TestCopiedKindsAreSortedAndBounded sums status.kinds up again and
// again, as each status sum does, for an Envelope of 65 kinds and of
// more than are allowed, with kinds copied before: it does not change
// once written, is sorted, holds every kind copied now up to the bound,
// and leaves out the kinds copied before first.
func TestCopiedKindsAreSortedAndBounded(t *testing.T) {
	compare := func(a, b fleetv1alpha1.KindReference) int {
		return strings.Compare(a.APIVersion+" "+a.Kind, b.APIVersion+" "+b.Kind)
	}
	for _, tc := range []struct {
		name             string
		before, now      []fleetv1alpha1.KindReference
		wantLen, wantNow int
	}{
		{name: "65 kinds", now: kindsOfGroup("b.example", 65), wantLen: 65, wantNow: 65},
		{name: "65 kinds, 200 before", before: kindsOfGroup("a.example", 200), now: kindsOfGroup("b.example", 65), wantLen: fleetv1alpha1.MaxCopiedKinds, wantNow: 65},
		{name: "300 kinds", now: kindsOfGroup("b.example", 300), wantLen: fleetv1alpha1.MaxCopiedKinds, wantNow: fleetv1alpha1.MaxCopiedKinds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := BoundKinds(nil, tc.before)
			kinds = BoundKinds(kinds, tc.now)
			for i := range 3 {
				next := BoundKinds(kinds, slices.Clone(tc.now))
				if !slices.Equal(next, kinds) {
					t.Fatalf("status.kinds changed at sum %d with nothing else changed: it would be rewritten forever", i+2)
				}
			}
			if len(kinds) != tc.wantLen || !slices.IsSortedFunc(kinds, compare) {
				t.Errorf("%d kinds, sorted %v; want %d, sorted", len(kinds), slices.IsSortedFunc(kinds, compare), tc.wantLen)
			}
			nowKept := 0
			for _, k := range tc.now {
				if slices.Contains(kinds, k) {
					nowKept++
				}
			}
			if nowKept != tc.wantNow {
				t.Errorf("%d of the kinds copied now are listed, want %d", nowKept, tc.wantNow)
			}
		})
	}
}

// TestSelectedResourcesAreCutBeforeMembers: past the budget, the listed
// hub objects go before the members' entries, from the last; their count
// stays, and StatusTruncated says how many are only counted.
func TestSelectedResourcesAreCutBeforeMembers(t *testing.T) {
	st := fleetv1alpha1.PropagationStatus{SelectedResourceCount: 1000}
	for i := range fleetv1alpha1.MaxListedResources {
		st.SelectedResources = append(st.SelectedResources, fleetv1alpha1.ResourceIdentifier{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 249))})
	}
	for _, name := range []string{"a", "b", "c"} {
		st.Members = append(st.Members, fleetv1alpha1.MemberPropagationStatus{Name: name, Result: fleetv1alpha1.ResultFailed, Reason: fleetv1alpha1.ReasonForbidden})
	}
	budget := jsonSize(&st) + 1280 - 10_000
	Fit(&st, budget)
	if size := jsonSize(&st); size > budget {
		t.Errorf("%d bytes once fitted, over the budget of %d", size, budget)
	}
	if len(st.Members) != 3 || st.SelectedResourceCount != 1000 {
		t.Errorf("%d members listed, %d objects counted; want 3 and 1000: the listed objects go first", len(st.Members), st.SelectedResourceCount)
	}
	if n := len(st.SelectedResources); n == 0 || n == fleetv1alpha1.MaxListedResources || st.SelectedResources[0].Name[:3] != "000" {
		t.Errorf("%d objects listed, first %q; want some cut, from the last", n, st.SelectedResources[0].Name)
	}
	c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationStatusTruncated)
	if c == nil || !strings.Contains(c.Message, "hub objects not listed in status.selectedResources") {
		t.Errorf("StatusTruncated %+v; want it to say the listed objects were cut", c)
	}
}
