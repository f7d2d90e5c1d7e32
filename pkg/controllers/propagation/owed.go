package propagation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// releaseTimeout bounds how long a deleted Propagation waits for a Ready
// member to report the removal of its copies; after it, the member owes
// the removal, and the Propagation goes.
const releaseTimeout = 30 * time.Second

// replayOwed carries out the removals mc's member owes before any other
// request of the member: once after it is engaged, and once after each
// time it is Ready again. One request carries them out, holding no lock
// meanwhile; the member's other requests wait for it, each as long as its
// own context lets it. A removal that failed is asked again when its run
// says.
func (r *reconciler) replayOwed(ctx context.Context, mc *memberCopies, id string) error {
	for {
		mc.replayMu.Lock()
		done := mc.replayed
		mc.replayMu.Unlock()
		if done {
			return nil
		}
		rp, mine := r.owed.claim(mc)
		if !mine {
			select {
			case <-rp.done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		succeeded := false
		defer func() { r.owed.finish(mc, rp, succeeded) }() // also when it panics
		err := r.carryOutOwed(ctx, mc, id)
		succeeded = err == nil
		return err
	}
}

// carryOutOwed runs the member request of every Propagation whose copies
// mc's member owes removing, and asks again for those whose run says so.
func (r *reconciler) carryOutOwed(ctx context.Context, mc *memberCopies, id string) error {
	owed, err := r.journal.Owed(mc.name)
	if err != nil {
		return fmt.Errorf("reading the removals the member owes: %w", err)
	}
	for _, o := range owed {
		key := propagationKey{Namespace: o.Namespace, Name: o.Propagation}
		res, err := r.reconcileCopies(ctx, mc, key, id)
		if err != nil {
			return fmt.Errorf("removing the copies of Propagation %s the member owes: %w", key, err)
		}
		if res.RequeueAfter > 0 {
			r.queue.addAfter(fleet.Request{ClusterName: mc.name, NamespacedName: key}, res.RequeueAfter)
		}
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Owed removals carried out", "propagations", len(owed))
		r.countOwed(mc.name)
	}
	return nil
}

// owedKeeper keeps what members owe beyond one process and one
// registration: the replays under way, the hub's mirror of the owed
// removals, and how long a member that left is remembered.
type owedKeeper struct {
	// hub reads and writes the mirror, uncached.
	hub         client.Client
	forgetAfter time.Duration

	// nudge tells keepOwed that members are dirty.
	nudge chan struct{}

	// telling is held across reading a member's owed removals in the
	// journal and telling them (countOwed): a reading is never told after
	// a later one, so what is told is what the journal held last.
	telling sync.Mutex

	// mu guards replays, the member replays under way, and dirty, the
	// members whose mirror may differ from the journal. It is never held
	// across a request.
	mu      sync.Mutex
	replays map[*memberCopies]*replay
	dirty   map[string]bool
	// unmerged, when replicas share the fleet, are the members this
	// replica took over whose mirrored owed removals its journal has not
	// merged yet: their mirror is not written until it has.
	unmerged map[string]bool
}

// replay is one request carrying out a member's owed removals.
type replay struct {
	// done closes when it ends.
	done chan struct{}
	// again is set when the member was Ready again meanwhile: the replay
	// does not count, the next request replays.
	again bool
}

func newOwedKeeper(hub client.Client, forgetAfter time.Duration) *owedKeeper {
	if forgetAfter <= 0 {
		forgetAfter = DefaultForgetAfter
	}
	return &owedKeeper{hub: hub, forgetAfter: forgetAfter, nudge: make(chan struct{}, 1), replays: map[*memberCopies]*replay{}, dirty: map[string]bool{}, unmerged: map[string]bool{}}
}

// touch asks keepOwed to bring member's mirror in step with the journal
// soon.
func (k *owedKeeper) touch(member string) { k.mark(k.dirty, member) }

// takeOver records that this replica took member over: its mirrored owed
// removals are merged into the journal before its mirror is written.
func (k *owedKeeper) takeOver(member string) { k.mark(k.unmerged, member) }

// mark adds member to set, one of the keeper's, and nudges keepOwed.
func (k *owedKeeper) mark(set map[string]bool, member string) {
	k.mu.Lock()
	set[member] = true
	k.mu.Unlock()
	select {
	case k.nudge <- struct{}{}:
	default:
	}
}

// unmergedMembers returns the members taken over and not merged yet.
func (k *owedKeeper) unmergedMembers() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.unmerged)
}

// merged records that members' mirrored owed removals are merged.
func (k *owedKeeper) merged(members map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for m := range members {
		delete(k.unmerged, m)
	}
}

// takeDirty returns the members touched since it was last called.
func (k *owedKeeper) takeDirty() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	members := slices.Collect(maps.Keys(k.dirty))
	clear(k.dirty)
	return members
}

// claim returns the replay under way for mc, or starts one, which the
// caller then owns (mine).
func (k *owedKeeper) claim(mc *memberCopies) (rp *replay, mine bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rp := k.replays[mc]; rp != nil {
		return rp, false
	}
	rp = &replay{done: make(chan struct{})}
	k.replays[mc] = rp
	return rp, true
}

// finish ends a replay: the member counts as replayed if it succeeded and
// was not Ready again meanwhile.
func (k *owedKeeper) finish(mc *memberCopies, rp *replay, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ok && !rp.again {
		mc.replayMu.Lock()
		mc.replayed = true
		mc.replayMu.Unlock()
	}
	delete(k.replays, mc)
	close(rp.done)
}

// again makes mc's next request carry out its owed removals, also when a
// replay is under way.
func (k *owedKeeper) again(mc *memberCopies) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rp := k.replays[mc]; rp != nil {
		rp.again = true
	}
	mc.replayAgain()
}

// owe records that member owes the removal of p's copies: in the journal
// first, so that nothing on the hub is released before it is on disk.
func (r *reconciler) owe(ctx context.Context, p *fleetv1alpha1.Propagation, member, message string) error {
	key := client.ObjectKeyFromObject(p)
	if err := r.journal.Owe(member, journal.Owed{Namespace: key.Namespace, Propagation: key.Name, Kinds: kindsOf(p), Reason: message}); err != nil {
		return fmt.Errorf("recording in the journal that member %s owes the removal of copies: %w", member, err)
	}
	if r.results.owe(key, member, message, kindsOf(p)) {
		logf.FromContext(ctx).V(1).Info("Removal of copies owed", "member", member)
	}
	r.countOwed(member)
	return nil
}

// maxOwedReason is the API's limit on an OwedRemoval's reason.
const maxOwedReason = 512

// countOwed tells fleet_propagation_owed_deletions and Options.OwedRemovals,
// and so the member's MemberCluster, of the removals member owes, and has
// the hub's mirror follow.
func (r *reconciler) countOwed(member string) {
	r.owed.touch(member)
	r.owed.telling.Lock()
	defer r.owed.telling.Unlock()
	owed, err := r.journal.Owed(member)
	if err != nil {
		return
	}
	r.metrics.owedDeletions.WithLabelValues(member).Set(float64(len(owed)))
	if r.owedRemovals == nil {
		return
	}
	var removals []fleetv1alpha1.OwedRemoval
	for _, o := range owed {
		removals = append(removals, fleetv1alpha1.OwedRemoval{
			Propagation: owedName(o),
			Reason:      words.Truncate(o.Reason, maxOwedReason),
			Since:       metav1.NewTime(o.Decided.UTC().Truncate(time.Second)), // as the API server keeps it
		})
	}
	r.owedRemovals.Publish(member, removals)
}

// release lets a deleted Propagation go once every member has removed its
// copies or owes their removal: a member that is not Ready, that failed to
// remove them, or that did not report within releaseTimeout. members are
// those the registry accepts, which it waits for to have read every
// registration.
func (r *reconciler) release(ctx context.Context, p *fleetv1alpha1.Propagation) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(p, fleetv1alpha1.PropagationFinalizer) {
		return reconcile.Result{}, nil
	}
	select {
	case <-r.m.Registry().Synced():
	default:
		// A member whose registration is not read yet would owe
		// nothing, and its copies would stay.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	key := client.ObjectKeyFromObject(p)
	results := r.results.of(key)
	timedOut := time.Since(p.DeletionTimestamp.Time) > releaseTimeout
	var waiting, owed []string
	for _, c := range r.ownedMembers() {
		res, has := results[c.Name]
		switch {
		case has && res.removing && res.copies == 0 && res.result != fleetv1alpha1.ResultFailed:
		case c.State != fleetv1alpha1.MemberStateReady:
			if err := r.owe(ctx, p, c.Name, fmt.Sprintf("the member is %s: its copies are removed when it is Ready", c.State)); err != nil {
				return reconcile.Result{}, err
			}
			owed = append(owed, c.Name)
		case has && res.removing && res.result == fleetv1alpha1.ResultFailed, timedOut:
			if err := r.owe(ctx, p, c.Name, "removing the copies failed: "+res.message); err != nil {
				return reconcile.Result{}, err
			}
			owed = append(owed, c.Name)
		default:
			waiting = append(waiting, c.Name)
		}
	}
	if len(waiting) > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if len(owed) > 0 {
		// On the hub too before the finalizer goes: another replica,
		// with a journal of its own, may lead next.
		if err := r.mirrorOwed(ctx, owed); err != nil {
			return reconcile.Result{}, err
		}
	}
	if r.m.ReplicaName() != "" {
		released, err := r.releaseShard(ctx, p)
		if err != nil {
			return retryConflict(reconcile.Result{}, client.IgnoreNotFound(err))
		}
		if !released {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
	}
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, fleetv1alpha1.PropagationFinalizer)
	if err := r.hub.Patch(ctx, hubObject(p), client.MergeFromWithOptions(hubObject(before), client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.revisions.Forget(p.UID)
	r.refusedRevisions.forget(p.UID)
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Propagation deleted; members owe the removal of its copies", "members", owed)
		r.recorder.Eventf(hubObject(p), nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDeletionOwed, "Delete",
			"%d members owe the removal of copies, done when each is Ready: %s", len(owed), strings.Join(owed, ", "))
	}
	return reconcile.Result{}, nil
}

// owedName names the Propagation whose copies o removes: namespace/name,
// or a ClusterPropagation's name.
func owedName(o journal.Owed) string {
	if o.Namespace == "" {
		return o.Propagation
	}
	return o.Namespace + "/" + o.Propagation
}

// releaseShard marks this replica's shard of deleted p released, its
// members done with, and reports whether p may go: it is this replica's
// to let go (Manager.OwnsKey), and every live replica has released it.
func (r *reconciler) releaseShard(ctx context.Context, p *fleetv1alpha1.Propagation) (bool, error) {
	if mine := replicaShard(p, r.m.ReplicaName()); !mine.Released {
		mine.Released = true
		before := p.DeepCopy()
		p.Status.Shards = withShard(p.Status.Shards, mine)
		return false, r.hub.Status().Patch(ctx, hubObject(p), client.MergeFromWithOptions(hubObject(before), client.MergeFromWithOptimisticLock{}))
	}
	if !r.m.OwnsKey(summaryKey(p)) {
		return false, nil
	}
	for _, replica := range r.m.Replicas() {
		if !replicaShard(p, replica).Released {
			return false, nil
		}
	}
	return true, nil
}

// keepOwed runs while the hub is engaged: once the registry has read every
// registration, it merges the owed removals mirrored on the hub into the
// journal, then at once and every sweep interval it records when members
// left, forgets those gone longer than forgetAfter, and makes the hub's
// mirror what the journal owes; in between, at most once a second, it
// makes the mirror of the members whose owed removals changed follow.
func (r *reconciler) keepOwed(ctx context.Context) {
	select {
	case <-r.m.Registry().Synced():
	case <-ctx.Done():
		return
	}
	id, err := r.m.FleetID(ctx)
	if err != nil {
		return // the manager stops
	}
	tick := time.NewTicker(min(max(r.owed.forgetAfter/4, 100*time.Millisecond), time.Minute))
	defer tick.Stop()
	shared := r.m.ReplicaName() != ""
	if shared {
		go r.followTakeovers(ctx)
	}
	merged, first, full := shared, true, true
	for {
		if !merged {
			if err := r.mergeMirror(ctx, id, nil); err != nil {
				if ctx.Err() == nil {
					r.log.Error(err, "Reading the owed removals mirrored on the hub; trying again", "namespace", r.fleet)
				}
			} else {
				merged = true
			}
		}
		if unmerged := r.owed.unmergedMembers(); len(unmerged) > 0 {
			if err := r.mergeMirror(ctx, id, unmerged); err != nil && ctx.Err() == nil {
				r.log.Error(err, "Reading the owed removals mirrored on the hub; trying again", "namespace", r.fleet)
			} else {
				r.owed.merged(unmerged)
			}
		}
		if full {
			r.sweepDeparted(first)
			first = false
		}
		// Every member when full (nil), else those touched.
		members := r.owed.takeDirty()
		if full {
			members = nil
		}
		if merged && (full || len(members) > 0) {
			if err := r.syncMirror(ctx, id, members); err != nil && ctx.Err() == nil {
				r.log.Error(err, "Mirroring the owed removals on the hub; trying again", "namespace", r.fleet)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			full = true
		case <-r.owed.nudge:
			full = false
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// followTakeovers records each member this replica takes over, when
// replicas share the fleet, for keepOwed to merge its mirrored owed
// removals: those its previous owner recorded.
func (r *reconciler) followTakeovers(ctx context.Context) {
	r.m.Registry().Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) {
		if e.New != nil && e.New.Owned() && (e.Old == nil || !e.Old.Owned()) {
			r.owed.takeOver(e.Name)
		}
		if handedOff(e) {
			// Its series are its new owner's to write.
			r.metrics.forget(e.Name)
		}
	})
}

// handedOff reports whether e takes a member this replica owned away
// from it, to another replica.
func handedOff(e registry.Event) bool {
	return e.Old != nil && e.Old.Owned() && e.New != nil && !e.New.Owned()
}

// sweepDeparted records when each member of the journal that is not
// registered left (now, unless the journal knows), clears it for those
// registered again, and forgets the members gone longer than
// forgetAfter. The first sweep also counts what registered members owe.
func (r *reconciler) sweepDeparted(first bool) {
	members, err := r.journal.Members()
	if err != nil {
		r.log.Error(err, "Reading the journal's members")
		return
	}
	departed, err := r.journal.Departed()
	if err != nil {
		r.log.Error(err, "Reading when members left in the journal")
		return
	}
	now := time.Now()
	for _, member := range members {
		_, registered := r.m.Registry().Get(member)
		since, gone := departed[member]
		switch {
		case registered && gone:
			err = r.journal.Return(member)
		case registered && first:
			r.countOwed(member)
		case registered:
		case !gone:
			r.log.Info("A member of the journal is not registered: what it owes is kept until it has been gone for a while", "cluster", member, "forgetAfter", r.owed.forgetAfter)
			err = r.journal.Depart(member, now)
		case now.Sub(since) >= r.owed.forgetAfter:
			r.log.Info("Forgetting what the journal holds of a member that left the fleet", "cluster", member, "since", since)
			r.forgetMember(member)
		}
		if err != nil {
			r.log.Error(err, "Recording in the journal whether a member left", "cluster", member)
		}
	}
	for member := range departed {
		if !slices.Contains(members, member) {
			if err := r.journal.Return(member); err != nil {
				r.log.Error(err, "Clearing a departure without entries in the journal", "cluster", member)
			}
		}
	}
}

// replayAgain makes the member's next request carry out its owed removals
// first.
func (mc *memberCopies) replayAgain() {
	mc.replayMu.Lock()
	defer mc.replayMu.Unlock()
	mc.replayed = false
}

// forgetMember forgets what the journal holds of a member that left the
// fleet, and compacts it when that left it well past its live size.
func (r *reconciler) forgetMember(member string) {
	if err := r.journal.ForgetMember(member); err != nil {
		r.log.Error(err, "Forgetting a member that left in the journal", "cluster", member)
		return
	}
	if r.owedRemovals != nil {
		r.owedRemovals.Forget(member)
	}
	if _, err := r.journal.Compact(); err != nil {
		r.log.Error(err, "Compacting the journal")
	}
}
