package revisions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
)

// Store makes, reads and prunes the PropagationRevisions of this fleet's
// Propagations.
type Store struct {
	// Hub reads (through its cache) and writes the hub.
	Hub client.Client
	// Live reads the hub itself, where its cache may lag.
	Live client.Reader
	// Fleet is the fleet namespace: it labels this fleet's revisions,
	// and holds those of ClusterPropagations.
	Fleet string

	// book remembers the revisions this manager made.
	book book
	// lanes serializes the making of each Propagation's revisions: the
	// member runs that find a change at once make one revision.
	lanes lanes
	// verified remembers what Load made of each revision it read.
	verified verifiedBook
}

// namespace is where p's revisions are: its namespace, or the fleet
// namespace for a ClusterPropagation.
func (s *Store) namespace(p *fleetv1alpha1.Propagation) string {
	if p.Namespace == "" {
		return s.Fleet
	}
	return p.Namespace
}

// revisionObjectName names p's revision number n.
func revisionObjectName(p *fleetv1alpha1.Propagation, n int64) string {
	if p.Namespace == "" {
		return "clusterpropagation-" + p.Name + "-" + strconv.FormatInt(n, 10)
	}
	return p.Name + "-" + strconv.FormatInt(n, 10)
}

// revisionOf is the RevisionOfLabel of p's revisions.
func revisionOf(p *fleetv1alpha1.Propagation) string {
	if p.Namespace == "" {
		return "ClusterPropagation"
	}
	return "Propagation"
}

// List lists the revisions this fleet made of p, oldest first: a
// Propagation moved from another fleet keeps that fleet's, which this
// fleet neither gives nor prunes. They are the cache's own, not copies
// (a revision holds the whole content): no caller may change them.
func (s *Store) List(ctx context.Context, p *fleetv1alpha1.Propagation) ([]fleetv1alpha1.PropagationRevision, error) {
	revs, err := s.all(ctx, p)
	return slices.DeleteFunc(revs, func(rev fleetv1alpha1.PropagationRevision) bool {
		return rev.Labels[fleetv1alpha1.FleetLabel] != s.Fleet
	}), err
}

// all lists p's revisions, of every fleet, oldest first: the cache's
// own (see List).
func (s *Store) all(ctx context.Context, p *fleetv1alpha1.Propagation) ([]fleetv1alpha1.PropagationRevision, error) {
	var list fleetv1alpha1.PropagationRevisionList
	if err := s.Hub.List(ctx, &list, client.InNamespace(s.namespace(p)), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p),
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	revs := slices.DeleteFunc(list.Items, func(rev fleetv1alpha1.PropagationRevision) bool {
		return !metav1.IsControlledBy(&rev, p)
	})
	slices.SortFunc(revs, func(a, b fleetv1alpha1.PropagationRevision) int { return int(a.Revision - b.Revision) })
	s.verified.keepOnly(p.UID, revs)
	return revs, nil
}

// NewestOf returns the number of this fleet's newest revision of
// p when its content has hash, 0 if there is none or it is of other
// content. It reads the cache without copying the revisions' content;
// a revision this manager made that the cache does not show yet counts.
func (s *Store) NewestOf(ctx context.Context, p *fleetv1alpha1.Propagation, hash string) (int64, error) {
	var list fleetv1alpha1.PropagationRevisionList
	if err := s.Hub.List(ctx, &list, client.InNamespace(s.namespace(p)), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p), fleetv1alpha1.FleetLabel: s.Fleet,
	}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	var newest *fleetv1alpha1.PropagationRevision
	for i := range list.Items {
		rev := &list.Items[i]
		if metav1.IsControlledBy(rev, p) && (newest == nil || rev.Revision > newest.Revision) {
			newest = rev
		}
	}
	var n int64
	var newestHash string
	if newest != nil {
		n, newestHash = newest.Revision, newest.Labels[fleetv1alpha1.RevisionHashLabel]
	}
	if made, madeHash := s.book.newest(p.UID); made > n {
		n, newestHash = made, madeHash
	}
	if newestHash != hash {
		return 0, nil
	}
	return n, nil
}

// EnsureNumber returns the number of this fleet's newest revision of p when
// its content is c, whose hash is hash, making it first if the newest
// is of other content (see Ensure): under strategy All a member run
// makes the revision of a change it is the first to see, so that every
// member writes each copy once, labelled with its number. The calls of
// one Propagation are made one at a time: the first makes the revision,
// the others find it, or, if it failed, are given its error without
// asking the hub again. It returns ErrPending when a revision was made
// that the cache does not show yet, not by this manager. It makes none,
// and returns 0, if this manager made one of p less than pace ago: a
// burst of changes takes at most one revision per pace here, and the
// rest of the burst is made by the caller's paced sums (Ensure).
func (s *Store) EnsureNumber(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string, pace time.Duration) (int64, error) {
	ln, unlock := s.lanes.lock(p.UID)
	defer unlock()
	if ln.failedHash == hash {
		return 0, ln.failed
	}
	if n, err := s.NewestOf(ctx, p, hash); err != nil || n > 0 {
		return n, err
	}
	if at := s.book.madeAt(p.UID); !at.IsZero() && time.Since(at) < pace {
		return 0, nil
	}
	revs, err := s.ensure(ctx, p, c, hash)
	if err != nil {
		ln.failedHash, ln.failed = hash, err
		return 0, err
	}
	return revs[len(revs)-1].Revision, nil
}

// lanes holds a lock per Propagation UID, while someone holds or waits
// for it.
type lanes struct {
	mu    sync.Mutex
	lanes map[types.UID]*lane
}

// lane is a Propagation's lock, and the error of the last attempt to
// make a revision, and of which content, that failed while others waited.
type lane struct {
	sync.Mutex
	holders    int
	failedHash string
	failed     error
}

// lock locks the lane of uid, and returns it and its unlock.
func (l *lanes) lock(uid types.UID) (*lane, func()) {
	l.mu.Lock()
	if l.lanes == nil {
		l.lanes = map[types.UID]*lane{}
	}
	ln := l.lanes[uid]
	if ln == nil {
		ln = &lane{}
		l.lanes[uid] = ln
	}
	ln.holders++
	l.mu.Unlock()
	ln.Lock()
	return ln, func() {
		ln.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		if ln.holders--; ln.holders == 0 {
			delete(l.lanes, uid)
		}
	}
}

// book remembers the newest revision this manager made of each
// Propagation, by UID, and the hash of its content: the cache may not
// show it yet when the next is made, or when a member run asks for its
// number; and when it made it.
type book struct {
	mu   sync.Mutex
	made map[types.UID]madeRevision
}

type madeRevision struct {
	number int64
	hash   string
	at     time.Time
}

func (b *book) add(uid types.UID, n int64, hash string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.made == nil {
		b.made = map[types.UID]madeRevision{}
	}
	if n > b.made[uid].number {
		b.made[uid] = madeRevision{number: n, hash: hash, at: time.Now()}
	}
}

// madeAt returns when the newest revision of uid was made here, zero if
// none.
func (b *book) madeAt(uid types.UID) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made[uid].at
}

// newest returns the number and content hash of the newest revision
// made of uid, 0 if none.
func (b *book) newest(uid types.UID) (int64, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.made[uid]
	return m.number, m.hash
}

func (b *book) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.made, uid)
}

// Forget drops what s remembers of the Propagation of uid, which is gone.
func (s *Store) Forget(uid types.UID) {
	s.book.forget(uid)
	s.verified.forget(uid)
}

// Ensure returns p's revisions (the cache's own: see List) with, as the newest, one of
// content c, whose hash is hash: it makes one, numbered one more than the
// newest of any fleet, unless this fleet's newest is of c. Two managers
// that make the same number race on its name, and the loser reads again.
func (s *Store) Ensure(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string) ([]fleetv1alpha1.PropagationRevision, error) {
	_, unlock := s.lanes.lock(p.UID)
	defer unlock()
	return s.ensure(ctx, p, c, hash)
}

// ensure is Ensure, its caller holding p's lane.
func (s *Store) ensure(ctx context.Context, p *fleetv1alpha1.Propagation, c *content.Content, hash string) ([]fleetv1alpha1.PropagationRevision, error) {
	all, err := s.all(ctx, p)
	if err != nil {
		return nil, err
	}
	var newest int64
	if n := len(all); n > 0 {
		newest = all[n-1].Revision
	}
	revs := slices.DeleteFunc(all, func(rev fleetv1alpha1.PropagationRevision) bool {
		return rev.Labels[fleetv1alpha1.FleetLabel] != s.Fleet
	})
	made, _ := s.book.newest(p.UID)
	if known := max(made, highestGiven(p)); known > newest {
		// A newer revision was made than the cache shows: it is not there
		// yet, or it was deleted (by hand, as docs/trust.md tells for one
		// that holds a leaked Secret). The hub itself says which.
		deleted, err := s.deleted(ctx, p, known)
		if err != nil {
			return nil, err
		}
		if !deleted {
			return nil, ErrPending
		}
		// Numbers go on past it: a number a member was given never
		// names other content.
		s.book.forget(p.UID)
		newest = known
	}
	if len(revs) > 0 && revs[len(revs)-1].Labels[fleetv1alpha1.RevisionHashLabel] == hash {
		return revs, nil
	}
	// The owner's kind is the scheme's: an object read from the cache,
	// or made from a ClusterPropagation, carries no TypeMeta.
	raw, _, err := c.Encode()
	if err != nil {
		return nil, err
	}
	owner := ownerOf(p)
	gvk, err := apiutil.GVKForObject(owner, s.Hub.Scheme())
	if err != nil {
		return nil, err
	}
	rev := &fleetv1alpha1.PropagationRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:      revisionObjectName(p, newest+1),
			Namespace: s.namespace(p),
			Labels: map[string]string{
				fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p),
				fleetv1alpha1.RevisionHashLabel: hash, fleetv1alpha1.FleetLabel: s.Fleet,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
		Revision: newest + 1,
		Content:  runtime.RawExtension{Raw: raw},
	}
	if err := s.Hub.Create(ctx, rev); apierrors.IsAlreadyExists(err) {
		return nil, s.releaseName(ctx, p, rev.Name)
	} else if err != nil {
		return nil, fmt.Errorf("making revision %d: %w", rev.Revision, err)
	}
	s.book.add(p.UID, rev.Revision, hash)
	return append(revs, *rev), nil
}

// ownerOf is p as the hub holds it, which owns its revisions: a
// ClusterPropagation when p has no namespace.
func ownerOf(p *fleetv1alpha1.Propagation) client.Object {
	if p.Namespace != "" {
		return p
	}
	return &fleetv1alpha1.ClusterPropagation{ObjectMeta: p.ObjectMeta}
}

// highestGiven is the highest revision number p's status names: the
// newest made, the one rolled out, or one a member is given.
func highestGiven(p *fleetv1alpha1.Propagation) int64 {
	highest := p.Status.Revision
	if ro := p.Status.Rollout; ro != nil {
		highest = max(highest, ro.Revision)
		for _, g := range ro.Members {
			highest = max(highest, g.Revision)
		}
	}
	return highest
}

// deleted reports whether p's revision number n is gone from the
// hub, read from the hub itself, not the cache.
func (s *Store) deleted(ctx context.Context, p *fleetv1alpha1.Propagation, n int64) (bool, error) {
	var rev fleetv1alpha1.PropagationRevision
	err := s.Live.Get(ctx, client.ObjectKey{Namespace: s.namespace(p), Name: revisionObjectName(p, n)}, &rev)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading revision %d: %w", n, err)
	}
	return !metav1.IsControlledBy(&rev, p), nil
}

// releaseName deletes revision name if it is of an earlier Propagation of
// p's name, which was deleted (the hub's garbage collector deletes it in
// time, too), and returns ErrPending: the name is free, or taken
// by a revision the cache does not show yet.
func (s *Store) releaseName(ctx context.Context, p *fleetv1alpha1.Propagation, name string) error {
	var old fleetv1alpha1.PropagationRevision
	if err := s.Hub.Get(ctx, client.ObjectKey{Namespace: s.namespace(p), Name: name}, &old); err != nil {
		return client.IgnoreNotFound(err)
	}
	owner := metav1.GetControllerOf(&old)
	if owner == nil || owner.UID == p.UID || owner.Name != p.Name || owner.Kind != revisionOf(p) || old.Labels[fleetv1alpha1.FleetLabel] != s.Fleet {
		return ErrPending
	}
	if err := s.Hub.Delete(ctx, &old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting revision %s of a deleted Propagation: %w", name, err)
	}
	return ErrPending
}

// RefusedByHub reports whether err is the hub's refusal of a revision,
// which it would refuse again: too large for the request (413) or for
// its store (etcd's "request is too large", which the API server passes
// on as an internal error), invalid, or forbidden (a ResourceQuota used
// up, the manager's RBAC taken away: until an admin acts).
func RefusedByHub(err error) bool {
	return apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) ||
		apierrors.IsInternalError(err) && strings.Contains(err.Error(), "request is too large")
}

// ErrPending says that a revision was made that the cache does
// not show yet: the reconcile is tried again soon.
var ErrPending = errors.New("a new revision is not in the cache yet")

// Number returns the number of the newest of revs whose content
// has hash, 0 if none.
func Number(revs []fleetv1alpha1.PropagationRevision, hash string) int64 {
	for _, rev := range slices.Backward(revs) {
		if rev.Labels[fleetv1alpha1.RevisionHashLabel] == hash {
			return rev.Revision
		}
	}
	return 0
}

// Prune deletes p's revisions beyond its history limit, oldest
// first, but none that keep is set for (the revision rolled out, and
// those members are given).
func (s *Store) Prune(ctx context.Context, p *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision, keep map[int64]bool) error {
	limit := fleetv1alpha1.DefaultRevisionHistoryLimit
	if p.Spec.RevisionHistoryLimit != nil {
		limit = int(*p.Spec.RevisionHistoryLimit)
	}
	excess := len(revs) - limit
	for i := 0; i < len(revs) && excess > 0; i++ {
		if keep[revs[i].Revision] {
			continue
		}
		if err := s.Hub.Delete(ctx, &revs[i], client.Preconditions{UID: &revs[i].UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting revision %d: %w", revs[i].Revision, err)
		}
		excess--
	}
	return nil
}

// Load reads p's revision number n and its content, checked
// against its hash: a revision changed after it was made is refused. One
// the cache does not show is read from the hub itself: the plan may have
// just made it, and only the hub can say it is missing. A revision is
// decoded and checked once per UID and resourceVersion; the content
// returned is shared, and must not be changed.
func (s *Store) Load(ctx context.Context, p *fleetv1alpha1.Propagation, n int64) (*content.Content, string, error) {
	rev, err := s.find(ctx, p, n)
	if err != nil {
		return nil, "", err
	}
	if v, ok := s.verified.get(p.UID, rev); ok {
		return v.content, v.hash, v.err
	}
	c, hash, err := s.verify(p, rev)
	if err == nil || errors.As(err, new(*content.Error)) {
		s.verified.put(p.UID, rev, verifiedRevision{resourceVersion: rev.ResourceVersion, content: c, hash: hash, err: err})
	}
	return c, hash, err
}

// find reads p's revision number n: from the cache, without copying it
// (it must not be changed), else from the hub itself.
func (s *Store) find(ctx context.Context, p *fleetv1alpha1.Propagation, n int64) (*fleetv1alpha1.PropagationRevision, error) {
	key := client.ObjectKey{Namespace: s.namespace(p), Name: revisionObjectName(p, n)}
	var list fleetv1alpha1.PropagationRevisionList
	if err := s.Hub.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p),
	}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == key.Name {
			return &list.Items[i], nil
		}
	}
	// Its labels may have been changed: read it by name.
	var rev fleetv1alpha1.PropagationRevision
	err := s.Hub.Get(ctx, key, &rev)
	if apierrors.IsNotFound(err) {
		err = s.Live.Get(ctx, key, &rev)
	}
	return &rev, err
}

// verify decodes rev, a revision of p, and checks it against its hash,
// its owner and what the manager would put in it.
func (s *Store) verify(p *fleetv1alpha1.Propagation, rev *fleetv1alpha1.PropagationRevision) (*content.Content, string, error) {
	n := rev.Revision
	var c content.Content
	if err := utiljson.Unmarshal(rev.Content.Raw, &c); err != nil {
		return nil, "", &content.Error{Reason: fleetv1alpha1.ReasonRevisionInvalid, Message: fmt.Sprintf("revision %d does not decode", n)}
	}
	_, hash, err := c.Encode()
	if err != nil || hash != rev.Labels[fleetv1alpha1.RevisionHashLabel] || !metav1.IsControlledBy(rev, p) {
		return nil, "", &content.Error{Reason: fleetv1alpha1.ReasonRevisionInvalid, Message: fmt.Sprintf("revision %d does not match its hash: it was changed after it was made", n)}
	}
	if problem := s.foreignObject(p, &c); problem != "" {
		return nil, "", &content.Error{Reason: fleetv1alpha1.ReasonRevisionInvalid, Message: fmt.Sprintf("revision %d %s: it was not made by the manager", n, problem)}
	}
	return &c, hash, nil
}

// verifiedBook remembers, by Propagation UID and revision UID, what Load
// made of each revision it read at which resourceVersion: its content
// and hash, or why it was refused. It holds only revisions the cache
// last listed (see keepOnly), and those Load read since.
type verifiedBook struct {
	mu   sync.Mutex
	revs map[types.UID]map[types.UID]verifiedRevision
}

type verifiedRevision struct {
	resourceVersion string
	content         *content.Content
	hash            string
	err             error
}

func (b *verifiedBook) get(owner types.UID, rev *fleetv1alpha1.PropagationRevision) (verifiedRevision, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.revs[owner][rev.UID]
	return v, ok && v.resourceVersion == rev.ResourceVersion
}

func (b *verifiedBook) put(owner types.UID, rev *fleetv1alpha1.PropagationRevision, v verifiedRevision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.revs == nil {
		b.revs = map[types.UID]map[types.UID]verifiedRevision{}
	}
	if b.revs[owner] == nil {
		b.revs[owner] = map[types.UID]verifiedRevision{}
	}
	b.revs[owner][rev.UID] = v
}

// keepOnly forgets the revisions of owner that are not among revs.
func (b *verifiedBook) keepOnly(owner types.UID, revs []fleetv1alpha1.PropagationRevision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid := range b.revs[owner] {
		if !slices.ContainsFunc(revs, func(rev fleetv1alpha1.PropagationRevision) bool { return rev.UID == uid }) {
			delete(b.revs[owner], uid)
		}
	}
	if len(b.revs[owner]) == 0 {
		delete(b.revs, owner)
	}
}

func (b *verifiedBook) forget(owner types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.revs, owner)
}

// foreignObject says which object of c, read from a revision of p, the
// manager would never have put there: one of another namespace than p's,
// or one the refusal rules refuse. The hub's rights on revisions are
// the first guard (see docs/trust.md); this is the second.
func (s *Store) foreignObject(p *fleetv1alpha1.Propagation, c *content.Content) string {
	for _, o := range c.Objects {
		obj := &unstructured.Unstructured{Object: o.Object}
		if obj.GetNamespace() != p.Namespace {
			return fmt.Sprintf("holds %s %s of namespace %q", obj.GetKind(), obj.GetName(), obj.GetNamespace())
		}
		if rule, refused := content.Refusal(obj, s.Fleet); refused {
			return fmt.Sprintf("holds %s %s, which is refused: %s", obj.GetKind(), obj.GetName(), rule)
		}
	}
	return ""
}
