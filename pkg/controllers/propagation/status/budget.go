package status

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
)

// Budget bounds a Propagation's status, as JSON. etcd takes an
// object of at most 1.5 MiB (its default request limit); the rest is
// for the spec (64 resources and their overrides), the metadata and its
// managedFields, which for a status listing 1,000 members hold some
// 250 KiB of the manager's own field paths.
const Budget = 768 << 10

// Fit cuts st until it marshals to at most budget bytes, and says
// in the condition StatusTruncated what it cut, and whether status.kinds
// is full (it removes the condition when neither). What is cut, in this order, each from the last
// member listed backwards, only as far as needed:
//  1. the drifted field paths of the members listed in status.members
//     and in each shard's members;
//  2. their messages;
//  3. entries of status.selectedResources, from the last, whose objects
//     are then counted only (selectedResourceCount);
//  4. entries of status.members, whose members are then counted only.
//
// Never cut: the counts, the other conditions, status.kinds,
// status.excludedMembers (at most 100, each message at most 512 bytes) and
// status.rollout, which holds the revision each member is given (the
// rollout's plan), nor a shard's entries, from which the replica that
// sums up plans the rollout of the members other replicas own. It is a
// pure function of st: the same status is cut the same way each time.
func Fit(st *fleetv1alpha1.PropagationStatus, budget int) {
	var notes []string
	// The condition's own room, at most its message's bound and the rest.
	over := jsonSize(st) - budget + 1024 + 256
	var entries []*fleetv1alpha1.MemberPropagationStatus
	for i := range st.Members {
		entries = append(entries, &st.Members[len(st.Members)-1-i])
	}
	for s := range st.Shards {
		members := st.Shards[s].Members
		for i := range members {
			entries = append(entries, &members[len(members)-1-i])
		}
	}
	cut := func(what string, edit func(e *fleetv1alpha1.MemberPropagationStatus) bool) {
		n := 0
		for _, e := range entries {
			if over <= 0 {
				break
			}
			before := jsonSize(e)
			if edit(e) {
				over -= before - jsonSize(e)
				n++
			}
		}
		if n > 0 {
			notes = append(notes, fmt.Sprintf("the %s of %d members", what, n))
		}
	}
	if over > 0 {
		cut("drifted fields", func(e *fleetv1alpha1.MemberPropagationStatus) bool {
			had := len(e.DriftedFields) > 0
			e.DriftedFields = nil
			return had
		})
		cut("messages", func(e *fleetv1alpha1.MemberPropagationStatus) bool {
			had := e.Message != ""
			e.Message = ""
			return had
		})
	}
	unlistedResources := 0
	for over > 0 && len(st.SelectedResources) > 0 {
		over -= jsonSize(&st.SelectedResources[len(st.SelectedResources)-1]) + 1
		st.SelectedResources = st.SelectedResources[:len(st.SelectedResources)-1]
		unlistedResources++
	}
	if unlistedResources > 0 {
		notes = append(notes, fmt.Sprintf("%d hub objects not listed in status.selectedResources, counted only", unlistedResources))
	}
	unlisted := 0
	for over > 0 && len(st.Members) > 0 {
		over -= jsonSize(&st.Members[len(st.Members)-1]) + 1
		st.Members = st.Members[:len(st.Members)-1]
		unlisted++
	}
	if unlisted > 0 {
		notes = append(notes, fmt.Sprintf("%d members not listed in status.members, counted only", unlisted))
	}
	var message []string
	if len(notes) > 0 {
		message = append(message, fmt.Sprintf("the status was cut to fit %d KiB: %s", budget>>10, strings.Join(notes, ", ")))
	}
	if len(st.Kinds) >= fleetv1alpha1.MaxCopiedKinds {
		message = append(message, fmt.Sprintf("status.kinds is full (%d kinds): copies of a kind beyond them that is no longer copied are not looked for", len(st.Kinds)))
	}
	if len(message) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, fleetv1alpha1.PropagationStatusTruncated)
		return
	}
	// Set, not replaced: its last transition stays while it holds.
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: fleetv1alpha1.PropagationStatusTruncated, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonStatusBudget,
		Message: words.Truncate(strings.Join(message, "; "), 1024), ObservedGeneration: st.ObservedGeneration,
	})
}

// jsonSize is the size of v as JSON.
func jsonSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
