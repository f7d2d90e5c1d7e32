package propagation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/revisions"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/rollout"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// revisionRetry is when a status reconcile that made a revision the cache
// does not show yet is tried again.
const revisionRetry = 200 * time.Millisecond

// sumsUp reports whether this replica sums up p's status and rolls it
// out: the only manager, or, when replicas share the fleet, the one
// Manager.OwnsKey names.
func (r *reconciler) sumsUp(p *fleetv1alpha1.Propagation) bool {
	return r.m.ReplicaName() == "" || r.m.OwnsKey(summaryKey(p))
}

// revised is what a status reconcile learned of p's revisions.
type revised struct {
	// revs are p's revisions, oldest first.
	revs []fleetv1alpha1.PropagationRevision
	// hubProblem is the first problem of the hub's objects that p
	// selects, nil if none, or if this replica does not sum p up.
	hubProblem *kindError
	// refused, if set, says why the hub refused a revision of its
	// current content.
	refused string
	// selected is what p's resources select on the hub now; nil if this
	// replica does not sum p up.
	selected *content.Selected
}

// revise returns p's revisions with, as the newest, one of what p
// applies now when this replica sums p up: it makes it if needed. A
// revision the hub refuses (too large, say) is a problem, returned with
// the revisions there are: the rollout goes on with them.
func (r *reconciler) revise(ctx context.Context, p *fleetv1alpha1.Propagation) (revised, error) {
	var rv revised
	var err error
	if !r.sumsUp(p) {
		rv.revs, err = r.revisions.List(ctx, p)
		return rv, err
	}
	c, hash, err := r.content.Get(ctx, p)
	if err != nil {
		return rv, err
	}
	if problem := c.FirstProblem(); problem != nil {
		rv.hubProblem = &kindError{reason: problem.Reason, message: problem.Message}
	}
	rv.selected = &c.Selected
	if refused, ok := r.refusedRevisions.recent(p.UID, hash, time.Now()); ok {
		// Asked again within refusedRevisionRetry, the hub would answer
		// the same.
		rv.refused = refused
		rv.revs, err = r.revisions.List(ctx, p)
		return rv, err
	}
	rv.revs, err = r.revisions.Ensure(ctx, p, c, hash)
	if rv.refused = r.revisionRefused(ctx, p, c, hash, err); rv.refused != "" {
		rv.revs, err = r.revisions.List(ctx, p)
	}
	return rv, err
}

// revisionRefused returns, when err is the hub's refusal of p's
// revision of content c, whose hash is hash, why, remembered for
// refusedRevisionRetry and logged if it is news; "" otherwise, and
// forgets an earlier refusal when err is nil.
func (r *reconciler) revisionRefused(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string, err error) string {
	if err == nil {
		r.refusedRevisions.forget(p.UID)
	}
	if !revisions.RefusedByHub(err) {
		return ""
	}
	raw, _, _ := c.Encode()
	refused := fmt.Sprintf("the hub refused a new revision (%d bytes): %s", len(raw), apply.DescribeStatus(err))
	if r.refusedRevisions.refused(p.UID, hash, refused, time.Now()) {
		logf.FromContext(ctx).Error(err, "The hub refused a new revision: members keep the revisions they have", "bytes", len(raw), "hash", hash)
	}
	return refused
}

// revisionNumber returns the number of p's revision of content c, whose
// hash is hash, for a member run that applies it at once (see
// allAtOnce): the replica that makes p's revisions (see sumsUp) makes
// it now if it is not made yet, so that the member writes each copy
// once, labelled with it (see revisions.Store.EnsureNumber). It returns
// 0 if there is none and it may not be made now: this replica does not
// make p's revisions, it made one less than StatusInterval ago (a burst
// of changes is then revised by the status sums, at their pace), the hub
// refused it (recently), a revision the cache does not show yet is in
// the way, or the hub failed. The member
// applies then without a number, as before, and its next run after the
// revision is made labels its copies (see revisionMade); the hub request
// makes the revision and tells what failed.
func (r *reconciler) revisionNumber(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string) (int64, error) {
	if !r.sumsUp(p) {
		return r.revisions.NewestOf(ctx, p, hash)
	}
	if _, refused := r.refusedRevisions.recent(p.UID, hash, time.Now()); refused {
		return r.revisions.NewestOf(ctx, p, hash)
	}
	n, err := r.revisions.EnsureNumber(ctx, p, c, hash, StatusInterval)
	if r.revisionRefused(ctx, p, c, hash, err) != "" || errors.Is(err, revisions.ErrPending) {
		return 0, nil
	}
	if err != nil && ctx.Err() == nil {
		logf.FromContext(ctx).V(1).Info("Applying without a revision number: making the revision failed", "error", err.Error())
		return 0, nil
	}
	return n, err
}

// refusedRevisionRetry is how long the content of a revision the hub
// refused is not offered again, unless it changes.
const refusedRevisionRetry = time.Minute

// refusalBook remembers, by Propagation UID, the last revision the hub
// refused: its content's hash, why, and when it was last offered.
type refusalBook struct {
	mu   sync.Mutex
	last map[types.UID]refusedRevision
}

type refusedRevision struct {
	hash, message string
	at            time.Time
}

// recent returns why the hub refused a revision of hash for uid, if it
// did less than refusedRevisionRetry before now.
func (b *refusalBook) recent(uid types.UID, hash string, now time.Time) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	last, ok := b.last[uid]
	if !ok || last.hash != hash || now.Sub(last.at) >= refusedRevisionRetry {
		return "", false
	}
	return last.message, true
}

// refused records that the hub refused a revision of hash for uid, and
// reports whether that is news: another content, or another answer.
func (b *refusalBook) refused(uid types.UID, hash, message string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[types.UID]refusedRevision{}
	}
	last, ok := b.last[uid]
	b.last[uid] = refusedRevision{hash: hash, message: message, at: now}
	return !ok || last.hash != hash || last.message != message
}

func (b *refusalBook) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.last, uid)
}

// rollout plans p's rollout into st (see rollout.PlanOf) from the members'
// results, tells a rollout that stopped or completed as an Event, and
// returns when to plan again for a minSuccessTime that passes (0: on
// the next change).
func (r *reconciler) rollout(ctx context.Context, p *fleetv1alpha1.Propagation, st *fleetv1alpha1.PropagationStatus, rv revised) time.Duration {
	if !r.sumsUp(p) {
		return 0
	}
	revs := rv.revs
	target := int64(0)
	if n := len(revs); n > 0 {
		target, st.Revision = revs[n-1].Revision, revs[n-1].Revision
	}
	if p.Spec.Revision != nil {
		target = *p.Spec.Revision
	}
	reach := r.tenancy.reachOf(ctx, p.Namespace)
	if membersSelectorError(p) != nil || reach.Doubt() != nil {
		// Which members are selected is not known: nothing changes.
		st.Rollout = p.Status.Rollout
		return 0
	}
	maintenance, err := r.maintenances(ctx)
	if err != nil {
		// Members in maintenance are not known: nothing changes.
		st.Rollout = p.Status.Rollout
		return time.Second
	}
	reaches := func(c *registry.Cluster) bool { ok, _ := reach.Reaches(tenancyMember(c, r.fleet)); return ok }
	members := plannedMembersOf(p, st, r.m.Registry().List(), reaches, maintenance, r.results.of(client.ObjectKeyFromObject(p)), revs, target)
	var draining []string
	if p.Status.Rollout != nil {
		draining = p.Status.Rollout.Draining
	}
	var kept []int64
	for _, rev := range revs {
		kept = append(kept, rev.Revision)
	}
	plan := rollout.PlanOf(rollout.Input{Spec: &p.Spec, Target: target, Newest: st.Revision, Members: members, Draining: draining, Now: time.Now(),
		Kept: kept, Refused: words.Truncate(rv.refused, 1024)})
	before := p.Status.Rollout
	st.Rollout = &plan.Status
	r.tellRollout(p, before, st.Rollout)
	return plan.After
}

// plannedMembersOf is every accepted member of clusters that p selects
// and its namespace reaches, as the planner of target sees it: a member
// this replica owns by its result in results, one another replica owns by
// that replica's shard of st (see rollout.ShardProgress). A member
// tenancy excludes is not planned: it is given no revision, and holds
// no rollout slot or disruption budget.
func plannedMembersOf(p *fleetv1alpha1.Propagation, st *fleetv1alpha1.PropagationStatus, clusters []*registry.Cluster, reaches func(*registry.Cluster) bool,
	maintenance map[string]fleetv1alpha1.MaintenanceMode, results map[string]memberResult, revs []fleetv1alpha1.PropagationRevision, target int64,
) []rollout.Member {
	// given names, by replica, the members of other replicas the record
	// gives target: their shards speak of them only as of this record.
	given := map[string][]string{}
	for _, c := range clusters {
		if c.Accepted() && !c.Owned() && assignedRevision(p, c.Name) == target {
			given[c.Owner] = append(given[c.Owner], c.Name)
		}
	}
	var members []rollout.Member
	for _, c := range clusters {
		if !c.Accepted() {
			continue
		}
		if selected, err := selects(p, c.Name, c.Labels); err != nil || !selected || !reaches(c) {
			continue
		}
		m := rollout.Member{Name: c.Name, Labels: c.Labels, Maintenance: maintenance[c.Name], Assigned: assignedRevision(p, c.Name),
			Down: c.Owned() && c.State != fleetv1alpha1.MemberStateReady}
		switch res, ok := results[c.Name]; {
		case !c.Owned():
			m.Progress = rollout.ShardProgress(p.Generation, st.Shards, c.Name, c.Owner, given[c.Owner], target)
		case ok && c.State == fleetv1alpha1.MemberStateReady:
			// A held member is known too: it holds what it reports, and
			// runs no revision.
			m.Progress = rollout.Progress{
				Known: true, Revision: res.revisionNumber(revs, m.Assigned),
				Available: res.converged(), AvailableSince: res.since.Time,
				Failed: res.result == fleetv1alpha1.ResultFailed, Reason: res.reason, Message: res.message,
				Holding: res.copies > 0,
			}
		case ok:
			m.Progress.Holding = res.copies > 0
		}
		members = append(members, m)
	}
	return members
}

// rolledOutHere is what this replica's shard says of the rollout (see
// rollout.ShardProgress), from the members it owns.
func (r *reconciler) rolledOutHere(p *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision) (given string, revision int64, since *metav1.Time) {
	var owned []string
	for _, c := range r.ownedMembers() {
		owned = append(owned, c.Name)
	}
	return rolledOut(p, owned, r.results.of(client.ObjectKeyFromObject(p)), revs)
}

// rolledOut is what a shard says of the rollout of p's record, from the
// results of the members owned: given, the hash of the record's revision
// and of those it gives it to; and, if it gives it to any and every one
// of them has it applied and Available, the revision and since when the
// last of them has been Available. Else revision is 0 and since nil.
func rolledOut(p *fleetv1alpha1.Propagation, owned []string, results map[string]memberResult, revs []fleetv1alpha1.PropagationRevision) (given string, revision int64, since *metav1.Time) {
	if p.Status.Rollout == nil || p.Status.Rollout.Revision == 0 {
		return "", 0, nil
	}
	target := p.Status.Rollout.Revision
	var names []string
	var last metav1.Time
	converged := true
	for _, name := range owned {
		if assignedRevision(p, name) != target {
			continue
		}
		names = append(names, name)
		res, ok := results[name]
		if !ok || !res.converged() || revisionOfResult(revs, target, res.revision) != target {
			converged = false
		} else if last.Before(&res.since) {
			last = res.since
		}
	}
	if !converged || len(names) == 0 {
		return rollout.GivenHash(target, names), 0, nil
	}
	return rollout.GivenHash(target, names), target, &last
}

// tellRollout tells, as an Event on p, a rollout that stopped or failed,
// naming the members, the objects and the reasons, or that completed.
func (r *reconciler) tellRollout(p *fleetv1alpha1.Propagation, before, now *fleetv1alpha1.RolloutStatus) {
	if before != nil && before.Phase == now.Phase && before.Revision == now.Revision {
		return
	}
	switch now.Phase {
	case fleetv1alpha1.RolloutStopped:
		r.recorder.Eventf(hubObject(p), nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonRolloutStopped, "Rollout", "revision %d: %s", now.Revision, now.Message)
	case fleetv1alpha1.RolloutFailed:
		// MembersFailed, or RevisionRefused.
		r.recorder.Eventf(hubObject(p), nil, corev1.EventTypeWarning, now.Reason, "Rollout", "revision %d: %s", now.Revision, now.Message)
	case fleetv1alpha1.RolloutComplete:
		if now.Revision > 0 {
			r.recorder.Eventf(hubObject(p), nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonRolloutComplete, "Rollout", "revision %d: %s", now.Revision, now.Message)
		}
	}
}

// revisionOfResult is the number of the revision a member result of
// content hash applied: the one the member is given, assigned, if it is
// of that content, else the newest of it; 0 if none.
func revisionOfResult(revs []fleetv1alpha1.PropagationRevision, assigned int64, hash string) int64 {
	if hash == "" {
		return 0
	}
	for _, rev := range revs {
		if rev.Revision == assigned && rev.Labels[fleetv1alpha1.RevisionHashLabel] == hash {
			return assigned
		}
	}
	return revisions.Number(revs, hash)
}

// maintenances returns the maintenance of every member in maintenance.
func (r *reconciler) maintenances(ctx context.Context) (map[string]fleetv1alpha1.MaintenanceMode, error) {
	var list fleetv1alpha1.MemberClusterList
	if err := r.hub.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]fleetv1alpha1.MaintenanceMode{}
	for _, mc := range list.Items {
		if mc.Spec.Maintenance != "" {
			out[mc.Name] = mc.Spec.Maintenance
		}
	}
	return out, nil
}

// rolloutChanged passes the status writes that change which revision a
// member is given, unless every member takes the hub's content at once
// (see allAtOnce), or which drained members may remove their copies:
// each asks every member again.
var rolloutChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		spec, old, now := specOf(e.ObjectNew), rolloutStatusOf(e.ObjectOld), rolloutStatusOf(e.ObjectNew)
		if old == nil {
			old = &fleetv1alpha1.RolloutStatus{}
		}
		if now == nil {
			now = &fleetv1alpha1.RolloutStatus{}
		}
		return !equality.Semantic.DeepEqual(old.Draining, now.Draining) ||
			spec != nil && !allAtOnce(spec) && !equality.Semantic.DeepEqual(old.Members, now.Members)
	},
}

func specOf(obj client.Object) *fleetv1alpha1.PropagationSpec {
	switch p := obj.(type) {
	case *fleetv1alpha1.Propagation:
		return &p.Spec
	case *fleetv1alpha1.ClusterPropagation:
		return &p.Spec
	}
	return nil
}

func rolloutStatusOf(obj client.Object) *fleetv1alpha1.RolloutStatus {
	switch p := obj.(type) {
	case *fleetv1alpha1.Propagation:
		return p.Status.Rollout
	case *fleetv1alpha1.ClusterPropagation:
		return p.Status.Rollout
	}
	return nil
}
