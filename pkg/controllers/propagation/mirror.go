package propagation

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

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
	// mirrorBudget bounds the JSON one mirror ConfigMap holds, below the
	// 1 MiB the API server takes of a ConfigMap's data.
	mirrorBudget = 960 << 10
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
	members, cut, err := fitMirror(members, mirrorBudget, r.journalHolds)
	if err != nil {
		return err
	}
	r.tellCut(i, cut)
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
// When replicas share the fleet, only the entries of the registered
// members this replica owns, and has merged since it took them over, are
// its to write; the others' are left as they are.
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
		mine := r.mirrorsOf()
		maps.DeleteFunc(mirrored, func(member string, _ mirroredMember) bool { return mine(member) })
		ageDeparted(mirrored, func(member string) bool { _, ok := r.m.Registry().Get(member); return ok }, time.Now(), r.owed.forgetAfter)
		for _, member := range journaled {
			if shardOf(member) != i || !mine(member) {
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

// mirrorsOf returns whether this replica writes a member's entry in the
// mirror: every member, unless replicas share the fleet.
func (r *reconciler) mirrorsOf() func(member string) bool {
	if r.m.ReplicaName() == "" {
		return func(string) bool { return true }
	}
	unmerged := r.owed.unmergedMembers()
	return func(member string) bool {
		c, registered := r.m.Registry().Get(member)
		return registered && c.Owned() && !unmerged[member]
	}
}

// mergeMirror records in the journal the owed removals mirrored on the
// hub that it lacks for members (all when nil), and when they left, and
// asks each engaged member that owes more than before to carry them out.
func (r *reconciler) mergeMirror(ctx context.Context, id string, members map[string]bool) error {
	var errs []error
	for i := range mirrorShards {
		sh, err := r.readShard(ctx, i, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for member, m := range sh.members {
			if shardOf(member) != i || (members != nil && !members[member]) {
				continue // not where this fleet writes it, or not asked for
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
				r.queue.add(fleet.Request{ClusterName: member, NamespacedName: key})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("merging the owed removals' mirror of namespace %s: %w", r.fleet, err)
	}
	return nil
}

// ageDeparted ages the entries of mirrored whose members have no
// registration: each is stamped as gone now, unless it says since when,
// and goes once gone for forgetAfter, as the journal forgets them. A
// member only down is registered and keeps its entry: only one whose
// registration is gone, for whom nobody can carry its removals out, is
// forgotten, and one registered again within forgetAfter keeps them.
func ageDeparted(mirrored map[string]mirroredMember, registered func(member string) bool, now time.Time, forgetAfter time.Duration) {
	for member, m := range mirrored {
		switch {
		case registered(member):
		case m.Departed == nil:
			m.Departed = &now
			mirrored[member] = m
		case now.Sub(*m.Departed) >= forgetAfter:
			delete(mirrored, member)
		}
	}
}

// fitMirror returns members cut to at most budget bytes of JSON, and how
// many removals were cut. It cuts first what the local journal holds
// (held): those stay owed here, are carried out, and are mirrored again
// once there is room; of them, departed members' first, then the
// oldest. What only the mirror holds (another replica's, not merged yet)
// is cut last, the oldest first.
func fitMirror(members map[string]mirroredMember, budget int, held func(member string, o mirroredRemoval) bool) (map[string]mirroredMember, int, error) {
	data, err := json.Marshal(members)
	if err != nil || len(data) <= budget {
		return members, 0, err
	}
	type entry struct {
		member  string
		removal mirroredRemoval
		held    bool
	}
	var entries []entry
	for member, m := range members {
		for _, o := range m.Owed {
			entries = append(entries, entry{member: member, removal: o, held: held(member, o)})
		}
	}
	// The most worth keeping first.
	slices.SortFunc(entries, func(a, b entry) int {
		if a.held != b.held {
			return cmpBool(a.held, b.held)
		}
		if da, db := members[a.member].Departed != nil, members[b.member].Departed != nil; da != db {
			return cmpBool(da, db)
		}
		return cmp.Or(b.removal.Since.Compare(a.removal.Since), strings.Compare(a.member, b.member),
			strings.Compare(a.removal.Namespace, b.removal.Namespace), strings.Compare(a.removal.Propagation, b.removal.Propagation))
	})
	keep := func(n int) map[string]mirroredMember {
		kept := map[string]mirroredMember{}
		for _, e := range entries[:n] {
			m := kept[e.member]
			m.Departed = members[e.member].Departed
			m.Owed = append(m.Owed, e.removal)
			kept[e.member] = m
		}
		return kept
	}
	// The most entries that fit.
	n := sort.Search(len(entries)+1, func(n int) bool {
		data, err := json.Marshal(keep(n))
		return err != nil || len(data) > budget
	}) - 1
	return keep(max(n, 0)), len(entries) - max(n, 0), nil
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// journalHolds reports whether the journal holds member's owed removal o.
func (r *reconciler) journalHolds(member string, o mirroredRemoval) bool {
	owed, err := r.journal.Owed(member)
	return err == nil && slices.ContainsFunc(owed, func(j journal.Owed) bool { return j.Namespace == o.Namespace && j.Propagation == o.Propagation })
}

// tellCut publishes, and logs when it changes, how many owed removals
// mirror ConfigMap i has no room for.
func (r *reconciler) tellCut(i int, cut int) {
	r.metrics.unmirrored.WithLabelValues(mirrorName(i)).Set(float64(cut))
	prev, _ := r.mirrorCut.Swap(i, cut)
	if was, _ := prev.(int); was == cut {
		return
	}
	if cut > 0 {
		r.log.Error(errMirrorFull, "The hub's mirror of the owed removals has no room for some: this replica carries them out, a replica taking over without its journal would not", "name", mirrorName(i), "unmirrored", cut, "budgetBytes", mirrorBudget)
		return
	}
	r.log.Info("The hub's mirror of the owed removals holds them all again", "name", mirrorName(i))
}

var errMirrorFull = errors.New("a ConfigMap of the owed removals' mirror is full")
