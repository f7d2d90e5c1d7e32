package propagation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/revisions"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// A failed member run is tried again after a second, then after twice as
// long at each failure for the same reason, up to failureRetry: what
// cures it (a right granted, a namespace or a CRD created in the member)
// is no event the manager sees.
const (
	firstFailureRetry = time.Second
	failureRetry      = time.Minute
)

// forbiddenRetry bounds the back-off of a member run that failed
// Forbidden: a grant (`fleet-manager grants sync`) is used within it,
// rather than after a minute. It costs a failing member a run, and a
// list of each forbidden kind, every few seconds (see forbiddenKindRetry).
const forbiddenRetry = 5 * time.Second

// kindArrivedRetry is when a run that found a kind it waited for served
// (its CRD Established) is tried again, to apply that kind's copies.
const kindArrivedRetry = 100 * time.Millisecond

// failureLogInterval is how often a failure that stays is logged again,
// per Propagation, member and reason.
const failureLogInterval = 10 * time.Minute

// identityWait bounds how long a member request waits for the fleet's
// identity, which the manager reads from the hub as it starts: until it
// has, nothing is written in members, and the request is tried again
// after as long.
const identityWait = 5 * time.Second

func (r *reconciler) Reconcile(ctx context.Context, req fleet.Request) (_ reconcile.Result, retErr error) {
	defer func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			retErr = nil // the manager is stopping or the member left: no failure
		}
	}()
	if req.ClusterName == registry.HubName {
		// Tried again, after a wait or an error, at statusPriority too.
		res, err := r.reconcileStatus(ctx, req.NamespacedName)
		res.Priority = ptr.To(statusPriority)
		return res, err
	}
	res, err := r.reconcileMember(ctx, req.ClusterName, req.NamespacedName)
	return r.quietUnreachable(ctx, req.ClusterName, res, err)
}

// runEnv is what a member run uses of the controller, and nothing else:
// what the run of its copies uses (apply.Env); what the hub says the member
// is given (content, revisions, the member's registration, maintenance
// and tenancy reach); and where the run's result goes (results, then a
// status request, the count of owed removals, a drain's progress). Built
// once, in Add.
type runEnv struct {
	apply.Env
	content   *content.Cache
	revisions *revisions.Store

	cluster     func(member string) (*registry.Cluster, bool)
	maintenance func(ctx context.Context, member string) (fleetv1alpha1.MaintenanceMode, error)
	reachOf     func(ctx context.Context, namespace string) tenancy.NamespaceReach

	results runResults
	// askStatus asks for a status request of the Propagation; countOwed
	// tells the removals member owes; publishDrain tells a drained
	// member's drain.
	askStatus    func(key propagationKey)
	countOwed    func(member string)
	publishDrain func(member string, maintenance fleetv1alpha1.MaintenanceMode)
	// revisionNumber gives the number of the revision of a content the
	// run applies at once, made now if it may be; relabelLater asks the
	// member again if the revision of what it applied unlabelled was made
	// while it ran.
	revisionNumber func(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string) (int64, error)
	relabelLater   func(ctx context.Context, key propagationKey, p *fleetv1alpha1.Propagation, member string, res memberResult)
}

// runResults is where member runs keep their results: each run reads the
// member's last one and sets the new one.
type runResults interface {
	get(key propagationKey, member string) (memberResult, bool)
	set(key propagationKey, member string, r memberResult) (old, now memberResult)
	forget(key propagationKey, member string)
	logFailure(key propagationKey, member string, every time.Duration) bool
}

// forRun is what a member run uses of mc.
func (mc *memberCopies) forRun() apply.Target {
	return apply.Target{Name: mc.name, Client: mc.client, Reader: mc.reader, Discovery: mc.discovery, Metadata: mc.metadata, Cache: mc}
}

// runEnv returns what r's member runs use of it.
func (r *reconciler) runEnv() *runEnv {
	env := &runEnv{
		Env: apply.Env{
			Fleet: r.fleet, Journal: r.journal, Shared: &r.shared, JournalKinds: r.journalKinds, ResourceOf: r.resourceOf,
			KindsOf: kindsOf, HubObject: hubObject,
			ReportedDrift: func(key propagationKey, member string) ([]string, bool) {
				prev, ok := r.results.get(key, member)
				return prev.drifted, ok && prev.result == fleetv1alpha1.ResultDrifted
			},
			Recorder: r.recorder,
		},
		content: r.content, revisions: r.revisions,
		cluster:     func(member string) (*registry.Cluster, bool) { return r.m.Registry().Get(member) },
		maintenance: r.maintenance,
		reachOf: func(ctx context.Context, namespace string) tenancy.NamespaceReach {
			return r.tenancy.reachOf(ctx, namespace)
		},
		results:        r.results,
		askStatus:      func(key propagationKey) { r.queue.add(fleet.Request{NamespacedName: key}) },
		countOwed:      r.countOwed,
		publishDrain:   r.publishDrain,
		revisionNumber: r.revisionNumber,
		relabelLater:   r.relabelLater,
	}
	if r.metrics != nil {
		env.Metrics = apply.Metrics{Applies: r.metrics.applies, DriftDetected: r.metrics.driftDetected, DriftCorrected: r.metrics.driftCorrected, ApplyDuration: r.metrics.applyDuration}
	}
	return env
}

// memberRun is one member reconcile: what the member is given (see
// wanted), the run of its copies (apply.Run), and the result it records.
type memberRun struct {
	*apply.Run
	// env is what it uses of the controller (its apply.Run's env, the part
	// the run of the copies uses).
	env *runEnv
	// p is the Propagation (nil when gone), key its key, and member the
	// member's name.
	p      *fleetv1alpha1.Propagation
	key    propagationKey
	member string
	// excluded is set when tenancy keeps the namespace from the member,
	// and excludedCopies when the member held copies then.
	excluded, excludedCopies bool
	// revision is the hash of the content the member is given. held is
	// set when the member is given none, and says why; draining when its
	// drain removes its copies.
	revision    string
	unloaded    int64 // the revision the member is given, if it could not be loaded
	held        *apply.Failure
	draining    bool
	maintenance fleetv1alpha1.MaintenanceMode
}

// reconcileMember makes the copies of Propagation key in member what it
// wants, once the member's owed removals are carried out.
func (r *reconciler) reconcileMember(ctx context.Context, member string, key propagationKey) (reconcile.Result, error) {
	mc := r.copies.get(member)
	if mc == nil {
		return reconcile.Result{}, nil // not engaged: it is asked again when it is
	}
	id, err := r.fleetID(ctx)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Waiting for the fleet's identity before writing in the member")
		return reconcile.Result{RequeueAfter: identityWait}, nil
	}
	if err := r.replayOwed(ctx, mc, id); err != nil {
		return reconcile.Result{}, err
	}
	if r.tenancy.pending(key.Namespace) {
		return reconcile.Result{RequeueAfter: tenancyWait}, nil
	}
	return r.reconcileCopies(ctx, mc, key, id)
}

// fleetID returns the fleet's identity, waiting at most identityWait for
// the manager to read it.
func (r *reconciler) fleetID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, identityWait)
	defer cancel()
	return r.m.FleetID(ctx)
}

// reconcileCopies makes the copies of Propagation key in mc's member what
// it wants: the selected hub objects applied, each recorded in the
// journal first, and no other copy of this fleet, whose identity is id.
func (r *reconciler) reconcileCopies(ctx context.Context, mc *memberCopies, key propagationKey, id string) (reconcile.Result, error) {
	p, err := r.getPropagation(ctx, key)
	if apierrors.IsNotFound(err) {
		p = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if p != nil && !r.ours(p) {
		// Another fleet's, or not claimed yet: its copies here stay as
		// they are.
		r.results.forget(key, mc.name)
		return reconcile.Result{}, nil
	}
	if p != nil && p.Spec.Suspend && p.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	return r.env.run(ctx, mc, p, key, id)
}

// run makes the copies of Propagation key, p (nil when gone), in mc's
// member what it wants: see reconcileCopies.
func (env *runEnv) run(ctx context.Context, mc *memberCopies, p *fleetv1alpha1.Propagation, key propagationKey, id string) (reconcile.Result, error) {
	run := &memberRun{env: env, p: p, key: key, member: mc.name, Run: apply.NewRun(&env.Env, mc.forRun(), p, key, id)}
	want, removing, err := run.wanted(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if run.held != nil {
		have, err := run.Existing(ctx, nil, false)
		if err != nil {
			return reconcile.Result{}, err
		}
		for k := range have {
			run.Hold(k.GVK)
		}
		return run.record(ctx, false, 0, "")
	}
	found, intent, err := run.Converge(ctx, want, removing)
	if err != nil {
		return reconcile.Result{}, err
	}
	run.excludedCopies = run.excluded && found > 0
	return run.record(ctx, removing, len(want), intent)
}

// wanted returns the hub objects that the member should hold copies of,
// from the content of the revision it is given, and whether none are
// wanted because of the Propagation's removal, the member's deselection
// or its drain. A member given no revision yet, drained and waiting for
// the disruption budget, or of a Propagation whose members selector does
// not parse, is held: run.held says why, and its copies stay as they are.
func (run *memberRun) wanted(ctx context.Context) (map[apply.Key]*unstructured.Unstructured, bool, error) {
	p := run.p
	if p == nil || !p.DeletionTimestamp.IsZero() {
		return nil, true, nil
	}
	if run.heldByAvailableWhen(p.Spec.Resources) {
		return nil, false, nil
	}
	if c, ok := run.env.cluster(run.member); ok {
		run.Labels = c.Labels
	}
	selected, err := selects(p, run.member, run.Labels)
	if kerr, ok := errors.AsType[*kindError](err); ok {
		// A selector that does not parse deselects no one: the member
		// keeps what it holds, and the status says why.
		run.holdFailed(kerr)
		return nil, false, nil
	} else if !selected {
		return nil, true, nil
	}
	if held, excluded := run.enforceTenancy(ctx); held || excluded {
		return nil, excluded, nil
	}
	maintenance, err := run.env.maintenance(ctx, run.member)
	if err != nil {
		return nil, false, err
	}
	run.maintenance = maintenance
	if maintenance == fleetv1alpha1.MaintenanceDrain {
		if p.Status.Rollout != nil && slices.Contains(p.Status.Rollout.Draining, run.member) {
			run.draining = true
			return nil, true, nil
		}
		run.held = &apply.Failure{Reason: fleetv1alpha1.ReasonWaitingForDisruptionBudget, Message: "the member is drained: its copies are removed once " + budgetHolders(p, run.member)}
		return nil, false, nil
	}
	c, err := run.given(ctx, maintenance)
	if err != nil || c == nil {
		return nil, false, err
	}
	if run.heldByAvailableWhen(c.Resources) {
		return nil, false, nil
	}
	for _, problem := range c.Problems {
		run.Fail(apply.Failure{Reason: problem.Reason, Message: problem.Message})
	}
	for _, gvk := range c.KindProblems() {
		run.KeepCopies(gvk)
	}
	want := map[apply.Key]*unstructured.Unstructured{}
	for _, o := range c.Objects {
		if o.Resource < 0 || o.Resource >= len(c.Resources) {
			run.Fail(apply.Failure{Reason: fleetv1alpha1.ReasonRevisionInvalid, Message: "an object of the revision names no resource"})
			continue
		}
		run.Want(want, &unstructured.Unstructured{Object: o.Object}, c.Resources[o.Resource])
	}
	run.Overrides, run.Content = c.Overrides, c
	return want, false, nil
}

// given returns the content of the revision the member is given: what
// the hub holds now, when every member takes a change at once (strategy
// All, not paused, not pinned, the member not cordoned); else the
// revision the rollout gives it, nil (run.held set) if none yet.
func (run *memberRun) given(ctx context.Context, maintenance fleetv1alpha1.MaintenanceMode) (*content.Content, error) {
	p := run.p
	if allAtOnce(&p.Spec) && maintenance == "" {
		c, hash, err := run.env.content.Get(ctx, p)
		if err != nil {
			return nil, err
		}
		run.revision = hash
		run.Number, err = run.env.revisionNumber(ctx, p, c, hash)
		return c, err
	}
	n := assignedRevision(p, run.member)
	switch {
	case n == 0 && maintenance != "":
		run.held = &apply.Failure{Reason: fleetv1alpha1.ReasonCordoned, Message: "the member is cordoned: it takes no new Propagation"}
		return nil, nil
	case n == 0:
		run.held = &apply.Failure{Reason: fleetv1alpha1.ReasonWaitingForRollout, Message: "the rollout has not given the member a revision yet"}
		return nil, nil
	}
	c, hash, err := run.env.revisions.Load(ctx, p, n)
	if cerr, ok := errors.AsType[*content.Error](err); ok {
		run.Fail(apply.Failure{Reason: cerr.Reason, Message: cerr.Message})
		run.held, run.unloaded = &apply.Failure{Reason: cerr.Reason, Message: cerr.Message}, n
		return nil, nil
	} else if apierrors.IsNotFound(err) {
		run.held, run.unloaded = &apply.Failure{Reason: fleetv1alpha1.ReasonRevisionInvalid, Message: fmt.Sprintf("revision %d is not on the hub", n)}, n
		run.Fail(*run.held)
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	run.revision, run.Number = hash, n
	return c, nil
}

// allAtOnce reports whether spec gives every member a change as soon as
// the hub holds it: strategy All, not paused, not pinned.
func allAtOnce(spec *fleetv1alpha1.PropagationSpec) bool {
	return spec.Strategy.Type != fleetv1alpha1.RolloutProgressive && !spec.Paused && spec.Revision == nil
}

// assignedRevision is the revision p's rollout gives member, 0 if none.
func assignedRevision(p *fleetv1alpha1.Propagation, member string) int64 {
	if p.Status.Rollout == nil {
		return 0
	}
	for _, g := range p.Status.Rollout.Members {
		if slices.Contains(g.Names, member) {
			return g.Revision
		}
	}
	return 0
}

// record stores the run's result, asks for a status write when it
// changed, tells a failure or a recovery (see tell), retries a failure,
// or a kind the member does not serve yet, with back-off (see
// retryAfter), and fails a member not Available within the progress
// deadline (see deadline). intent sums up what the run applies.
func (run *memberRun) record(ctx context.Context, removing bool, wanted int, intent string) (reconcile.Result, error) {
	gen := int64(0)
	if run.p != nil {
		gen = run.p.Generation
	}
	now := metav1.Now()
	res := memberResult{
		result: fleetv1alpha1.ResultApplied, reason: fleetv1alpha1.ReasonApplied, available: metav1.ConditionTrue,
		generation: gen, since: now, confirmed: now, intent: intent, copies: run.Copies, kinds: run.Kinds, removing: removing,
		revision: run.revision, labelled: run.Number, unloaded: run.unloaded, draining: run.draining,
		excluded: run.excluded, excludedCopies: run.excludedCopies,
	}
	switch {
	case len(run.Failures) > 0:
		f := run.Failures[0]
		res.result, res.reason, res.message, res.failedRuns, res.available = fleetv1alpha1.ResultFailed, f.Reason, f.Message, 1, metav1.ConditionFalse
		if n := len(run.Failures); n > 1 {
			res.message = fmt.Sprintf("%s (and %d more)", f.Message, n-1)
		}
	case run.held != nil:
		res.result, res.reason, res.message, res.available, res.held = fleetv1alpha1.ResultPending, run.held.Reason, run.held.Message, metav1.ConditionUnknown, true
	case run.Waiting != nil:
		res.result, res.reason, res.message, res.available = fleetv1alpha1.ResultPending, run.Waiting.Reason, run.Waiting.Message, metav1.ConditionFalse
	case len(run.Drifted) > 0:
		res.result, res.reason, res.drifted = fleetv1alpha1.ResultDrifted, fleetv1alpha1.ReasonDrifted, run.Drifted
		res.message = "copies were changed in the member: " + strings.Join(run.Drifted, "; ")
		if len(run.Unavailable) > 0 {
			res.available = metav1.ConditionFalse
		}
	case len(run.Unavailable) > 0:
		res.reason, res.message, res.available = fleetv1alpha1.ReasonNotAvailable, run.Unavailable[0], metav1.ConditionFalse
		if n := len(run.Unavailable); n > 1 {
			res.message = fmt.Sprintf("%s (and %d more)", res.message, n-1)
		}
	case run.NotTracked > 0:
		res.message = fmt.Sprintf("%d objects applied and available (%d of kinds whose availability is not tracked)", wanted, run.NotTracked)
	default:
		res.message = fmt.Sprintf("%d objects applied and available", wanted)
	}
	res.message = words.Truncate(res.message, fleetv1alpha1.MaxMemberMessageLength)
	if len(res.drifted) > fleetv1alpha1.MaxDriftedFields {
		res.drifted = res.drifted[:fleetv1alpha1.MaxDriftedFields]
	}
	if removing && run.Copies == 0 && len(run.Failures) == 0 {
		if run.p == nil {
			run.env.results.forget(run.key, run.member)
			run.env.countOwed(run.member)
			return reconcile.Result{}, nil
		}
	}
	if run.p == nil {
		// Gone, with copies left: they stay owed.
		res.result, res.reason = fleetv1alpha1.ResultDeletionOwed, fleetv1alpha1.ReasonDeletionOwed
	}
	prev, _ := run.env.results.get(run.key, run.member)
	run.tellOrphaned(&res, prev)
	left := run.deadline(&res, prev)
	if res.reason == fleetv1alpha1.ReasonWaitingForKind {
		res.waitRuns = 1
		if prev.reason == res.reason {
			res.waitRuns += prev.waitRuns
		}
	}
	old, recorded := run.env.results.set(run.key, run.member, res)
	run.env.relabelLater(ctx, run.key, run.p, run.member, recorded)
	if !old.same(recorded) {
		run.env.countOwed(run.member)
		run.env.askStatus(run.key)
	}
	if run.maintenance == fleetv1alpha1.MaintenanceDrain {
		run.env.publishDrain(run.member, run.maintenance)
	}
	run.tell(ctx, old, recorded)
	var after []time.Duration
	if recorded.failedRuns > 0 {
		retry := retryAfter(recorded.failedRuns)
		if recorded.reason == fleetv1alpha1.ReasonForbidden {
			retry = min(retry, forbiddenRetry)
		}
		after = append(after, retry)
	}
	if recorded.waitRuns > 0 {
		after = append(after, retryAfter(recorded.waitRuns))
	}
	if left > 0 {
		after = append(after, left)
	}
	if run.KindArrived {
		after = append(after, kindArrivedRetry)
	}
	if len(run.Deleting) > 0 {
		after = append(after, deletingRetry)
	}
	if run.Recheck > 0 {
		after = append(after, run.Recheck)
	}
	if len(after) == 0 {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: slices.Min(after)}, nil
}

// unconvergedSince is since when p's status says member has not
// converged to p's generation: its entry's last transition, or, for one
// that missed the deadline, that long before it.
func unconvergedSince(p *fleetv1alpha1.Propagation, member string) (time.Time, bool) {
	entries := slices.Clone(p.Status.Members)
	for _, s := range p.Status.Shards {
		entries = append(entries, s.Members...)
	}
	i := slices.IndexFunc(entries, func(e fleetv1alpha1.MemberPropagationStatus) bool { return e.Name == member })
	if i < 0 {
		return time.Time{}, false
	}
	e := entries[i]
	if e.ObservedGeneration != p.Generation || e.Available == metav1.ConditionTrue || e.LastTransitionTime.IsZero() {
		return time.Time{}, false
	}
	if e.Reason == fleetv1alpha1.ReasonProgressDeadlineExceeded && p.Spec.ProgressDeadlineSeconds != nil {
		return e.LastTransitionTime.Add(-time.Duration(*p.Spec.ProgressDeadlineSeconds) * time.Second), true
	}
	return e.LastTransitionTime.Time, true
}

// deadline keeps, in res, since when the member has not converged (every
// copy applied and Available) to the intent it was last given, from its
// previous result prev, and turns res into a failure once that outlasts
// spec.progressDeadlineSeconds. It returns how long is left before it
// does, 0 if no deadline runs.
func (run *memberRun) deadline(res *memberResult, prev memberResult) time.Duration {
	if res.converged() || res.removing || res.held || run.p == nil {
		return 0
	}
	res.unconvergedSince = res.confirmed.Time
	switch {
	case prev.intent == res.intent && !prev.unconvergedSince.IsZero():
		res.unconvergedSince = prev.unconvergedSince
	case prev.intent == "":
		// Nothing in memory, as after a restart: the status says since
		// when the member has not converged.
		if since, ok := unconvergedSince(run.p, run.member); ok {
			res.unconvergedSince = since
		}
	}
	if run.p.Spec.ProgressDeadlineSeconds == nil || (res.result == fleetv1alpha1.ResultFailed && res.reason != fleetv1alpha1.ReasonProgressDeadlineExceeded) {
		return 0
	}
	limit := time.Duration(*run.p.Spec.ProgressDeadlineSeconds) * time.Second
	if left := limit - res.confirmed.Sub(res.unconvergedSince); left > 0 {
		return left
	}
	res.message = words.Truncate(fmt.Sprintf("not Available within %s: %s", limit, res.message), fleetv1alpha1.MaxMemberMessageLength)
	res.result, res.reason, res.failedRuns, res.available = fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonProgressDeadlineExceeded, 1, metav1.ConditionFalse
	return 0
}

// retryAfter is when a member run that failed runs times in a row for
// the same reason is tried again: after a second, doubled at each
// failure, up to failureRetry.
func retryAfter(runs int) time.Duration {
	after := firstFailureRetry
	for i := 1; i < runs && after < failureRetry; i++ {
		after *= 2
	}
	return min(after, failureRetry)
}

// tell tells a failure (now) of another reason than the last result
// (old) as a Warning Event on the Propagation, and the first run that
// applies again as a Normal one; each names the member, and relates to its
// MemberCluster. A failure is logged too, at most once per
// failureLogInterval while its reason stays. What is told is the
// result's message: the manager's words, never the member's.
func (run *memberRun) tell(ctx context.Context, old, now memberResult) {
	member := run.member
	log := logf.FromContext(ctx)
	failed := now.result == fleetv1alpha1.ResultFailed
	recovered := old.result == fleetv1alpha1.ResultFailed && now.result == fleetv1alpha1.ResultApplied
	switch {
	case now.failedRuns > 0 && run.env.results.logFailure(run.key, member, failureLogInterval):
		log.Info("Propagation failed in the member", "reason", now.reason, "message", now.message, "failedRuns", now.failedRuns, "retryAfter", retryAfter(now.failedRuns))
	case recovered:
		log.Info("Propagation applied in the member again", "failedReason", old.reason)
	}
	if run.p == nil {
		return // gone: nothing to tell it on
	}
	mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: member}}
	switch {
	case failed && (old.result != now.result || old.reason != now.reason):
		run.env.Recorder.Eventf(hubObject(run.p), mc, corev1.EventTypeWarning, now.reason, "Propagate", "member %s: %s", member, now.message)
	case recovered:
		run.env.Recorder.Eventf(hubObject(run.p), mc, corev1.EventTypeNormal, now.reason, "Propagate", "member %s: %s, after %s", member, now.message, old.reason)
	}
}

// tellOrphaned puts, in res, a run's result that applied everything, what
// was orphaned rather than deleted: by this run, or, for the same
// generation, by an earlier one (prev), so that status keeps saying it.
func (run *memberRun) tellOrphaned(res *memberResult, prev memberResult) {
	if res.result != fleetv1alpha1.ResultApplied || res.reason != fleetv1alpha1.ReasonApplied {
		return
	}
	switch {
	case len(run.Orphaned) > 0:
		res.reason, res.message = run.Orphaned[0].Reason, run.Orphaned[0].Message
		if n := len(run.Orphaned); n > 1 {
			res.message = fmt.Sprintf("%s (and %d more)", res.message, n-1)
		}
		res.message = words.Truncate(res.message, fleetv1alpha1.MaxMemberMessageLength)
	case prev.generation == res.generation && prev.result == fleetv1alpha1.ResultApplied &&
		(prev.reason == fleetv1alpha1.ReasonContainerNotEmpty || prev.reason == fleetv1alpha1.ReasonAdoptedOrphaned):
		res.reason, res.message = prev.reason, prev.message
	}
}

// resourceOf names gvk's resource as the hub's REST mapper does, or by
// its kind.
func (r *reconciler) resourceOf(gvk schema.GroupVersionKind) string {
	mapping, err := r.m.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return gvk.Kind
	}
	return mapping.Resource.GroupResource().String()
}
