package propagation

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/rollout"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// shardedWorld is a fleet whose members replicas share, as the planner
// of replica "a" and the shards of the others see it, with each member's
// true state beside.
type shardedWorld struct {
	p     *fleetv1alpha1.Propagation
	revs  []fleetv1alpha1.PropagationRevision
	owner map[string]string // member -> replica
	// results are each replica's results of the members it owns.
	results map[string]map[string]memberResult
	// availableAt is when each member's copies of the revision it applied
	// turn Available.
	availableAt map[string]time.Time
	now         time.Time
}

// planNow is when the sharded world starts.
var planNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	summer      = "a"
	applyTakes  = 10 * time.Minute
	minSuccess  = time.Hour
	shardedStep = 5 * time.Minute
)

func madeRevision(n int64) fleetv1alpha1.PropagationRevision {
	return fleetv1alpha1.PropagationRevision{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleetv1alpha1.RevisionHashLabel: fmt.Sprintf("h%d", n)}},
		Revision:   n,
	}
}

// newShardedWorld has members m0..m8, replica a owning m0-m2, b m3-m5 and
// c m6-m8. With from 0, the Propagation is new; else every member has
// run revision from for long, and revision from+1 is made.
func newShardedWorld(from int64) *shardedWorld {
	w := &shardedWorld{
		owner:       map[string]string{},
		results:     map[string]map[string]memberResult{"a": {}, "b": {}, "c": {}},
		availableAt: map[string]time.Time{},
		now:         planNow,
	}
	w.p = &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 1},
		Spec: fleetv1alpha1.PropagationSpec{Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: minSuccess},
		}}},
	}
	var names []string
	for i := range 9 {
		name := fmt.Sprintf("m%d", i)
		names = append(names, name)
		w.owner[name] = string(rune('a' + i/3))
		if from > 0 {
			w.results[w.owner[name]][name] = memberResult{
				result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonApplied, available: metav1.ConditionTrue,
				generation: 1, revision: fmt.Sprintf("h%d", from), since: metav1.NewTime(planNow.Add(-24 * time.Hour)), copies: 1,
			}
		}
	}
	for n := int64(1); n <= from+1; n++ {
		w.revs = append(w.revs, madeRevision(n))
	}
	if from > 0 {
		w.p.Status.Rollout = &fleetv1alpha1.RolloutStatus{Revision: from, Phase: fleetv1alpha1.RolloutComplete,
			Members: []fleetv1alpha1.RevisionMembers{{Revision: from, Names: names}}}
		for _, replica := range []string{"a", "b", "c"} {
			w.writeShard(replica)
		}
	}
	return w
}

// clusters is the registry as replica sees it.
func (w *shardedWorld) clusters(replica string) []*registry.Cluster {
	var out []*registry.Cluster
	for name, owner := range w.owner {
		c := &registry.Cluster{Name: name, Claims: []registry.Claim{{}}, State: fleetv1alpha1.MemberStateReady, Owner: owner, Ownership: registry.Owned}
		if owner != replica {
			c.Ownership = registry.NotOwned
		}
		out = append(out, c)
	}
	return out
}

// shardOf is replica's shard as its status reconcile writes it from
// the record it reads now: its members not Applied and Available listed.
func (w *shardedWorld) shardOf(replica string) fleetv1alpha1.PropagationShard {
	s := fleetv1alpha1.PropagationShard{Replica: replica, ObservedGeneration: w.p.Generation}
	var owned []string
	for name, owner := range w.owner {
		if owner != replica {
			continue
		}
		owned = append(owned, name)
		res, ok := w.results[replica][name]
		entry := fleetv1alpha1.MemberPropagationStatus{Name: name, Result: fleetv1alpha1.ResultPending, Reason: "Applying", Available: metav1.ConditionUnknown}
		if ok {
			if res.converged() && res.reason == fleetv1alpha1.ReasonApplied {
				continue
			}
			entry.Result, entry.Reason, entry.Available, entry.LastTransitionTime = res.result, res.reason, res.available, res.since
			entry.Revision = revisionOfResult(w.revs, assignedRevision(w.p, name), res.revision)
		}
		s.Members = append(s.Members, entry)
	}
	slices.Sort(owned)
	s.Given, s.Revision, s.AvailableSince = rolledOut(w.p, owned, w.results[replica], w.revs)
	return s
}

func (w *shardedWorld) writeShard(replica string) {
	w.p.Status.Shards = withShard(w.p.Status.Shards, w.shardOf(replica))
}

// sumUp is a status reconcile of replica a: its shard, then the plan, as
// shardedStatus makes them.
func (w *shardedWorld) sumUp() {
	st := *w.p.Status.DeepCopy()
	st.Shards = withShard(st.Shards, w.shardOf(summer))
	st.Members = nil
	for _, s := range st.Shards {
		st.Members = append(st.Members, s.Members...)
	}
	target := w.revs[len(w.revs)-1].Revision
	members := plannedMembersOf(w.p, &st, w.clusters(summer), everyone, nil, w.results[summer], w.revs, target)
	plan := rollout.PlanOf(rollout.Input{Spec: &w.p.Spec, Target: target, Members: members, Now: w.now})
	st.Rollout = &plan.Status
	w.p.Status = st
}

// runMembers is every member's reconcile on its owner: it applies the
// revision the record gives it, and its copies turn Available
// applyTakes later.
func (w *shardedWorld) runMembers() {
	for name, owner := range w.owner {
		given := assignedRevision(w.p, name)
		res, ok := w.results[owner][name]
		hash := fmt.Sprintf("h%d", given)
		switch {
		case given == 0:
		case !ok || res.revision != hash:
			w.results[owner][name] = memberResult{
				result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonNotAvailable, available: metav1.ConditionFalse,
				generation: 1, revision: hash, since: metav1.NewTime(w.now), copies: 1,
			}
			w.availableAt[name] = w.now.Add(applyTakes)
		case !res.converged() && !w.now.Before(w.availableAt[name]):
			res.reason, res.available, res.since = fleetv1alpha1.ReasonApplied, metav1.ConditionTrue, metav1.NewTime(w.availableAt[name])
			w.results[owner][name] = res
		}
	}
}

// done reports whether name truly runs revision and has been Available
// with it for minSuccess.
func (w *shardedWorld) done(name string, revision int64) bool {
	res := w.results[w.owner[name]][name]
	return res.revision == fmt.Sprintf("h%d", revision) && res.converged() && w.now.Sub(res.since.Time) >= minSuccess
}

// TestShardedRolloutHoldsTheGuard: replica a plans a Progressive rollout
// of maxConcurrency 1 and minSuccessTime 1h over nine members, six of
// which replicas b and c own, its members' progress as their shards say.
// It sums up twice for each time the others act (a member's report asks
// for it before the other replicas have run): no plan gives the revision
// to a member while another is between revisions, or before it is done,
// whoever owns it; and the rollout completes.
func TestShardedRolloutHoldsTheGuard(t *testing.T) {
	for _, from := range []int64{0, 1} {
		t.Run(fmt.Sprintf("from revision %d", from), func(t *testing.T) {
			w := newShardedWorld(from)
			target := from + 1
			check := func() {
				t.Helper()
				var between []string
				for name := range w.owner {
					if assignedRevision(w.p, name) == target && !w.done(name, target) {
						between = append(between, name)
					}
				}
				if len(between) > 1 {
					slices.Sort(between)
					t.Fatalf("at +%s, the record gives revision %d to %v, none of them done (maxConcurrency 1, minSuccessTime %s): %+v",
						w.now.Sub(planNow), target, between, minSuccess, w.p.Status.Rollout)
				}
			}
			for range 400 {
				w.sumUp()
				check()
				w.sumUp()
				check()
				w.runMembers()
				for _, replica := range []string{"b", "c"} {
					w.writeShard(replica)
				}
				if r := w.p.Status.Rollout; r != nil && r.Phase == fleetv1alpha1.RolloutComplete && r.Revision == target {
					break
				}
				w.now = w.now.Add(shardedStep)
			}
			if r := w.p.Status.Rollout; r == nil || r.Phase != fleetv1alpha1.RolloutComplete || r.Revision != target {
				t.Fatalf("the rollout of revision %d did not complete: %+v", target, r)
			}
			// Nine members one after the other, each an apply and
			// minSuccessTime: no faster than that.
			if took, least := w.now.Sub(planNow), 9*(applyTakes+minSuccess); took < least {
				t.Errorf("the rollout took %s, less than %s: a member was counted done early", took, least)
			}
		})
	}
}
