package propagation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/health"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/revisions"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/rollout"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/status"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// reconcileStatus writes a Propagation's status from its members'
// results, at most once per StatusInterval, or at once when the sum
// completes the picture (see statusSum.earlySum), keeps its finalizer,
// and releases it once a deleted Propagation's copies are removed or
// owed. The status is summed up as often: each member's report asks for
// it, and it reads every member's result. Once a namespace's last
// Propagation is gone, its hub cache is dropped.
func (r *reconciler) reconcileStatus(ctx context.Context, key propagationKey) (reconcile.Result, error) {
	p, err := r.getPropagation(ctx, key)
	if apierrors.IsNotFound(err) {
		r.results.forgetPropagation(key)
		r.content.Forget(key)
		r.shared.Forget(key)
		r.setReadiness(key, "")
		return reconcile.Result{}, r.dropUnusedHubCache(ctx, key.Namespace)
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !r.ours(p) && !unclaimed(p) {
		// Another fleet's: neither its status, its revisions nor its
		// finalizer are this fleet's.
		r.results.forgetPropagation(key)
		r.content.Forget(key)
		r.shared.Forget(key)
		r.setReadiness(key, "")
		return reconcile.Result{}, nil
	}
	if unclaimed(p) || !controllerutil.ContainsFinalizer(p, fleetv1alpha1.PropagationFinalizer) && p.DeletionTimestamp.IsZero() {
		// Claimed for this fleet, under optimistic concurrency: of two
		// fleets that claim it at once, one wins, and the other finds it
		// the winner's.
		before := p.DeepCopy()
		metav1.SetMetaDataLabel(&p.ObjectMeta, fleetv1alpha1.FleetLabel, r.fleet)
		if p.DeletionTimestamp.IsZero() {
			controllerutil.AddFinalizer(p, fleetv1alpha1.PropagationFinalizer)
		}
		return written(r.hub.Patch(ctx, hubObject(p), client.MergeFromWithOptions(hubObject(before), client.MergeFromWithOptimisticLock{})))
	}
	if !p.DeletionTimestamp.IsZero() {
		return retryConflict(r.release(ctx, p))
	}
	if r.tenancy.pending(key.Namespace) {
		return reconcile.Result{RequeueAfter: tenancyWait}, nil
	}
	// Whether a sum is due is decided first, from the interval and the
	// members' results alone: the content and the revisions are read only
	// for a sum.
	picture := r.results.picture(key, p, r.ownedMembers(), r.memberSelects(ctx, p))
	if wait := r.statusWait(key, p.Generation, picture); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	rv, err := r.revise(ctx, p)
	if errors.Is(err, revisions.ErrPending) {
		return reconcile.Result{RequeueAfter: revisionRetry}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	var st fleetv1alpha1.PropagationStatus
	// A rollout planned from a stale record must not be written: the
	// record is who is given what (see rollout). And other replicas
	// write their shards: a write over a newer version would undo theirs.
	// So the status patch below carries the version it was planned from.
	var after time.Duration
	if r.m.ReplicaName() == "" {
		st = r.status(ctx, p, r.ownedMembers(), rv.revs)
		after = r.rollout(ctx, p, &st, rv)
		r.setExcluded(ctx, p, &st)
		status.SetSelected(p, &st, selectionOf(rv.selected))
		status.SetConditions(p, &st, r.conditionProblems(ctx, p, rv.hubProblem))
	} else {
		st, after = r.shardedStatus(ctx, p, rv)
	}
	r.tellExcluded(p)
	status.Fit(&st, status.Budget)
	if r.sumsUp(p) {
		if err := r.revisions.Prune(ctx, p, rv.revs, rollout.RevisionsInUse(st.Rollout)); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.statusSummed(key, p.Generation, picture)
	r.setReadiness(key, string(status.ConditionStatus(st.Conditions, fleetv1alpha1.PropagationReady)))
	if equality.Semantic.DeepEqual(p.Status, st) {
		return reconcile.Result{RequeueAfter: after}, nil
	}
	before := p.DeepCopy()
	p.Status = st
	// Under optimistic concurrency: a write over a newer version would
	// undo what was written since (another replica's shard, another
	// manager's claim); a conflict reads again and sums up again.
	res, err := written(r.hub.Status().Patch(ctx, hubObject(p), client.MergeFromWithOptions(hubObject(before), client.MergeFromWithOptimisticLock{})))
	if res.IsZero() && err == nil {
		res.RequeueAfter = after
	}
	return res, err
}

// ownedMembers lists the members the registry accepts and this replica
// owns: every accepted member, unless replicas share the fleet.
func (r *reconciler) ownedMembers() []*registry.Cluster {
	var members []*registry.Cluster
	for _, c := range r.m.Registry().List() {
		if c.Accepted() && c.Owned() {
			members = append(members, c)
		}
	}
	return members
}

// shardedStatus is p's status when replicas share the fleet: this
// replica's shard, from the members it owns, replaced; and, when p's
// summary is this replica's to write (Manager.OwnsKey), the sum of the
// shards of the live replicas, the others' dropped.
func (r *reconciler) shardedStatus(ctx context.Context, p *fleetv1alpha1.Propagation, rv revised) (fleetv1alpha1.PropagationStatus, time.Duration) {
	own := r.status(ctx, p, r.ownedMembers(), rv.revs)
	st := *p.Status.DeepCopy()
	mine := replicaShard(p, r.m.ReplicaName())
	mine.ObservedGeneration = p.Generation
	mine.Selected, mine.Applied, mine.Available, mine.Drifted, mine.Failed, mine.PendingDeletions = own.Selected, own.Applied, own.Available, own.Drifted, own.Failed, own.PendingDeletions
	mine.Members = own.Members[:min(len(own.Members), fleetv1alpha1.MaxShardMembers)]
	mine.Given, mine.Revision, mine.AvailableSince = r.rolledOutHere(p, rv.revs)
	st.Shards = withShard(st.Shards, mine)
	if !r.m.OwnsKey(summaryKey(p)) {
		return st, 0
	}
	live := r.m.Replicas()
	st.Shards = slices.DeleteFunc(st.Shards, func(s fleetv1alpha1.PropagationShard) bool { return !slices.Contains(live, s.Replica) })
	st.ObservedGeneration, st.Kinds = p.Generation, r.copiedKindsStatus(ctx, p)
	st.Selected, st.Applied, st.Available, st.Drifted, st.Failed, st.PendingDeletions = 0, 0, 0, 0, 0, 0
	st.Members = nil
	for _, s := range st.Shards {
		st.Selected += s.Selected
		st.Applied += s.Applied
		st.Available += s.Available
		st.Drifted += s.Drifted
		st.Failed += s.Failed
		st.PendingDeletions += s.PendingDeletions
		st.Members = append(st.Members, s.Members...)
	}
	st.Members = status.SortMembers(st.Members)
	after := r.rollout(ctx, p, &st, rv)
	r.setExcluded(ctx, p, &st)
	status.SetSelected(p, &st, selectionOf(rv.selected))
	status.SetConditions(p, &st, r.conditionProblems(ctx, p, rv.hubProblem))
	return st, after
}

// selectionOf is sel for the status package, nil when sel is.
func selectionOf(sel *content.Selected) *status.Selection {
	if sel == nil {
		return nil
	}
	var empty *status.Problem
	if sel.Empty != nil {
		empty = &status.Problem{Reason: sel.Empty.Reason, Message: sel.Empty.Message}
	}
	// The content is shared read-only: status gets its own list.
	return &status.Selection{Count: sel.Count, Listed: slices.Clone(sel.Listed), Empty: empty, EmptyEntries: sel.EmptyEntries}
}

// conditionProblems is what, beside its members, keeps p from Ready:
// hubErr, the first problem of the hub's objects, a members selector
// that does not parse, a reach tenancy cannot tell, an availableWhen rule
// that does not compile.
func (r *reconciler) conditionProblems(ctx context.Context, p *fleetv1alpha1.Propagation, hubErr *kindError) status.Problems {
	problems := status.Problems{Hub: problemOf(hubErr), MembersSelector: problemOf(membersSelectorError(p)), AvailableWhen: ruleProblem(health.FirstUnusableRule(p.Spec.Resources))}
	if doubt := r.tenancy.reachOf(ctx, p.Namespace).Doubt(); doubt != nil {
		problems.Tenancy = problemOf(tenancyUnknown(doubt))
	}
	return problems
}

// ruleProblem is e for the status package, nil when e is.
func ruleProblem(e *health.RuleError) *status.Problem {
	if e == nil {
		return nil
	}
	return &status.Problem{Reason: e.Reason, Message: e.Message}
}

// problemOf is e for the status package, nil when e is.
func problemOf(e *kindError) *status.Problem {
	if e == nil {
		return nil
	}
	return &status.Problem{Reason: e.reason, Message: e.message}
}

// summaryKey names the hub work of summing up p's status, for
// Manager.OwnsKey.
func summaryKey(p *fleetv1alpha1.Propagation) string {
	return "propagation/" + p.Namespace + "/" + p.Name
}

// replicaShard returns replica's shard of p's status, empty if it has
// none.
func replicaShard(p *fleetv1alpha1.Propagation, replica string) fleetv1alpha1.PropagationShard {
	for _, s := range p.Status.Shards {
		if s.Replica == replica {
			return *s.DeepCopy()
		}
	}
	return fleetv1alpha1.PropagationShard{Replica: replica}
}

// withShard returns shards with s in place of its replica's, sorted.
func withShard(shards []fleetv1alpha1.PropagationShard, s fleetv1alpha1.PropagationShard) []fleetv1alpha1.PropagationShard {
	out := slices.DeleteFunc(slices.Clone(shards), func(x fleetv1alpha1.PropagationShard) bool { return x.Replica == s.Replica })
	out = append(out, s)
	slices.SortFunc(out, func(a, b fleetv1alpha1.PropagationShard) int { return strings.Compare(a.Replica, b.Replica) })
	return out
}

// conflictRetry is when a write that lost to a newer version of the
// Propagation is tried again, if no event of that version asked first.
const conflictRetry = time.Second

// retryConflict retries a reconcile whose write lost to a newer version
// of the Propagation: the cache was behind, which is no failure.
func retryConflict(res reconcile.Result, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// written is the result of a reconcile that ends with a write of the
// Propagation: done once it is gone, retried on a conflict.
func written(err error) (reconcile.Result, error) {
	return retryConflict(reconcile.Result{}, client.IgnoreNotFound(err))
}

// dropUnusedHubCache drops the hub cache of namespace once it has no
// Propagation left.
func (r *reconciler) dropUnusedHubCache(ctx context.Context, namespace string) error {
	props, err := r.propagationsIn(ctx, namespace)
	if err != nil {
		return err
	}
	if len(props) == 0 {
		r.objects.drop(namespace)
	}
	return nil
}

// status sums up the members' results of p.
func (r *reconciler) status(ctx context.Context, p *fleetv1alpha1.Propagation, members []*registry.Cluster, revs []fleetv1alpha1.PropagationRevision) fleetv1alpha1.PropagationStatus {
	key := client.ObjectKeyFromObject(p)
	st := fleetv1alpha1.PropagationStatus{
		ObservedGeneration: p.Generation,
		Conditions:         slices.Clone(p.Status.Conditions),
		Kinds:              r.copiedKindsStatus(ctx, p),
	}
	results := r.results.of(key)
	previous := map[string]fleetv1alpha1.MemberPropagationStatus{}
	for _, m := range p.Status.Members {
		previous[m.Name] = m
	}
	// A members selector that does not parse deselects no one: a member
	// that reported is listed as it holds (setConditions says why), and
	// none owes a removal.
	// So does a namespace whose reach tenancy cannot tell; a member it
	// may not reach is not selected.
	selectorErr := membersSelectorError(p)
	reach := r.tenancy.reachOf(ctx, p.Namespace)
	var listed []fleetv1alpha1.MemberPropagationStatus
	for _, c := range members {
		res, has := results[c.Name]
		selected := has
		if selectorErr == nil && reach.Doubt() == nil {
			selected, _ = selects(p, c.Name, c.Labels)
			if selected {
				selected, _ = reach.Reaches(tenancyMember(c, r.fleet))
			}
		}
		ready := c.State == fleetv1alpha1.MemberStateReady
		entry := fleetv1alpha1.MemberPropagationStatus{Name: c.Name, ObservedGeneration: p.Generation, Available: metav1.ConditionUnknown}
		if has && !res.confirmed.IsZero() {
			entry.LastConfirmedTime = &res.confirmed
		}
		if has {
			entry.Revision = res.revisionNumber(revs, assignedRevision(p, c.Name))
		}
		if selected && has && (res.draining || res.reason == fleetv1alpha1.ReasonWaitingForDisruptionBudget || res.reason == fleetv1alpha1.ReasonCordoned) {
			// Drained, or cordoned before it was given the Propagation:
			// not counted, and listed while it holds copies or waits.
			selected = false
			if res.copies == 0 && res.reason != fleetv1alpha1.ReasonCordoned {
				continue
			}
			entry.Result, entry.Reason, entry.Message = res.result, res.reason, res.message
			if res.draining {
				entry.Result, entry.Reason, entry.Message = fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonDraining, "the member is drained: removing its copies"
			}
		}
		switch {
		case entry.Result != "":
		case selected && !ready:
			// What was known of it is stale: counted neither applied nor
			// available; LastTransitionTime says since when.
			entry.Result, entry.Reason, entry.Message = fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonMemberUnhealthy, fmt.Sprintf("the member is %s: its copies are not known", c.State)
		case selected && (!has || res.generation != p.Generation || res.removing):
			entry.Result, entry.Reason, entry.Message = fleetv1alpha1.ResultPending, "Applying", "not applied yet"
		case selected && res.relabelOwed(p, revs) > 0:
			// Not counted applied before its copies carry the revision:
			// Ready never comes before a write the member still owes.
			entry.Result, entry.Reason = fleetv1alpha1.ResultPending, "Applying"
			entry.Message = fmt.Sprintf("applied; labelling its copies with revision %d", entry.Revision)
		case selected:
			entry.Result, entry.Reason, entry.Message, entry.DriftedFields = res.result, res.reason, res.message, res.drifted
			entry.ObservedGeneration, entry.LastTransitionTime, entry.Available = res.generation, res.since, res.available
		case has && (res.copies > 0 || res.result == fleetv1alpha1.ResultDeletionOwed || !res.removing):
			if !ready {
				if err := r.owe(ctx, p, c.Name, fmt.Sprintf("the member is %s: its copies are removed when it is Ready", c.State)); err != nil {
					logf.FromContext(ctx).Error(err, "Recording an owed removal")
				}
				res, _ = r.results.get(key, c.Name)
				entry.Result, entry.Reason, entry.Message = res.result, res.reason, res.message
			} else {
				entry.Result, entry.Reason, entry.Message = fleetv1alpha1.ResultPending, "Removing", "the member is no longer selected: removing its copies"
			}
		default:
			continue
		}
		if selected {
			st.Selected++
		}
		switch entry.Result {
		case fleetv1alpha1.ResultApplied:
			st.Applied++
			if entry.Available == metav1.ConditionTrue {
				st.Available++
				if entry.Reason == fleetv1alpha1.ReasonApplied {
					continue // counted, not listed; what was orphaned is listed
				}
			}
		case fleetv1alpha1.ResultDrifted:
			st.Drifted++
		case fleetv1alpha1.ResultFailed:
			st.Failed++
		case fleetv1alpha1.ResultDeletionOwed:
			st.PendingDeletions++
		}
		if prev, ok := previous[c.Name]; ok && prev.Result == entry.Result && prev.Reason == entry.Reason && (prev.Reason != fleetv1alpha1.ReasonMemberUnhealthy || prev.Message == entry.Message) {
			entry.LastTransitionTime = prev.LastTransitionTime
		} else if entry.LastTransitionTime.IsZero() {
			entry.LastTransitionTime = metav1.Now()
		}
		listed = append(listed, entry)
	}
	st.Members = status.SortMembers(listed)
	return st
}

// copiedKindsStatus is status.kinds: the kinds p copies now, an
// Envelope's manifests' in its place, and those it copied before, bounded
// (boundKinds).
func (r *reconciler) copiedKindsStatus(ctx context.Context, p *fleetv1alpha1.Propagation) []fleetv1alpha1.KindReference {
	var current []fleetv1alpha1.KindReference
	add := func(apiVersion, kind string) {
		current = append(current, fleetv1alpha1.KindReference{APIVersion: apiVersion, Kind: kind})
	}
	for _, res := range p.Spec.Resources {
		gvk, err := content.ResourceKind(res)
		if err != nil || !content.IsEnvelope(gvk) {
			add(res.APIVersion, res.Kind)
			continue
		}
		envelopes, _ := r.objects.list(ctx, p.Namespace, res)
		for i := range envelopes {
			manifests, _ := r.content.Unpack(&envelopes[i])
			for _, m := range manifests {
				add(m.GetAPIVersion(), m.GetKind())
			}
		}
	}
	return status.BoundKinds(p.Status.Kinds, current)
}

// statusWait is how long key's status, at generation, must wait before
// it is summed up again: until StatusInterval after the last sum, unless
// this sum completes the picture (see earlySum).
func (r *reconciler) statusWait(key propagationKey, generation int64, now picture) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.lastStatus[key]
	wait := time.Until(last.at.Add(StatusInterval))
	if wait > 0 && last.earlySum(generation, now) {
		return 0
	}
	return wait
}

// statusSummed records that key's status was summed up now, at
// generation, from results that showed picture.
func (r *reconciler) statusSummed(key propagationKey, generation int64, picture picture) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.lastStatus[key]
	now := time.Now()
	if generation != last.generation {
		last.early = [pictures]bool{}
	}
	if now.Before(last.at.Add(StatusInterval)) {
		last.early[picture] = true
	}
	last.at, last.generation, last.picture = now, generation, picture
	r.lastStatus[key] = last
}

// statusSum is what the last sum of a Propagation's status saw, and when.
type statusSum struct {
	// at is when it was summed up, of generation, from members' results
	// that showed picture.
	at         time.Time
	generation int64
	picture    picture
	// early holds the pictures summed up before the interval was out, at
	// generation (see earlySum).
	early [pictures]bool
}

// earlySum reports whether a sum of generation whose members' results
// show now is due before the interval is out: the one that completes the
// picture (the last outstanding member result is in: every selected
// member converged, or one failed), when the last sum saw another
// picture or generation. Each complete picture comes early at most once
// per generation: a Propagation's status is summed up, and written, at
// most once per StatusInterval, and at most twice more per generation,
// however its members' results come and go.
func (last statusSum) earlySum(generation int64, now picture) bool {
	switch {
	case now == pictureOutstanding:
		return false
	case generation != last.generation:
		return true
	}
	return now != last.picture && !last.early[now]
}

// picture is what the members' results of a Propagation say, as far as
// a status write is due early.
type picture int

const (
	// pictureOutstanding: a member selected has no result of the
	// generation yet, or one still on its way (applying, waiting, held,
	// not available yet, its copies not labelled with a revision yet
	// under strategy All), or the member is not Ready.
	pictureOutstanding picture = iota
	// pictureConverged: every member selected applied the generation and
	// is available.
	pictureConverged
	// pictureFailed: every member selected has its result of the
	// generation, converged or failed, and one failed.
	pictureFailed
	pictures // how many there are
)

// memberSelects returns whether p selects a member and may reach it,
// false while either is in doubt.
func (r *reconciler) memberSelects(ctx context.Context, p *fleetv1alpha1.Propagation) func(*registry.Cluster) bool {
	reach := r.tenancy.reachOf(ctx, p.Namespace)
	return func(c *registry.Cluster) bool {
		selected, err := selects(p, c.Name, c.Labels)
		if err != nil || !selected || reach.Doubt() != nil {
			return false
		}
		reaches, _ := reach.Reaches(tenancyMember(c, r.fleet))
		return reaches
	}
}

// setReadiness records key's Ready status ("" once it is gone) and sets
// fleet_propagations.
func (r *reconciler) setReadiness(key propagationKey, ready string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready == "" {
		delete(r.readiness, key)
		delete(r.lastStatus, key)
	} else {
		r.readiness[key] = ready
	}
	counts := map[string]int{}
	for _, v := range r.readiness {
		counts[v]++
	}
	r.metrics.setReadiness(counts)
}

// memberResult is where one Propagation stands in one member, as its last
// member reconcile found it.
type memberResult struct {
	result     fleetv1alpha1.MemberResult
	reason     string
	message    string
	drifted    []string
	generation int64
	// available says whether every copy is available.
	available metav1.ConditionStatus
	// since is when result and reason last changed, and confirmed when a
	// member run last found them.
	since, confirmed metav1.Time
	// intent sums up what the run applied (see apply.Run.Converge), and
	// unconvergedSince is since when the member has not converged to it
	// (zero once it has): the progress deadline runs from then.
	intent           string
	unconvergedSince time.Time
	// copies counts the copies left in the member, and kinds are their
	// kinds.
	copies int
	kinds  []schema.GroupVersionKind
	// removing is set when the member reconcile removed copies because
	// none are wanted: the Propagation is gone or deleted, or the member
	// is not selected.
	removing bool
	// failedRuns counts the runs in a row that failed with this result
	// and reason (a removal owed by a Propagation gone fails too), and
	// logged is when the failure was last logged.
	failedRuns int
	logged     time.Time
	// waitRuns counts the runs in a row that waited for a kind.
	waitRuns int
	// revision is the hash of the content the member was given; held is
	// set when it was given none, and draining when its drain removed
	// its copies.
	revision string
	held     bool
	draining bool
	// labelled is the number of the revision the copies were labelled
	// with, 0 when the run applied before a revision held its content
	// (strategy All): its next run labels them (see relabelOwed).
	labelled int64
	// unloaded is the revision the member was given, when the run could
	// not load it: the run failed with it.
	unloaded int64
	// excluded is set when tenancy keeps the Propagation from the member;
	// excludedCopies, while it stays so, once a run found copies there to
	// remove, and excludedTold once that was told (see tellExcluded).
	excluded, excludedCopies, excludedTold bool
}

// revisionNumber is the number of the revision the result is of (see
// revisionOfResult), or the one it failed to load.
func (a memberResult) revisionNumber(revs []fleetv1alpha1.PropagationRevision, assigned int64) int64 {
	if a.unloaded != 0 {
		return a.unloaded
	}
	return revisionOfResult(revs, assigned, a.revision)
}

func (a memberResult) same(b memberResult) bool {
	return a.result == b.result && a.reason == b.reason && a.message == b.message && a.generation == b.generation &&
		a.copies == b.copies && a.removing == b.removing && a.available == b.available && slices.Equal(a.drifted, b.drifted) &&
		a.revision == b.revision && a.labelled == b.labelled && a.unloaded == b.unloaded && a.draining == b.draining &&
		a.excluded == b.excluded && a.excludedCopies == b.excludedCopies
}

// converged reports whether every copy is applied and Available.
func (a memberResult) converged() bool {
	return (a.result == fleetv1alpha1.ResultApplied || a.result == fleetv1alpha1.ResultDrifted) && a.available == metav1.ConditionTrue
}

// relabelOwed returns, for a member that converged under strategy All
// with copies no revision's number labels (see unlabelled), the number of
// p's newest revision when that revision holds the content the member
// applied: the member's next run writes the number into its copies, so
// it still owes a write and is not counted converged. 0 if it owes none:
// a revision the hub refused is written into no copy.
func (a memberResult) relabelOwed(p *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision) int64 {
	if !a.converged() || !a.unlabelled(p) || len(revs) == 0 {
		return 0
	}
	if newest := revs[len(revs)-1]; newest.Labels[fleetv1alpha1.RevisionHashLabel] == a.revision {
		return newest.Revision
	}
	return 0
}

// unlabelled reports whether a member's run under strategy All applied
// before a revision held its content: its copies carry no revision
// number until a later run labels them (see relabelOwed).
func (a memberResult) unlabelled(p *fleetv1alpha1.Propagation) bool {
	return allAtOnce(&p.Spec) && a.revision != "" && a.labelled == 0
}

// results holds every member result of every Propagation, in memory: a
// restarted manager learns them again as its members reconcile.
type results struct {
	mu     sync.Mutex
	byProp map[propagationKey]map[string]memberResult
}

func newResults() *results { return &results{byProp: map[propagationKey]map[string]memberResult{}} }

// set records member's result for key, keeping since and logged while
// the result and reason stay, and adding up failedRuns then. It
// returns the result replaced (zero if none) and the one recorded: the
// two are not same when anything changed.
func (rs *results) set(key propagationKey, member string, r memberResult) (old, now memberResult) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	m := rs.byProp[key]
	if m == nil {
		m = map[string]memberResult{}
		rs.byProp[key] = m
	}
	old = m[member]
	if old.result == r.result && old.reason == r.reason && old.revision == r.revision {
		r.since, r.logged = old.since, old.logged
		if r.failedRuns > 0 {
			r.failedRuns += old.failedRuns
		}
	}
	if r.excluded && old.excluded {
		r.excludedCopies, r.excludedTold = r.excludedCopies || old.excludedCopies, old.excludedTold
	}
	m[member] = r
	return old, r
}

// logFailure reports whether member's failure for key is to be logged:
// not if it was within every, for the same reason. It records the time.
func (rs *results) logFailure(key propagationKey, member string, every time.Duration) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byProp[key][member]
	if !ok || r.failedRuns == 0 || time.Since(r.logged) < every {
		return false
	}
	r.logged = time.Now()
	rs.byProp[key][member] = r
	return true
}

// retryFailed starts the back-off of member's failures over, from a
// second, and returns the Propagations that failed there.
func (rs *results) retryFailed(member string) []propagationKey {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var keys []propagationKey
	for key, m := range rs.byProp {
		if r, ok := m[member]; ok && r.failedRuns > 0 {
			r.failedRuns = 0
			m[member] = r
			keys = append(keys, key)
		}
	}
	return keys
}

// ofMember returns member's result of each Propagation.
func (rs *results) ofMember(member string) map[propagationKey]memberResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := map[propagationKey]memberResult{}
	for key, m := range rs.byProp {
		if r, ok := m[member]; ok {
			out[key] = r
		}
	}
	return out
}

// picture is what the results of key say of p's generation in members,
// those of them that selected reports p selects (see picture): cheap, it
// reads no content, and it stops at the first member outstanding. A
// member whose run of the generation found it not wanted (not selected,
// excluded, drained) is not waited for.
func (rs *results) picture(key propagationKey, p *fleetv1alpha1.Propagation, members []*registry.Cluster, selected func(*registry.Cluster) bool) picture {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	m := rs.byProp[key]
	failed, counted := false, false
	for _, c := range members {
		res, has := m[c.Name]
		switch {
		case has && res.generation == p.Generation && res.removing:
			continue
		case !has || res.generation != p.Generation:
			if selected(c) {
				return pictureOutstanding
			}
			continue
		case c.State != fleetv1alpha1.MemberStateReady:
			return pictureOutstanding
		case res.result == fleetv1alpha1.ResultFailed:
			failed = true
		case !res.converged() || res.unlabelled(p):
			return pictureOutstanding
		}
		counted = true
	}
	switch {
	case !counted:
		// Nothing happened: no member to say Ready or failed early.
		return pictureOutstanding
	case failed:
		return pictureFailed
	}
	return pictureConverged
}

func (rs *results) get(key propagationKey, member string) (memberResult, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byProp[key][member]
	return r, ok
}

// of returns a copy of every member result of key.
func (rs *results) of(key propagationKey) map[string]memberResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return maps.Clone(rs.byProp[key])
}

func (rs *results) forget(key propagationKey, member string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.byProp[key], member)
	if len(rs.byProp[key]) == 0 {
		delete(rs.byProp, key)
	}
}

// forgetPropagation forgets key's results, except owed deletions, which
// outlive their Propagation until the member carries them out.
func (rs *results) forgetPropagation(key propagationKey) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	maps.DeleteFunc(rs.byProp[key], func(_ string, r memberResult) bool { return r.result != fleetv1alpha1.ResultDeletionOwed })
	if len(rs.byProp[key]) == 0 {
		delete(rs.byProp, key)
	}
}

// toldExcluded marks members as told excluded from key (see tellExcluded).
func (rs *results) toldExcluded(key propagationKey, members []string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, name := range members {
		if r, ok := rs.byProp[key][name]; ok && r.excluded {
			r.excludedTold = true
			rs.byProp[key][name] = r
		}
	}
}

// forgetMember forgets a member that left the fleet.
func (rs *results) forgetMember(member string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for key, m := range rs.byProp {
		delete(m, member)
		if len(m) == 0 {
			delete(rs.byProp, key)
		}
	}
}

// owe marks member as owing the removal of key's copies, of kinds, and
// reports whether it did not already.
func (rs *results) owe(key propagationKey, member, message string, kinds []schema.GroupVersionKind) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	m := rs.byProp[key]
	if m == nil {
		m = map[string]memberResult{}
		rs.byProp[key] = m
	}
	r := m[member]
	if r.result == fleetv1alpha1.ResultDeletionOwed {
		return false
	}
	r.result, r.reason, r.message, r.removing, r.since = fleetv1alpha1.ResultDeletionOwed, fleetv1alpha1.ReasonDeletionOwed, message, true, metav1.Now()
	for _, k := range kinds {
		if !slices.Contains(r.kinds, k) {
			r.kinds = append(r.kinds, k)
		}
	}
	m[member] = r
	return true
}
