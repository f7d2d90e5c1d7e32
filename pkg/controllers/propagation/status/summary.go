package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
)

// Problem is why something is not as wanted, as a condition says it.
type Problem struct {
	Reason, Message string
}

// Problems are what, beside its members, keeps a Propagation from
// Ready; each is nil when there is none.
type Problems struct {
	// Hub is the first problem of the hub objects the Propagation
	// selects.
	Hub *Problem
	// MembersSelector says why spec.members' selector does not parse.
	MembersSelector *Problem
	// AvailableWhen is the first availableWhen rule that does not compile.
	AvailableWhen *Problem
	// Tenancy says why what the Propagation's namespace may reach is not
	// known.
	Tenancy *Problem
}

// Selection is what a Propagation's resources select on the hub.
type Selection struct {
	// Count counts the objects selected, and Listed names the first
	// MaxListedResources of them.
	Count  int32
	Listed []fleetv1alpha1.ResourceIdentifier
	// Empty says which entry of resources selects no hub object, nil when
	// every one selects some; EmptyEntries counts the entries that select
	// none.
	Empty        *Problem
	EmptyEntries int
}

// resultOrder lists members in status: failures first.
var resultOrder = []fleetv1alpha1.MemberResult{
	fleetv1alpha1.ResultFailed, fleetv1alpha1.ResultDrifted, fleetv1alpha1.ResultDeletionOwed, fleetv1alpha1.ResultPending, fleetv1alpha1.ResultApplied,
}

// SortMembers sorts members failing first, then by name, and keeps the
// first MaxListedMembers.
func SortMembers(members []fleetv1alpha1.MemberPropagationStatus) []fleetv1alpha1.MemberPropagationStatus {
	slices.SortFunc(members, func(a, b fleetv1alpha1.MemberPropagationStatus) int {
		return cmp.Or(cmp.Compare(slices.Index(resultOrder, a.Result), slices.Index(resultOrder, b.Result)), strings.Compare(a.Name, b.Name))
	})
	return members[:min(len(members), fleetv1alpha1.MaxListedMembers)]
}

// SetSelected writes what p's resources select, sel, into st: the count,
// the objects listed, and the condition ResourcesSelected, False naming
// the first entry that selects nothing. Nothing changes when sel is nil
// (not read).
func SetSelected(p *fleetv1alpha1.Propagation, st *fleetv1alpha1.PropagationStatus, sel *Selection) {
	if sel == nil {
		return
	}
	st.SelectedResourceCount, st.SelectedResources = sel.Count, sel.Listed
	c := metav1.Condition{
		Type: fleetv1alpha1.PropagationResourcesSelected, Status: metav1.ConditionTrue, ObservedGeneration: p.Generation,
		Reason: fleetv1alpha1.ReasonResourcesSelected, Message: fmt.Sprintf("%s selected by %d resources", words.Plural(int(sel.Count), "hub object", "hub objects"), len(p.Spec.Resources)),
	}
	if sel.Empty != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, sel.Empty.Reason, sel.Empty.Message
		if sel.EmptyEntries > 1 {
			c.Message += fmt.Sprintf(" (and %d more entries select nothing)", sel.EmptyEntries-1)
		}
		c.Message = words.Truncate(c.Message+"; the other entries' objects are copied", 1024)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// SetConditions sets Ready, Applied and Drifted from the counts and
// problems; an entry of resources that selects nothing (see SetSelected)
// keeps Ready False.
func SetConditions(p *fleetv1alpha1.Propagation, st *fleetv1alpha1.PropagationStatus, problems Problems) {
	hubErr, selectorErr := problems.Hub, problems.MembersSelector
	unselected := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationResourcesSelected)
	if unselected != nil && (unselected.Status == metav1.ConditionTrue || unselected.ObservedGeneration != p.Generation) {
		unselected = nil
	}
	set := func(t string, ok bool, reason, message string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: words.Truncate(message, 1024), ObservedGeneration: p.Generation})
	}
	pending := st.Selected - st.Applied - st.Drifted - st.Failed
	notReady := func() (string, string) {
		if hubErr != nil {
			return hubErr.Reason, hubErr.Message
		}
		if unselected != nil {
			return unselected.Reason, unselected.Message
		}
		if selectorErr != nil {
			return selectorErr.Reason, selectorErr.Message
		}
		if problems.Tenancy != nil {
			return problems.Tenancy.Reason, problems.Tenancy.Message
		}
		if kerr := problems.AvailableWhen; kerr != nil {
			return kerr.Reason, kerr.Message
		}
		switch ro := st.Rollout; {
		case p.Spec.Suspend:
			return fleetv1alpha1.ReasonSuspended, "spec.suspend is set: nothing is applied, corrected or removed"
		case ro != nil && ro.Reason == fleetv1alpha1.ReasonRevisionRefused:
			return ro.Reason, ro.Message
		case ro != nil && ro.Phase == fleetv1alpha1.RolloutStopped:
			return fleetv1alpha1.ReasonRolloutStopped, ro.Message
		case ro != nil && ro.Phase == fleetv1alpha1.RolloutPaused && ro.Updated < st.Selected:
			return string(ro.Phase), ro.Message
		case ro != nil && ro.Phase == fleetv1alpha1.RolloutPinned:
			return ro.Reason, ro.Message
		case st.Selected == 0 && st.Excluded > 0:
			return fleetv1alpha1.ReasonNotReachable, fmt.Sprintf("tenancy excludes every member spec.members selects (%d); first: %s", st.Excluded, firstExcluded(st.ExcludedMembers))
		case st.Selected == 0:
			return fleetv1alpha1.ReasonNoMembersSelected, "no member matches spec.members"
		case st.Failed > 0:
			return fleetv1alpha1.ReasonMembersFailed, fmt.Sprintf("%d of %d members failed; first: %s", st.Failed, st.Selected, firstMessage(st.Members))
		case pending > 0:
			return fleetv1alpha1.ReasonMembersPending, fmt.Sprintf("%d of %d members are not applied yet; first: %s", pending, st.Selected, firstMessage(st.Members))
		case st.Available < st.Applied:
			return fleetv1alpha1.ReasonNotAvailable, fmt.Sprintf("%d of %d members are not available yet; first: %s", st.Applied-st.Available, st.Selected, firstMessage(st.Members))
		case st.Drifted > 0:
			return fleetv1alpha1.ReasonDrifted, fmt.Sprintf("%d of %d members hold changed copies", st.Drifted, st.Selected)
		case st.PendingDeletions > 0:
			return fleetv1alpha1.ReasonDeletionOwed, fmt.Sprintf("%d members owe the removal of copies until they are Ready", st.PendingDeletions)
		}
		return "", ""
	}
	reason, message := notReady()
	if reason == "" {
		set(fleetv1alpha1.PropagationReady, true, fleetv1alpha1.ReasonApplied, fmt.Sprintf("every copy is applied, in sync and available in all %d selected members", st.Selected))
	} else {
		set(fleetv1alpha1.PropagationReady, false, reason, message)
	}
	// counted sets condition t, held by n of the selected members: True
	// once all hold it and the hub has no problem, else false for Ready's
	// reason, unless Ready waits only for drift or owed removals.
	counted := func(t string, n int32, okReason, okMessage, shortReason, shortMessage string) {
		switch {
		case st.Selected > 0 && n == st.Selected && hubErr == nil:
			set(t, true, okReason, okMessage)
		case reason != "" && reason != fleetv1alpha1.ReasonDrifted && reason != fleetv1alpha1.ReasonDeletionOwed:
			set(t, false, reason, message)
		default:
			set(t, false, shortReason, shortMessage)
		}
	}
	counted(fleetv1alpha1.PropagationAvailable, st.Available,
		fleetv1alpha1.ReasonAvailable, fmt.Sprintf("every copy is available in all %d selected members", st.Selected),
		fleetv1alpha1.ReasonNotAvailable, fmt.Sprintf("available in %d of %d selected members", st.Available, st.Selected))
	applied := st.Applied + st.Drifted
	counted(fleetv1alpha1.PropagationApplied, applied,
		fleetv1alpha1.ReasonApplied, fmt.Sprintf("applied in all %d selected members", st.Selected),
		fleetv1alpha1.ReasonMembersPending, fmt.Sprintf("applied in %d of %d selected members", applied, st.Selected))
	if st.Drifted > 0 {
		set(fleetv1alpha1.PropagationDrifted, true, fleetv1alpha1.ReasonDrifted, fmt.Sprintf("%d members hold changed copies (drift: %s)", st.Drifted, p.Spec.Drift))
	} else {
		set(fleetv1alpha1.PropagationDrifted, false, fleetv1alpha1.ReasonNoDrift, "no copy was changed in a member")
	}
}

// firstExcluded names the first of members and why it is excluded.
func firstExcluded(members []fleetv1alpha1.ExcludedMember) string {
	if len(members) == 0 {
		return ""
	}
	return members[0].Name + ": " + members[0].Message
}

// firstMessage names the first of members and its message.
func firstMessage(members []fleetv1alpha1.MemberPropagationStatus) string {
	if len(members) == 0 {
		return ""
	}
	return members[0].Name + ": " + members[0].Message
}

// ConditionStatus is the status of conditions' condition t, Unknown
// when it has none.
func ConditionStatus(conditions []metav1.Condition, t string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conditions, t); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// BoundKinds returns the kinds of current and previous, sorted, without
// duplicates, at most MaxCopiedKinds: past the bound, the kinds copied
// before and not now are left out first, the last in order first. It is
// a fixed point (BoundKinds(BoundKinds(p, c), c) is BoundKinds(p, c)), so
// that a status written from it is not written again.
func BoundKinds(previous, current []fleetv1alpha1.KindReference) []fleetv1alpha1.KindReference {
	compare := func(a, b fleetv1alpha1.KindReference) int {
		return cmp.Or(strings.Compare(a.APIVersion, b.APIVersion), strings.Compare(a.Kind, b.Kind))
	}
	now := slices.Compact(slices.SortedFunc(slices.Values(current), compare))
	var before []fleetv1alpha1.KindReference
	for _, k := range previous {
		if _, found := slices.BinarySearchFunc(now, k, compare); !found {
			before = append(before, k)
		}
	}
	slices.SortFunc(before, compare)
	before = slices.Compact(before)
	if len(now) >= fleetv1alpha1.MaxCopiedKinds {
		return now[:fleetv1alpha1.MaxCopiedKinds]
	}
	kinds := append(now, before[:min(len(before), fleetv1alpha1.MaxCopiedKinds-len(now))]...)
	slices.SortFunc(kinds, compare)
	return kinds
}
