package propagation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// releaseTimeout bounds how long a deleted Propagation waits for a Ready
// member to report the removal of its copies; after it, the member owes
// the removal, and the Propagation goes.
const releaseTimeout = 30 * time.Second

// journalCopy is the journal's entry of a copy.
func journalCopy(obj *unstructured.Unstructured) journal.Copy {
	return journal.Copy{
		Object:      journal.Object{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Propagation: obj.GetLabels()[fleetv1alpha1.PropagationLabel],
		Hash:        obj.GetAnnotations()[fleetv1alpha1.ContentHashAnnotation],
	}
}

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
			r.enqueueAfter(fleet.Request{ClusterName: mc.name, NamespacedName: key}, res.RequeueAfter)
		}
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Owed removals carried out", "propagations", len(owed))
		r.countOwed(mc.name)
	}
	return nil
}

// enqueueAfter adds req to the controller's queue after d, once there is
// one.
func (r *reconciler) enqueueAfter(req fleet.Request, d time.Duration) {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.AddAfter(req, d)
	}
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

	// mu guards replays, the member replays under way, and dirty, the
	// members whose mirror may differ from the journal. It is never held
	// across a request.
	mu      sync.Mutex
	replays map[*memberCopies]*replay
	dirty   map[string]bool
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
	return &owedKeeper{hub: hub, forgetAfter: forgetAfter, nudge: make(chan struct{}, 1), replays: map[*memberCopies]*replay{}, dirty: map[string]bool{}}
}

// touch asks keepOwed to bring member's mirror in step with the journal
// soon.
func (k *owedKeeper) touch(member string) {
	k.mu.Lock()
	k.dirty[member] = true
	k.mu.Unlock()
	select {
	case k.nudge <- struct{}{}:
	default:
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

// countOwed tells fleet_propagation_owed_deletions and the registry, and
// so the member's MemberCluster, of the removals member owes, and has the
// hub's mirror follow.
func (r *reconciler) countOwed(member string) {
	r.owed.touch(member)
	owed, err := r.journal.Owed(member)
	if err != nil {
		return
	}
	r.metrics.owedDeletions.WithLabelValues(member).Set(float64(len(owed)))
	var removals []registry.OwedRemoval
	for _, o := range owed {
		removals = append(removals, registry.OwedRemoval{Namespace: o.Namespace, Propagation: o.Propagation, Reason: o.Reason, Since: o.Decided})
	}
	r.m.Registry().ObserveOwed(member, removals)
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
	for _, c := range r.acceptedMembers() {
		res, has := results[c.Name]
		switch {
		case has && res.removing && res.copies == 0 && res.result != fleetv1alpha1.ResultFailed:
		case c.State != member.StateReady:
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
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, fleetv1alpha1.PropagationFinalizer)
	if err := r.hub.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Propagation deleted; members owe the removal of its copies", "members", owed)
		r.recorder.Eventf(p, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDeletionOwed, "Delete",
			"%d members owe the removal of copies, done when each is Ready: %s", len(owed), strings.Join(owed, ", "))
	}
	return reconcile.Result{}, nil
}

// DefaultForgetAfter is how long a member may be gone from the fleet (its
// registration deleted, or of a format not enabled) before the journal
// forgets what it owes: a registration deleted and created again, under
// the same name, within it gets its owed removals.
const DefaultForgetAfter = 7 * 24 * time.Hour

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
	merged, first, full := false, true, true
	for {
		if !merged {
			if err := r.mergeMirror(ctx, id); err != nil {
				r.log.Error(err, "Reading the owed removals mirrored on the hub; trying again", "namespace", r.fleet)
			} else {
				merged = true
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

// The hub's mirror of the owed removals: the journal is one replica's,
// on its own volume, and the next leader may have another (the default
// install runs two, each with an emptyDir). The mirror is mirrorShards
// ConfigMaps of the fleet namespace, with fixed names so that the Role
// can name them (RBAC narrows neither by label nor by prefix): each
// holds, as JSON under mirrorKey, the members whose names hash to it,
// with the removals each owes and when it left, if it did. Only this
// fleet's (FleetIDLabel) is read; nothing of a credential is in it.
const (
	mirrorShards = 16
	mirrorKey    = "members.json"
)

// OwedRemovalsConfigMaps names the ConfigMaps of the fleet namespace that
// mirror the owed removals.
func OwedRemovalsConfigMaps() []string {
	names := make([]string, mirrorShards)
	for i := range names {
		names[i] = mirrorName(i)
	}
	return names
}

func mirrorName(shard int) string { return fmt.Sprintf("owed-removals-%x", shard) }

func shardOf(member string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(member))
	return int(h.Sum32() % mirrorShards)
}

// mirroredMember is what a member owes, in the mirror.
type mirroredMember struct {
	Owed     []mirroredRemoval `json:"owed"`
	Departed *time.Time        `json:"departed,omitempty"`
}

type mirroredRemoval struct {
	Namespace   string                    `json:"namespace"`
	Propagation string                    `json:"propagation"`
	Kinds       []schema.GroupVersionKind `json:"kinds,omitempty"`
	Reason      string                    `json:"reason"`
	Since       time.Time                 `json:"since"`
}

// shard is one mirror ConfigMap as read: obj is nil when there is none;
// members is empty when it is not this fleet's (ours is false), which is
// then written over when there is something to write, and else left.
type shard struct {
	obj     *corev1.ConfigMap
	ours    bool
	members map[string]mirroredMember
}

func (r *reconciler) readShard(ctx context.Context, i int, id string) (shard, error) {
	sh := shard{members: map[string]mirroredMember{}}
	cm := &corev1.ConfigMap{}
	err := r.owed.hub.Get(ctx, types.NamespacedName{Namespace: r.fleet, Name: mirrorName(i)}, cm)
	if apierrors.IsNotFound(err) {
		return sh, nil
	}
	if err != nil {
		return sh, err
	}
	sh.obj = cm
	if cm.Labels[fleetv1alpha1.FleetIDLabel] != id {
		r.log.Info("A ConfigMap of the owed removals' mirror is not this fleet's: it is not read, and is replaced", "name", cm.Name)
		return sh, nil
	}
	sh.ours = true
	if err := json.Unmarshal([]byte(cm.Data[mirrorKey]), &sh.members); err != nil {
		r.log.Info("A ConfigMap of the owed removals' mirror cannot be read: it is replaced", "name", cm.Name, "reason", err.Error())
		sh.members = map[string]mirroredMember{}
	}
	return sh, nil
}

// writeShard makes mirror ConfigMap i hold members: it creates, updates
// or, when members is empty, deletes it, each only if sh, as read, is
// still there.
func (r *reconciler) writeShard(ctx context.Context, i int, id string, sh shard, members map[string]mirroredMember) error {
	data, err := json.Marshal(members)
	if err != nil {
		return err
	}
	labels := map[string]string{fleetv1alpha1.FleetLabel: r.fleet, fleetv1alpha1.FleetIDLabel: id}
	switch {
	case (sh.obj == nil || !sh.ours) && len(members) == 0:
		return nil
	case sh.obj == nil:
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.fleet, Name: mirrorName(i), Labels: labels}, Data: map[string]string{mirrorKey: string(data)}}
		return r.owed.hub.Create(ctx, cm)
	case len(members) == 0:
		rv := sh.obj.ResourceVersion
		return client.IgnoreNotFound(r.owed.hub.Delete(ctx, sh.obj, client.Preconditions{ResourceVersion: &rv}))
	case sh.obj.Data[mirrorKey] == string(data) && maps.Equal(sh.obj.Labels, labels) && len(sh.obj.Data) == 1:
		return nil
	}
	sh.obj.Labels, sh.obj.Data = labels, map[string]string{mirrorKey: string(data)}
	return r.owed.hub.Update(ctx, sh.obj)
}

// updateShards applies edit to the mirror ConfigMaps of members (all
// when members is nil), each read again when another write came first.
func (r *reconciler) updateShards(ctx context.Context, id string, members []string, edit func(i int, mirrored map[string]mirroredMember) error) error {
	shards := map[int]bool{}
	for _, m := range members {
		shards[shardOf(m)] = true
	}
	var errs []error
	for i := range mirrorShards {
		if members != nil && !shards[i] {
			continue
		}
		errs = append(errs, retry.OnError(retry.DefaultBackoff, func(err error) bool {
			return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
		}, func() error {
			sh, err := r.readShard(ctx, i, id)
			if err != nil {
				return err
			}
			mirrored := maps.Clone(sh.members)
			if err := edit(i, mirrored); err != nil {
				return err
			}
			return r.writeShard(ctx, i, id, sh, mirrored)
		}))
	}
	if err := errors.Join(errs...); apierrors.IsForbidden(err) {
		return fmt.Errorf("writing the owed removals' mirror in namespace %s (the manager needs get, update and delete on its ConfigMaps, deploy/role.yaml): %w", r.fleet, err)
	} else if err != nil {
		return fmt.Errorf("writing the owed removals' mirror in namespace %s: %w", r.fleet, err)
	}
	return nil
}

// mirrored is what the journal says member owes, in the mirror's terms;
// nothing (false) when it owes nothing.
func (r *reconciler) mirrored(member string, departed map[string]time.Time) (mirroredMember, bool, error) {
	owed, err := r.journal.Owed(member)
	if err != nil || len(owed) == 0 {
		return mirroredMember{}, false, err
	}
	var m mirroredMember
	for _, o := range owed {
		m.Owed = append(m.Owed, mirroredRemoval{Namespace: o.Namespace, Propagation: o.Propagation, Kinds: o.Kinds, Reason: o.Reason, Since: o.Decided})
	}
	if since, ok := departed[member]; ok {
		m.Departed = &since
	}
	return m, true, nil
}

// mirrorOwed adds to the hub's mirror what the journal says members owe,
// keeping what the mirror held: another leader's, not merged yet, stays.
func (r *reconciler) mirrorOwed(ctx context.Context, members []string) error {
	id, err := r.fleetID(ctx)
	if err != nil {
		return fmt.Errorf("mirroring owed removals: %w", err)
	}
	departed, err := r.journal.Departed()
	if err != nil {
		return err
	}
	return r.updateShards(ctx, id, members, func(_ int, mirrored map[string]mirroredMember) error {
		for _, member := range members {
			m, owes, err := r.mirrored(member, departed)
			if err != nil {
				return err
			}
			if !owes {
				continue
			}
			for _, o := range mirrored[member].Owed {
				if !slices.ContainsFunc(m.Owed, func(j mirroredRemoval) bool { return j.Namespace == o.Namespace && j.Propagation == o.Propagation }) {
					m.Owed = append(m.Owed, o)
				}
			}
			mirrored[member] = m
		}
		return nil
	})
}

// syncMirror makes the hub's mirror ConfigMaps of members (all when nil)
// hold what the journal says each of their members owes, and nothing
// else: the removals members carried out, and the members forgotten, go.
func (r *reconciler) syncMirror(ctx context.Context, id string, members []string) error {
	return r.updateShards(ctx, id, members, func(i int, mirrored map[string]mirroredMember) error {
		journaled, err := r.journal.Members()
		if err != nil {
			return err
		}
		departed, err := r.journal.Departed()
		if err != nil {
			return err
		}
		clear(mirrored)
		for _, member := range journaled {
			if shardOf(member) != i {
				continue
			}
			m, owes, err := r.mirrored(member, departed)
			if err != nil {
				return err
			}
			if owes {
				mirrored[member] = m
			}
		}
		return nil
	})
}

// mergeMirror records in the journal the owed removals mirrored on the
// hub that it lacks, and when their members left, and asks each engaged
// member that owes more than before to carry them out.
func (r *reconciler) mergeMirror(ctx context.Context, id string) error {
	var errs []error
	for i := range mirrorShards {
		sh, err := r.readShard(ctx, i, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for member, m := range sh.members {
			if shardOf(member) != i {
				continue // not where this fleet writes it
			}
			known, err := r.journal.Owed(member)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			var added []propagationKey
			for _, o := range m.Owed {
				key := propagationKey{Namespace: o.Namespace, Name: o.Propagation}
				if !slices.ContainsFunc(known, func(k journal.Owed) bool { return k.Namespace == key.Namespace && k.Propagation == key.Name }) {
					added = append(added, key)
				}
				errs = append(errs, r.journal.Owe(member, journal.Owed{Namespace: o.Namespace, Propagation: o.Propagation, Kinds: o.Kinds, Reason: o.Reason, Decided: o.Since}))
			}
			if m.Departed != nil {
				errs = append(errs, r.journal.Depart(member, *m.Departed))
			}
			if len(added) == 0 {
				continue
			}
			r.log.Info("Owed removals found on the hub, another replica's", "cluster", member, "propagations", len(added))
			r.countOwed(member)
			if mc := r.copies.get(member); mc != nil {
				r.owed.again(mc)
			}
			for _, key := range added {
				r.enqueue(fleet.Request{ClusterName: member, NamespacedName: key})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("merging the owed removals' mirror of namespace %s: %w", r.fleet, err)
	}
	return nil
}
