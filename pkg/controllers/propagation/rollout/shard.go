package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// ShardProgress is the progress of member name, which replica owner
// owns, as that replica's shard in shards says, for a Propagation of
// generation. A shard speaks of a member the record gives target only if
// it was written from a record that gave target to the same members of
// the replica, given (its Given hash): before that, such a member is in
// flight. It speaks of a member by its entry, if it lists it, with its
// Available-since time; else, if it says every member given target has
// it applied and Available (Revision), as Available since the last of
// them became so: so minSuccessTime holds for every member, whoever owns
// it. Otherwise the member's progress is unknown.
func ShardProgress(generation int64, shards []fleetv1alpha1.PropagationShard, name, owner string, given []string, target int64) Progress {
	i := slices.IndexFunc(shards, func(s fleetv1alpha1.PropagationShard) bool { return s.Replica == owner })
	if owner == "" || i < 0 || shards[i].ObservedGeneration != generation {
		return Progress{}
	}
	s := shards[i]
	isGiven := slices.Contains(given, name)
	if isGiven && s.Given != GivenHash(target, given) {
		return Progress{}
	}
	if j := slices.IndexFunc(s.Members, func(e fleetv1alpha1.MemberPropagationStatus) bool { return e.Name == name }); j >= 0 {
		e := s.Members[j]
		return Progress{
			Known: e.Reason != fleetv1alpha1.ReasonWaitingForRollout && e.Reason != fleetv1alpha1.ReasonCordoned, Revision: e.Revision,
			Available:      (e.Result == fleetv1alpha1.ResultApplied || e.Result == fleetv1alpha1.ResultDrifted) && e.Available == metav1.ConditionTrue,
			AvailableSince: recordedSince(e.LastTransitionTime), Failed: e.Result == fleetv1alpha1.ResultFailed,
			Reason: e.Reason, Message: e.Message, Holding: true,
		}
	}
	if isGiven && target > 0 && s.Revision == target && s.AvailableSince != nil {
		return Progress{Known: true, Revision: target, Available: true, AvailableSince: recordedSince(*s.AvailableSince), Holding: true}
	}
	return Progress{}
}

// recordedSince is the latest a time the hub records may stand for: the
// hub keeps whole seconds, so the time itself may be up to a second
// later, and minSuccessTime is judged from then.
func recordedSince(t metav1.Time) time.Time {
	return t.Truncate(time.Second).Add(time.Second)
}

// GivenHash is what a shard's Given holds for target given to the
// members names (in any order): a hash of target and the sorted names.
func GivenHash(target int64, names []string) string {
	names = slices.Sorted(slices.Values(names))
	h := sha256.New()
	fmt.Fprintf(h, "%d", target)
	for _, name := range names {
		fmt.Fprintf(h, "\n%s", name)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// RevisionsInUse are the revisions pruning keeps: the one rolled out and
// every one a member is given.
func RevisionsInUse(rollout *fleetv1alpha1.RolloutStatus) map[int64]bool {
	keep := map[int64]bool{}
	if rollout == nil {
		return keep
	}
	keep[rollout.Revision] = true
	for _, g := range rollout.Members {
		keep[g.Revision] = true
	}
	return keep
}
