package rollout

import (
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestShardProgress: another replica's shard speaks of a member given
// the target only once written from the record that gave it to the same
// members; it speaks of a member by its entry, else by the shard's
// Revision, each time rounded up to the second after the one the hub
// records; otherwise the member's progress is unknown.
func TestShardProgress(t *testing.T) {
	const target = int64(3)
	given := []string{"m3", "m4", "m5", "m6"}
	// at is a time of the hub's record, with the part of a second the hub
	// drops; since is when minSuccessTime is judged from.
	at := metav1.NewTime(planNow.Add(1500 * time.Millisecond))
	since := planNow.Add(2 * time.Second)
	shard := fleetv1alpha1.PropagationShard{
		Replica: "b", ObservedGeneration: 2, Given: GivenHash(target, []string{"m6", "m5", "m4", "m3"}),
		Revision: target, AvailableSince: &at,
		Members: []fleetv1alpha1.MemberPropagationStatus{
			{Name: "m4", Revision: target, Result: fleetv1alpha1.ResultFailed, Reason: fleetv1alpha1.ReasonProgressDeadlineExceeded,
				Message: "Deployment web: 0 of 3 replicas available", Available: metav1.ConditionFalse, LastTransitionTime: at},
			{Name: "m5", Revision: target, Result: fleetv1alpha1.ResultDrifted, Reason: fleetv1alpha1.ReasonDrifted,
				Available: metav1.ConditionTrue, LastTransitionTime: at},
			{Name: "m6", Result: fleetv1alpha1.ResultPending, Reason: fleetv1alpha1.ReasonWaitingForRollout, Available: metav1.ConditionUnknown},
			{Name: "m7", Revision: 2, Result: fleetv1alpha1.ResultPending, Reason: fleetv1alpha1.ReasonCordoned, Available: metav1.ConditionTrue, LastTransitionTime: at},
		},
	}
	otherRecord := shard
	otherRecord.Given = GivenHash(target, []string{"m3", "m4"})
	staleGeneration := shard
	staleGeneration.ObservedGeneration = 1
	notAllAvailable := shard
	notAllAvailable.Revision, notAllAvailable.AvailableSince = 0, nil
	otherReplica := shard
	otherReplica.Replica = "c"

	for _, c := range []struct {
		name, member, owner string
		shards              []fleetv1alpha1.PropagationShard
		target              int64
		want                Progress
	}{
		{name: "every member given the target Available: since the last, rounded up", member: "m3", owner: "b",
			shards: []fleetv1alpha1.PropagationShard{otherReplica, shard}, target: target,
			want: Progress{Known: true, Revision: target, Available: true, AvailableSince: since, Holding: true}},
		{name: "its entry: failed", member: "m4", owner: "b", shards: []fleetv1alpha1.PropagationShard{shard}, target: target,
			want: Progress{Known: true, Revision: target, Failed: true, Reason: fleetv1alpha1.ReasonProgressDeadlineExceeded,
				Message: "Deployment web: 0 of 3 replicas available", AvailableSince: since, Holding: true}},
		{name: "its entry: Drifted and Available is Available", member: "m5", owner: "b", shards: []fleetv1alpha1.PropagationShard{shard}, target: target,
			want: Progress{Known: true, Revision: target, Available: true, AvailableSince: since, Reason: fleetv1alpha1.ReasonDrifted, Holding: true}},
		{name: "its entry: waiting for the rollout is no report", member: "m6", owner: "b", shards: []fleetv1alpha1.PropagationShard{shard}, target: target,
			want: Progress{AvailableSince: recordedSince(metav1.Time{}), Reason: fleetv1alpha1.ReasonWaitingForRollout, Holding: true}},
		{name: "its entry: cordoned is no report", member: "m7", owner: "b", shards: []fleetv1alpha1.PropagationShard{shard}, target: target,
			want: Progress{Revision: 2, AvailableSince: since, Reason: fleetv1alpha1.ReasonCordoned, Holding: true}},
		{name: "written from a record that gave the target to other members: in flight", member: "m3", owner: "b",
			shards: []fleetv1alpha1.PropagationShard{otherRecord}, target: target},
		{name: "of another generation: unknown", member: "m3", owner: "b", shards: []fleetv1alpha1.PropagationShard{staleGeneration}, target: target},
		{name: "not every member given the target Available: unknown", member: "m3", owner: "b",
			shards: []fleetv1alpha1.PropagationShard{notAllAvailable}, target: target},
		{name: "not given the target: the shard's Revision says nothing of it", member: "m8", owner: "b",
			shards: []fleetv1alpha1.PropagationShard{shard}, target: target},
		{name: "no shard of its owner: unknown", member: "m3", owner: "b", shards: []fleetv1alpha1.PropagationShard{otherReplica}, target: target},
		{name: "no owner: unknown", member: "m3", owner: "", shards: []fleetv1alpha1.PropagationShard{shard}, target: target},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ShardProgress(2, c.shards, c.member, c.owner, given, c.target); got != c.want {
				t.Errorf("progress %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestGivenHash(t *testing.T) {
	a := GivenHash(3, []string{"m1", "m2"})
	if len(a) != 32 {
		t.Errorf("hash %q is of %d characters, want 32", a, len(a))
	}
	if b := GivenHash(3, []string{"m2", "m1"}); b != a {
		t.Errorf("hash of the names in another order %q, want %q", b, a)
	}
	for _, other := range []string{GivenHash(4, []string{"m1", "m2"}), GivenHash(3, []string{"m1"}), GivenHash(3, []string{"m1", "m2", "m3"}), GivenHash(3, nil)} {
		if other == a {
			t.Errorf("hash %q of another target or other names is the same", other)
		}
	}
	names := []string{"m2", "m1"}
	GivenHash(3, names)
	if names[0] != "m2" {
		t.Errorf("GivenHash sorted its input: %v", names)
	}
}

func TestRevisionsInUse(t *testing.T) {
	if got := RevisionsInUse(nil); len(got) != 0 {
		t.Errorf("revisions in use of no rollout %v, want none", got)
	}
	r := &fleetv1alpha1.RolloutStatus{Revision: 5, Members: []fleetv1alpha1.RevisionMembers{{Revision: 2, Names: []string{"a"}}, {Revision: 4, Names: []string{"b"}}}}
	if got, want := RevisionsInUse(r), map[int64]bool{2: true, 4: true, 5: true}; !maps.Equal(got, want) {
		t.Errorf("revisions in use %v, want %v", got, want)
	}
}
