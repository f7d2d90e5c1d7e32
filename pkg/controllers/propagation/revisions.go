package propagation

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// content is what a Propagation applies, before it is fitted to a member
// (selection and overrides' variables): its resources, its overrides,
// the hub objects they select, Envelopes unpacked, and the problems met
// reading them. A revision holds one; its hash names it.
type content struct {
	Resources []fleetv1alpha1.ResourceSelector `json:"resources"`
	Overrides []fleetv1alpha1.Override         `json:"overrides,omitempty"`
	Objects   []contentObject                  `json:"objects,omitempty"`
	Problems  []contentProblem                 `json:"problems,omitempty"`
	// selected is what the resources select now, read from the hub; it
	// is no part of a revision.
	selected selectedObjects
}

// selectedObjects is what a Propagation's resources select on the hub: how
// many objects, the first MaxListedResources of them, and the first
// entry that selects none.
type selectedObjects struct {
	count  int32
	listed []fleetv1alpha1.ResourceIdentifier
	// empty says which entry selects no hub object (ResourceNotFound or
	// NothingSelected), nil when every one selects some; unread entries
	// (a kind the hub does not serve, say) are judged by their problem.
	empty *kindError
	// emptyEntries counts the entries that select none.
	emptyEntries int
}

// add counts obj, selected, a manifest of the Envelope envelope if set.
func (s *selectedObjects) add(obj *unstructured.Unstructured, envelope string) {
	s.count++
	if len(s.listed) < fleetv1alpha1.MaxListedResources {
		s.listed = append(s.listed, fleetv1alpha1.ResourceIdentifier{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), Envelope: envelope})
	}
}

// nothingFor records that entry i, sel, selects no hub object.
func (s *selectedObjects) nothingFor(i int, sel fleetv1alpha1.ResourceSelector) {
	s.emptyEntries++
	if s.empty != nil {
		return
	}
	if sel.Name != "" {
		s.empty = &kindError{reason: fleetv1alpha1.ReasonResourceNotFound, message: fmt.Sprintf("resources[%d]: %s %s %s is not on the hub", i, sel.APIVersion, sel.Kind, sel.Name)}
		return
	}
	selector := "<invalid>"
	if ls, err := sel.Selector.AsSelector(); err == nil {
		selector = ls.String()
	}
	s.empty = &kindError{reason: fleetv1alpha1.ReasonNothingSelected, message: fmt.Sprintf("resources[%d]: the selector %q matches no %s %s on the hub", i, selector, sel.APIVersion, sel.Kind)}
}

// contentObject is a selected hub object, as its author wrote it (no
// status, no server-set metadata), and the index of the resource that
// selects it.
type contentObject struct {
	Resource int            `json:"resource"`
	Object   map[string]any `json:"object"`
}

// contentProblem is a problem met reading the hub objects, which fails
// every member given the content. Kind, when set, is a kind whose hub
// objects could not be read: none of its copies can be proven unwanted.
type contentProblem struct {
	Reason  string                       `json:"reason"`
	Message string                       `json:"message"`
	Kind    *fleetv1alpha1.KindReference `json:"kind,omitempty"`
}

// content reads what p applies now from the hub.
func (r *reconciler) content(ctx context.Context, p *fleetv1alpha1.Propagation) (*content, error) {
	c := &content{Resources: p.Spec.Resources, Overrides: p.Spec.Overrides}
	for i, sel := range p.Spec.Resources {
		objs, err := r.objects.list(ctx, p.Namespace, sel)
		if kerr, ok := errors.AsType[*kindError](err); ok {
			problem := contentProblem{Reason: kerr.reason, Message: kerr.message}
			if gvk, err := resourceKind(sel); err == nil && kerr.reason != fleetv1alpha1.ReasonRefused {
				problem.Kind = &fleetv1alpha1.KindReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
			}
			c.Problems = append(c.Problems, problem)
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(objs) == 0 {
			c.selected.nothingFor(i, sel)
			continue
		}
		// The hub cache lists in no set order: the same objects must make
		// the same content, and so the same hash.
		slices.SortFunc(objs, func(a, b unstructured.Unstructured) int {
			return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
		})
		for j := range objs {
			o := &objs[j]
			if rule, refused := refusal(o, r.fleet); refused {
				c.Problems = append(c.Problems, contentProblem{Reason: fleetv1alpha1.ReasonRefused, Message: fmt.Sprintf("%s %s is refused: %s", o.GetKind(), o.GetName(), rule)})
				continue
			}
			if !isEnvelope(o.GroupVersionKind()) {
				c.Objects = append(c.Objects, contentObject{Resource: i, Object: authored(o)})
				c.selected.add(o, "")
				continue
			}
			manifests, failures := r.unpack(o)
			for _, f := range failures {
				c.Problems = append(c.Problems, contentProblem{Reason: f.reason, Message: f.message})
			}
			for _, m := range manifests {
				c.Objects = append(c.Objects, contentObject{Resource: i, Object: authored(m)})
				c.selected.add(m, o.GetName())
			}
		}
	}
	return c, nil
}

// authored returns obj as its author wrote it: what a copy is made from,
// without status or the metadata the hub's API server keeps.
func authored(obj *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for k, v := range obj.Object {
		switch k {
		case "metadata", "status":
		default:
			out[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	meta := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if uid := obj.GetUID(); uid != "" {
		meta["uid"] = string(uid)
	}
	if l := obj.GetLabels(); len(l) > 0 {
		meta["labels"] = stringMap(l)
	}
	if a := obj.GetAnnotations(); len(a) > 0 {
		meta["annotations"] = stringMap(a)
	}
	out["metadata"] = meta
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// encode returns c as JSON and its hash.
func (c *content) encode() ([]byte, string, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	return raw, hex.EncodeToString(sum[:8]), nil
}

// firstProblem returns c's first problem, nil if it has none.
func (c *content) firstProblem() *kindError {
	if len(c.Problems) == 0 {
		return nil
	}
	return &kindError{reason: c.Problems[0].Reason, message: c.Problems[0].Message}
}

// kindProblems returns the kinds whose hub objects c could not read.
func (c *content) kindProblems() []schema.GroupVersionKind {
	var kinds []schema.GroupVersionKind
	for _, p := range c.Problems {
		if p.Kind != nil {
			kinds = append(kinds, schema.FromAPIVersionAndKind(p.Kind.APIVersion, p.Kind.Kind))
		}
	}
	return kinds
}

// revisionsNamespace is where p's revisions are: its namespace, or the
// fleet namespace for a ClusterPropagation.
func (r *reconciler) revisionsNamespace(p *fleetv1alpha1.Propagation) string {
	if p.Namespace == "" {
		return r.fleet
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

// revisions lists the revisions this fleet made of p, oldest first: a
// Propagation moved from another fleet keeps that fleet's, which this
// fleet neither gives nor prunes.
func (r *reconciler) revisions(ctx context.Context, p *fleetv1alpha1.Propagation) ([]fleetv1alpha1.PropagationRevision, error) {
	revs, err := r.allRevisions(ctx, p)
	return slices.DeleteFunc(revs, func(rev fleetv1alpha1.PropagationRevision) bool {
		return rev.Labels[fleetv1alpha1.FleetLabel] != r.fleet
	}), err
}

// allRevisions lists p's revisions, of every fleet, oldest first.
func (r *reconciler) allRevisions(ctx context.Context, p *fleetv1alpha1.Propagation) ([]fleetv1alpha1.PropagationRevision, error) {
	var list fleetv1alpha1.PropagationRevisionList
	if err := r.hub.List(ctx, &list, client.InNamespace(r.revisionsNamespace(p)), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p),
	}); err != nil {
		return nil, err
	}
	revs := slices.DeleteFunc(list.Items, func(rev fleetv1alpha1.PropagationRevision) bool {
		return !metav1.IsControlledBy(&rev, hubObject(p))
	})
	slices.SortFunc(revs, func(a, b fleetv1alpha1.PropagationRevision) int { return int(a.Revision - b.Revision) })
	return revs, nil
}

// newestRevisionOf returns the number of this fleet's newest revision of
// p when its content has hash, 0 if there is none or it is of other
// content: under strategy All a member applies the hub's content before
// the hub request makes its revision. It reads the cache without copying
// the revisions' content.
func (r *reconciler) newestRevisionOf(ctx context.Context, p *fleetv1alpha1.Propagation, hash string) (int64, error) {
	var list fleetv1alpha1.PropagationRevisionList
	if err := r.hub.List(ctx, &list, client.InNamespace(r.revisionsNamespace(p)), client.MatchingLabels{
		fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p), fleetv1alpha1.FleetLabel: r.fleet,
	}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	var newest *fleetv1alpha1.PropagationRevision
	for i := range list.Items {
		rev := &list.Items[i]
		if metav1.IsControlledBy(rev, hubObject(p)) && (newest == nil || rev.Revision > newest.Revision) {
			newest = rev
		}
	}
	if newest == nil || newest.Labels[fleetv1alpha1.RevisionHashLabel] != hash {
		return 0, nil
	}
	return newest.Revision, nil
}

// revisionBook remembers the newest revision this manager made of each
// Propagation, by UID: the cache may not show it yet when the next is
// made.
type revisionBook struct {
	mu     sync.Mutex
	newest map[types.UID]int64
}

func (b *revisionBook) made(uid types.UID, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.newest == nil {
		b.newest = map[types.UID]int64{}
	}
	b.newest[uid] = max(b.newest[uid], n)
}

func (b *revisionBook) get(uid types.UID) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.newest[uid]
}

func (b *revisionBook) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.newest, uid)
}

// ensureRevision returns p's revisions with, as the newest, one of
// content c, whose hash is hash: it makes one, numbered one more than the
// newest of any fleet, unless this fleet's newest is of c. Two managers
// that make the same number race on its name, and the loser reads again.
func (r *reconciler) ensureRevision(ctx context.Context, p *fleetv1alpha1.Propagation, raw []byte, hash string) ([]fleetv1alpha1.PropagationRevision, error) {
	all, err := r.allRevisions(ctx, p)
	if err != nil {
		return nil, err
	}
	var newest int64
	if n := len(all); n > 0 {
		newest = all[n-1].Revision
	}
	revs := slices.DeleteFunc(all, func(rev fleetv1alpha1.PropagationRevision) bool {
		return rev.Labels[fleetv1alpha1.FleetLabel] != r.fleet
	})
	if known := max(r.revisionBook.get(p.UID), highestGiven(p)); known > newest {
		// A newer revision was made than the cache shows: it is not there
		// yet, or it was deleted (by hand, as docs/trust.md tells for one
		// that holds a leaked Secret). The hub itself says which.
		deleted, err := r.revisionDeleted(ctx, p, known)
		if err != nil {
			return nil, err
		}
		if !deleted {
			return nil, errRevisionPending
		}
		// Numbers go on past it: a number a member was given never
		// names other content.
		r.revisionBook.forget(p.UID)
		newest = known
	}
	if len(revs) > 0 && revs[len(revs)-1].Labels[fleetv1alpha1.RevisionHashLabel] == hash {
		return revs, nil
	}
	// The owner's kind is the scheme's: an object read from the cache,
	// or made from a ClusterPropagation, carries no TypeMeta.
	owner := hubObject(p)
	gvk, err := apiutil.GVKForObject(owner, r.hub.Scheme())
	if err != nil {
		return nil, err
	}
	rev := &fleetv1alpha1.PropagationRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:      revisionObjectName(p, newest+1),
			Namespace: r.revisionsNamespace(p),
			Labels: map[string]string{
				fleetv1alpha1.PropagationLabel: p.Name, fleetv1alpha1.RevisionOfLabel: revisionOf(p),
				fleetv1alpha1.RevisionHashLabel: hash, fleetv1alpha1.FleetLabel: r.fleet,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
		Revision: newest + 1,
		Content:  runtime.RawExtension{Raw: raw},
	}
	if err := r.hub.Create(ctx, rev); apierrors.IsAlreadyExists(err) {
		return nil, r.releaseName(ctx, p, rev.Name)
	} else if err != nil {
		return nil, fmt.Errorf("making revision %d: %w", rev.Revision, err)
	}
	r.revisionBook.made(p.UID, rev.Revision)
	return append(revs, *rev), nil
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

// revisionDeleted reports whether p's revision number n is gone from the
// hub, read from the hub itself, not the cache.
func (r *reconciler) revisionDeleted(ctx context.Context, p *fleetv1alpha1.Propagation, n int64) (bool, error) {
	var rev fleetv1alpha1.PropagationRevision
	err := r.live.Get(ctx, client.ObjectKey{Namespace: r.revisionsNamespace(p), Name: revisionObjectName(p, n)}, &rev)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading revision %d: %w", n, err)
	}
	return !metav1.IsControlledBy(&rev, hubObject(p)), nil
}

// releaseName deletes revision name if it is of an earlier Propagation of
// p's name, which was deleted (the hub's garbage collector deletes it in
// time, too), and returns errRevisionPending: the name is free, or taken
// by a revision the cache does not show yet.
func (r *reconciler) releaseName(ctx context.Context, p *fleetv1alpha1.Propagation, name string) error {
	var old fleetv1alpha1.PropagationRevision
	if err := r.hub.Get(ctx, client.ObjectKey{Namespace: r.revisionsNamespace(p), Name: name}, &old); err != nil {
		return client.IgnoreNotFound(err)
	}
	owner := metav1.GetControllerOf(&old)
	if owner == nil || owner.UID == p.UID || owner.Name != p.Name || owner.Kind != revisionOf(p) || old.Labels[fleetv1alpha1.FleetLabel] != r.fleet {
		return errRevisionPending
	}
	if err := r.hub.Delete(ctx, &old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting revision %s of a deleted Propagation: %w", name, err)
	}
	return errRevisionPending
}

// refusedByHub reports whether err is the hub's refusal of a revision,
// which it would refuse again: too large for the request (413) or for
// its store (etcd's "request is too large", which the API server passes
// on as an internal error), or invalid.
func refusedByHub(err error) bool {
	return apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsInvalid(err) ||
		apierrors.IsInternalError(err) && strings.Contains(err.Error(), "request is too large")
}

// errRevisionPending says that a revision was made that the cache does
// not show yet: the reconcile is tried again soon.
var errRevisionPending = errors.New("a new revision is not in the cache yet")

// revisionNumber returns the number of the newest of revs whose content
// has hash, 0 if none.
func revisionNumber(revs []fleetv1alpha1.PropagationRevision, hash string) int64 {
	for _, rev := range slices.Backward(revs) {
		if rev.Labels[fleetv1alpha1.RevisionHashLabel] == hash {
			return rev.Revision
		}
	}
	return 0
}

// pruneRevisions deletes p's revisions beyond its history limit, oldest
// first, but none that keep is set for (the revision rolled out, and
// those members are given).
func (r *reconciler) pruneRevisions(ctx context.Context, p *fleetv1alpha1.Propagation, revs []fleetv1alpha1.PropagationRevision, keep map[int64]bool) error {
	limit := fleetv1alpha1.DefaultRevisionHistoryLimit
	if p.Spec.RevisionHistoryLimit != nil {
		limit = int(*p.Spec.RevisionHistoryLimit)
	}
	excess := len(revs) - limit
	for i := 0; i < len(revs) && excess > 0; i++ {
		if keep[revs[i].Revision] {
			continue
		}
		if err := r.hub.Delete(ctx, &revs[i], client.Preconditions{UID: &revs[i].UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting revision %d: %w", revs[i].Revision, err)
		}
		excess--
	}
	return nil
}

// loadRevision reads p's revision number n and its content, checked
// against its hash: a revision changed after it was made is refused. One
// the cache does not show is read from the hub itself: the plan may have
// just made it, and only the hub can say it is missing.
func (r *reconciler) loadRevision(ctx context.Context, p *fleetv1alpha1.Propagation, n int64) (*content, string, error) {
	var rev fleetv1alpha1.PropagationRevision
	key := client.ObjectKey{Namespace: r.revisionsNamespace(p), Name: revisionObjectName(p, n)}
	err := r.hub.Get(ctx, key, &rev)
	if apierrors.IsNotFound(err) {
		err = r.live.Get(ctx, key, &rev)
	}
	if err != nil {
		return nil, "", err
	}
	var c content
	if err := utiljson.Unmarshal(rev.Content.Raw, &c); err != nil {
		return nil, "", &kindError{reason: fleetv1alpha1.ReasonRevisionInvalid, message: fmt.Sprintf("revision %d does not decode", n)}
	}
	_, hash, err := c.encode()
	if err != nil || hash != rev.Labels[fleetv1alpha1.RevisionHashLabel] || !metav1.IsControlledBy(&rev, hubObject(p)) {
		return nil, "", &kindError{reason: fleetv1alpha1.ReasonRevisionInvalid, message: fmt.Sprintf("revision %d does not match its hash: it was changed after it was made", n)}
	}
	if problem := r.foreignObject(p, &c); problem != "" {
		return nil, "", &kindError{reason: fleetv1alpha1.ReasonRevisionInvalid, message: fmt.Sprintf("revision %d %s: it was not made by the manager", n, problem)}
	}
	return &c, hash, nil
}

// foreignObject says which object of c, read from a revision of p, the
// manager would never have put there: one of another namespace than p's,
// or one the refusal rules refuse. The hub's rights on revisions are
// the first guard (see docs/trust.md); this is the second.
func (r *reconciler) foreignObject(p *fleetv1alpha1.Propagation, c *content) string {
	for _, o := range c.Objects {
		obj := &unstructured.Unstructured{Object: o.Object}
		if obj.GetNamespace() != p.Namespace {
			return fmt.Sprintf("holds %s %s of namespace %q", obj.GetKind(), obj.GetName(), obj.GetNamespace())
		}
		if rule, refused := refusal(obj, r.fleet); refused {
			return fmt.Sprintf("holds %s %s, which is refused: %s", obj.GetKind(), obj.GetName(), rule)
		}
	}
	return ""
}
