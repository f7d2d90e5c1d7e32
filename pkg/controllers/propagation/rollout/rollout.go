package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/intstr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
)

// Reasons of a rollout's phase, beside ReasonRolloutStopped.
const (
	reasonWaitingForRevision = "WaitingForRevision"
	reasonPaused             = "Paused"
	reasonProgressing        = "Progressing"
	reasonComplete           = "Complete"
)

// maxRolloutMessage is the most bytes status.rollout.message holds.
const maxRolloutMessage = 1024

// Member is a selected member as the planner sees it.
type Member struct {
	Name        string
	Labels      map[string]string
	Maintenance fleetv1alpha1.MaintenanceMode // "", Cordon or Drain
	// Assigned is the revision the member is given now, 0 for none.
	Assigned int64
	Progress Progress
	// Down is set when the member cannot act now: it is not Ready.
	Down bool
}

// Progress is what the member's last run says; Known is false when no
// run has reported since the manager started (or the member is not
// Ready).
type Progress struct {
	Known           bool
	Revision        int64     // the revision the run applied
	Available       bool      // every copy applied, in sync and Available
	AvailableSince  time.Time // since when, if Available
	Failed          bool
	Reason, Message string // of a failure (or of not being Available)
	Holding         bool   // the member holds copies of the Propagation
}

// Input is what a rollout is planned from.
type Input struct {
	Spec     *fleetv1alpha1.PropagationSpec
	Target   int64    // the revision to roll out (the newest, or spec.revision when pinned); 0: none exists yet
	Newest   int64    // the newest revision: above Target, a pin holds it back
	Members  []Member // every selected member, maintenance ones included
	Draining []string // the previous status.rollout.draining
	Now      time.Time
	// Kept are the numbers of the revisions the hub holds: a Target that
	// spec.revision pins and that is not among them cannot be rolled out.
	Kept []int64
	// Refused, if set, says why the hub refused a revision of what the
	// spec selects now (at most 1024 bytes): members keep what they have.
	Refused string
}

// Plan is a planned rollout: the status to write, which holds each
// member's revision and the drained members whose copies may go now.
type Plan struct {
	Status fleetv1alpha1.RolloutStatus
	// After is when the plan should be made again because a member's
	// minSuccessTime passes; 0 for never.
	After time.Duration
	// Waits says, for each drained member that still holds copies and is
	// not in Status.Draining, what it waits for (a message naming the
	// disruption budget).
	Waits map[string]string
}

// PlanOf plans a Propagation's rollout: which revision each member is
// given, where the rollout stands, and which drained members may have
// their copies removed now. It changes none of in's members.
func PlanOf(in Input) Plan {
	members := slices.Clone(in.Members)
	var plan Plan
	if in.Target == 0 {
		// Assignments stay as they are until a revision exists.
		plan.Status = fleetv1alpha1.RolloutStatus{
			Phase:   fleetv1alpha1.RolloutProgressing,
			Reason:  reasonWaitingForRevision,
			Message: "no revision yet",
		}
	} else {
		plan.Status, plan.After = planRevision(in, members)
	}
	heldByTheHub(in, &plan.Status)
	plan.Status.Members = revisionMembersOf(members)
	plan.Status.Draining, plan.Waits = planDrain(in, members)
	return plan
}

// heldByTheHub names, in status, what the hub holds back: a pinned
// revision it does not keep, or a revision of what the spec selects now,
// which it refused. A refusal fails a rollout that is not pinned: it is
// not Complete at the revision before.
func heldByTheHub(in Input, status *fleetv1alpha1.RolloutStatus) {
	pinned := in.Spec.Revision != nil
	switch {
	case pinned && !slices.Contains(in.Kept, in.Target):
		status.Reason, status.Message = fleetv1alpha1.ReasonRevisionInvalid, fmt.Sprintf("spec.revision %d is not kept: it cannot be rolled out", in.Target)
	case in.Refused != "" && pinned:
		// The pin is what is rolled out; the refusal is named.
		status.Reason, status.Message = fleetv1alpha1.ReasonRevisionRefused, in.Refused
	case in.Refused != "":
		status.Phase = fleetv1alpha1.RolloutFailed
		status.Reason, status.Message = fleetv1alpha1.ReasonRevisionRefused, in.Refused
	}
}

// rolloutSettings are a spec's strategy with its defaults filled in.
type rolloutSettings struct {
	progressive    bool
	groupBy        string
	groups         []string
	maxConcurrency int
	minSuccessTime time.Duration
	maxFailures    int
	// invalid, if set, says why the strategy cannot be rolled out (one
	// stored before the hub refused it): no member is given a revision.
	invalid string
}

// rolloutSettingsOf fills in the defaults of spec's strategy; active is
// how many members are not in maintenance, of which a maxConcurrency
// percentage is taken. The Progressive tuning is read only when the type
// is Progressive: an All rollout has no minSuccessTime and never stops.
func rolloutSettingsOf(spec *fleetv1alpha1.PropagationSpec, active int) rolloutSettings {
	s := rolloutSettings{
		progressive:    spec.Strategy.Type == fleetv1alpha1.RolloutProgressive,
		maxConcurrency: 1,
		maxFailures:    1,
	}
	tuning := spec.Strategy.Progressive
	if !s.progressive || tuning == nil {
		return s
	}
	s.groupBy, s.groups = tuning.GroupBy, tuning.Groups
	if c := tuning.MaxConcurrency; c != nil {
		if n, ok := maxConcurrencyOf(c, active); ok {
			s.maxConcurrency = n
		} else {
			s.invalid = fmt.Sprintf("maxConcurrency %s is neither a number of at least 1 nor a percentage above 0%%: no member is given a revision", c)
		}
	}
	if tuning.MinSuccessTime != nil {
		s.minSuccessTime = tuning.MinSuccessTime.Duration
	}
	if tuning.MaxFailures != nil {
		s.maxFailures = max(int(*tuning.MaxFailures), 1)
	}
	return s
}

// maxConcurrencyOf is c of active members: a number of at least 1, or a
// percentage above 0%, rounded down but at least 1. ok is false for any
// other value, which the hub refuses but may have stored before.
func maxConcurrencyOf(c *intstr.IntOrString, active int) (n int, ok bool) {
	if c.Type == intstr.Int {
		return c.IntValue(), c.IntValue() >= 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(c, active, false)
	if pct, _ := strconv.Atoi(strings.TrimSuffix(c.StrVal, "%")); err != nil || pct <= 0 {
		return 0, false
	}
	return max(n, 1), true
}

// groupOf is the index of the group labels put a member in: 0 when
// members are not grouped, len(groups) for a value not in groups.
func (s rolloutSettings) groupOf(labels map[string]string) int {
	if s.groupBy == "" {
		return 0
	}
	value, ok := labels[s.groupBy]
	if i := slices.Index(s.groups, value); ok && i >= 0 {
		return i
	}
	return len(s.groups)
}

// rolloutState is where a member not in maintenance stands in a rollout.
type rolloutState int

const (
	// rolloutWaiting: the member is not given the target.
	rolloutWaiting rolloutState = iota
	// rolloutInFlight: given the target, and neither done nor failed (or its
	// progress is unknown, as after a restart).
	rolloutInFlight
	// rolloutDone: Available with the target for minSuccessTime.
	rolloutDone
	// rolloutFailed: failed with the target.
	rolloutFailed
)

// queuedMember is a member not in maintenance, in rollout order.
type queuedMember struct {
	*Member
	group int
	state rolloutState
}

// stateOf is where m stands in the rollout of target.
func (s rolloutSettings) stateOf(m *Member, target int64, now time.Time) rolloutState {
	p := m.Progress
	switch {
	case m.Assigned != target:
		return rolloutWaiting
	case !p.Known || p.Revision != target:
		return rolloutInFlight
	case p.Available && now.Sub(p.AvailableSince) >= s.minSuccessTime:
		return rolloutDone
	case p.Failed:
		return rolloutFailed
	}
	return rolloutInFlight
}

// planRevision assigns in.Target to the members whose turn it is, changing
// their assigned in members, and returns where the rollout stands and
// when to plan again.
func planRevision(in Input, members []Member) (fleetv1alpha1.RolloutStatus, time.Duration) {
	var queue []*queuedMember
	for i := range members {
		if members[i].Maintenance == "" {
			queue = append(queue, &queuedMember{Member: &members[i]})
		}
	}
	s := rolloutSettingsOf(in.Spec, len(queue))
	for _, q := range queue {
		q.group = s.groupOf(q.Labels)
	}
	slices.SortFunc(queue, func(a, b *queuedMember) int {
		return cmp.Or(cmp.Compare(a.group, b.group), strings.Compare(a.Name, b.Name))
	})

	// Under All, not paused, every member is given the target at once:
	// All has no concurrency guard. Otherwise a member that joins is given
	// the revision its group has reached, but never the target outside
	// the guard: given it, a member is in flight like any other.
	allNow := !s.progressive && !in.Spec.Paused
	joinTarget := assignJoiners(queue, in.Target, allNow)
	var inFlightCount, failedCount int
	for _, q := range queue {
		q.state = s.stateOf(q.Member, in.Target, in.Now)
		switch q.state {
		case rolloutInFlight:
			inFlightCount++
		case rolloutFailed:
			failedCount++
		}
	}
	stopped := s.progressive && failedCount >= s.maxFailures
	slots := s.maxConcurrency - inFlightCount - failedCount
	switch {
	case stopped || s.invalid != "":
		// A stopped rollout gives its revision to no one, not even a
		// member whose group has it.
	case allNow:
		for _, q := range queue {
			if q.state == rolloutWaiting {
				q.Assigned, q.state = in.Target, rolloutInFlight
			}
		}
	case !in.Spec.Paused:
		assignInOrder(queue, in.Target, slots, nil)
	case !s.progressive:
		// Paused under All: a member that joins a group that has the
		// target is given it.
		for q := range joinTarget {
			q.Assigned, q.state = in.Target, rolloutInFlight
		}
	default:
		// Paused: only a member that joins a group that has the target
		// is given it, within the guard.
		assignInOrder(queue, in.Target, slots, joinTarget)
	}

	status := describeRollout(queue, in.Target, s.maxFailures, stopped, in.Spec.Paused)
	switch {
	case s.invalid != "" && status.Phase != fleetv1alpha1.RolloutComplete:
		status.Phase, status.Reason, status.Message = fleetv1alpha1.RolloutStopped, fleetv1alpha1.ReasonInvalid, s.invalid
	case status.Phase == fleetv1alpha1.RolloutComplete && in.Spec.Revision != nil && in.Newest > in.Target:
		// Rolled out, but not what the hub holds now: the pin holds the
		// newest back until it is removed.
		status.Phase, status.Reason = fleetv1alpha1.RolloutPinned, fleetv1alpha1.ReasonPinnedToOlderRevision
		status.Message = fmt.Sprintf("%s; spec.revision pins it: the newest, revision %d, is not rolled out until the pin is removed (fleet-manager rollout unpin)", status.Message, in.Newest)
	}
	status.Message = truncateMessage(status.Message + keptRevisions(members, in.Target))
	return status, untilDone(queue, in.Target, s.minSuccessTime, in.Now)
}

// assignJoiners gives each member of queue that has no revision one, in
// order, each seeing those given before it: target when toTarget, else
// the revision the rollout has reached for its group (see
// reachedRevision) unless that is target. It returns the members whose
// group has reached target, left without a revision: only the
// concurrency guard may give it to them.
func assignJoiners(queue []*queuedMember, target int64, toTarget bool) map[*queuedMember]bool {
	joinTarget := map[*queuedMember]bool{}
	for i, q := range queue {
		if q.Assigned != 0 {
			continue
		}
		switch reached := reachedRevision(queue, i, target); {
		case toTarget:
			q.Assigned = target
		case reached == target:
			joinTarget[q] = true
		default:
			q.Assigned = reached
		}
	}
	return joinTarget
}

// reachedRevision is the revision the rollout of target has reached for
// the group of queue[i]: target when every other member of that group and
// of the groups before has it, and there is one; else the one most other
// members of the group have (the higher on a tie), leaving out target;
// else 0, and the member waits for its turn.
func reachedRevision(queue []*queuedMember, i int, target int64) int64 {
	group := queue[i].group
	allTarget, others := true, 0
	count := map[int64]int{}
	for j, other := range queue {
		if other.group > group {
			break // queue is in group order
		}
		if j == i {
			continue
		}
		allTarget = allTarget && other.Assigned == target
		others++
		if other.group == group && other.Assigned != 0 && other.Assigned != target {
			count[other.Assigned]++
		}
	}
	if allTarget && others > 0 {
		return target
	}
	var reached int64
	for revision, n := range count {
		if n > count[reached] || n == count[reached] && revision > reached {
			reached = revision
		}
	}
	return reached
}

// assignInOrder gives target to up to slots waiting members of queue, in
// order, starting no group before every member of the groups before it is
// done; only to those of only, when set.
func assignInOrder(queue []*queuedMember, target int64, slots int, only map[*queuedMember]bool) {
	earlierNotDone := false
	for i, q := range queue {
		if i > 0 && q.group != queue[i-1].group && earlierNotDone {
			return
		}
		if q.state == rolloutWaiting && slots > 0 && (only == nil || only[q]) {
			q.Assigned, q.state = target, rolloutInFlight
			slots--
		}
		earlierNotDone = earlierNotDone || q.state != rolloutDone
	}
}

// describeRollout is the rollout's status but for its members and
// draining: its phase and why. A rollout whose members are all done is
// Complete even when paused: the pause holds nothing back; but one to no
// member is Progressing, reason NoMembersSelected: nothing was rolled
// out. One that is both stopped and paused is Stopped, which names what
// needs fixing; one whose members each either run the revision or
// failed is Failed, naming the failures.
func describeRollout(queue []*queuedMember, target int64, maxFailures int, stopped, paused bool) fleetv1alpha1.RolloutStatus {
	var doneCount int
	var inFlightNames, failedNames []string
	var firstFailed *queuedMember
	for _, q := range queue {
		switch q.state {
		case rolloutDone:
			doneCount++
		case rolloutInFlight:
			inFlightNames = append(inFlightNames, q.Name)
		case rolloutFailed:
			failedNames = append(failedNames, q.Name)
			if firstFailed == nil {
				firstFailed = q
			}
		}
	}
	status := fleetv1alpha1.RolloutStatus{
		Revision: target,
		Updated:  int32(doneCount),
		Failed:   int32(len(failedNames)),
	}
	progress := fmt.Sprintf("%d of %d members run revision %d", doneCount, len(queue), target)
	switch {
	case len(queue) == 0:
		status.Phase, status.Reason = fleetv1alpha1.RolloutProgressing, fleetv1alpha1.ReasonNoMembersSelected
		status.Message = fmt.Sprintf("no member takes revision %d: none is selected, or every one selected is cordoned or drained", target)
	case doneCount == len(queue):
		status.Phase, status.Reason = fleetv1alpha1.RolloutComplete, reasonComplete
		status.Message = fmt.Sprintf("%s revision %d", words.Plural(doneCount, "member runs", "members run"), target)
	case stopped:
		status.Phase, status.Reason = fleetv1alpha1.RolloutStopped, fleetv1alpha1.ReasonRolloutStopped
		status.Message = fmt.Sprintf("stopped after %s (maxFailures %d): %s",
			words.Plural(len(failedNames), "failed member", "failed members"), maxFailures, failureOf(firstFailed))
	case doneCount+len(failedNames) == len(queue):
		status.Phase, status.Reason = fleetv1alpha1.RolloutFailed, fleetv1alpha1.ReasonMembersFailed
		status.Message = fmt.Sprintf("revision %d failed in %d of %d members: %s", target, len(failedNames), len(queue), failuresOf(queue))
	case paused:
		status.Phase, status.Reason = fleetv1alpha1.RolloutPaused, reasonPaused
		status.Message = "paused: " + progress
	default:
		status.Phase, status.Reason = fleetv1alpha1.RolloutProgressing, reasonProgressing
		status.Message = progress
		if len(inFlightNames) > 0 {
			status.Message += "; in flight: " + words.NameList(inFlightNames)
		}
		// Failures short of maxFailures still hold slots: name them.
		if len(failedNames) > 0 {
			status.Message += "; failed: " + words.NameList(failedNames)
		}
	}
	return status
}

// failureOf names a failed member and why it failed: "member m3: 1 of 3
// replicas available (ProgressDeadlineExceeded)".
func failureOf(m *queuedMember) string {
	failure := "member " + m.Name
	if m.Progress.Message != "" {
		failure += ": " + m.Progress.Message
	}
	if m.Progress.Reason != "" {
		failure += " (" + m.Progress.Reason + ")"
	}
	return failure
}

// failuresOf names the failed members of queue and why, the first
// three: "member b: ... (Forbidden); member c: ... (ProgressDeadlineExceeded)".
func failuresOf(queue []*queuedMember) string {
	const most = 3
	var failures []string
	n := 0
	for _, q := range queue {
		if q.state != rolloutFailed {
			continue
		}
		if n++; n <= most {
			failures = append(failures, failureOf(q))
		}
	}
	if n > most {
		failures = append(failures, fmt.Sprintf("and %d more", n-most))
	}
	return strings.Join(failures, "; ")
}

// keptRevisions says how many members in maintenance keep a revision other
// than target: "; 1 cordoned member keeps its revision", empty for none.
func keptRevisions(members []Member, target int64) string {
	var cordoned, drained int
	for _, m := range members {
		if m.Assigned == 0 || m.Assigned == target {
			continue
		}
		switch m.Maintenance {
		case fleetv1alpha1.MaintenanceCordon:
			cordoned++
		case fleetv1alpha1.MaintenanceDrain:
			drained++
		}
	}
	var suffix string
	if cordoned > 0 {
		suffix += "; " + words.Plural(cordoned, "cordoned member keeps its", "cordoned members keep their") + " revision"
	}
	if drained > 0 {
		suffix += "; " + words.Plural(drained, "drained member keeps its", "drained members keep their") + " revision"
	}
	return suffix
}

// untilDone is the least time left before a member given target and
// Available with it has been so for minSuccessTime; 0 for none.
func untilDone(queue []*queuedMember, target int64, minSuccessTime time.Duration, now time.Time) time.Duration {
	var least time.Duration
	for _, q := range queue {
		p := q.Progress
		if q.Assigned != target || !p.Known || p.Revision != target || !p.Available {
			continue
		}
		if left := minSuccessTime - now.Sub(p.AvailableSince); left > 0 && (least == 0 || left < least) {
			least = left
		}
	}
	return least
}

// revisionMembersOf lists the members given each revision, by revision,
// names sorted; members given none are in none.
func revisionMembersOf(members []Member) []fleetv1alpha1.RevisionMembers {
	var list []fleetv1alpha1.RevisionMembers
	for _, m := range members {
		if m.Assigned == 0 {
			continue
		}
		i, found := slices.BinarySearchFunc(list, m.Assigned, func(r fleetv1alpha1.RevisionMembers, revision int64) int {
			return cmp.Compare(r.Revision, revision)
		})
		if !found {
			list = slices.Insert(list, i, fleetv1alpha1.RevisionMembers{Revision: m.Assigned})
		}
		list[i].Names = append(list[i].Names, m.Name)
	}
	for _, r := range list {
		slices.Sort(r.Names)
	}
	return list
}

// planDrain picks the drained members whose copies may be removed now,
// within the disruption budget, and says what the others wait for. A
// drained member whose progress is unknown may still hold copies: it
// counts as holding them. One that is down cannot remove them: it is
// given no part of the budget, not even one it had, and its removal
// stays owed until it is back.
func planDrain(in Input, members []Member) ([]string, map[string]string) {
	maxUnavailable := 1
	if in.Spec.DisruptionBudget.MaxUnavailable != nil {
		maxUnavailable = int(*in.Spec.DisruptionBudget.MaxUnavailable)
	}
	unavailable := 0
	var holders, down []string
	for _, m := range members {
		switch {
		case m.Maintenance == "":
			if m.Assigned != 0 && !(m.Progress.Known && m.Progress.Available) {
				unavailable++
			}
		case m.Maintenance == fleetv1alpha1.MaintenanceDrain && m.Down:
			down = append(down, m.Name)
		case m.Maintenance == fleetv1alpha1.MaintenanceDrain && (m.Progress.Holding || !m.Progress.Known):
			holders = append(holders, m.Name)
		}
	}
	slices.Sort(holders)

	// Members already draining keep draining, whatever the budget says
	// now: their removal may be half done.
	var draining []string
	for _, name := range holders {
		if slices.Contains(in.Draining, name) {
			draining = append(draining, name)
		}
	}
	left := maxUnavailable - unavailable - len(draining)
	for _, name := range holders {
		if left > 0 && !slices.Contains(draining, name) {
			draining = append(draining, name)
			left--
		}
	}
	slices.Sort(draining)

	var waits map[string]string
	for _, name := range down {
		if waits == nil {
			waits = map[string]string{}
		}
		waits[name] = "the member to be Ready: its copies are removed once it is back, within the disruption budget"
	}
	for _, name := range holders {
		if slices.Contains(draining, name) {
			continue
		}
		if waits == nil {
			waits = map[string]string{}
		}
		waits[name] = fmt.Sprintf("the disruption budget of maxUnavailable %d: %s unavailable",
			maxUnavailable, words.Plural(unavailable+len(draining), "member", "members"))
	}
	return draining, waits
}

// truncateMessage cuts message to maxRolloutMessage bytes, on a rune
// boundary.
func truncateMessage(message string) string {
	if len(message) <= maxRolloutMessage {
		return message
	}
	cut := maxRolloutMessage
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut]
}
