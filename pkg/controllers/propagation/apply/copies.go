package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/objmeta"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// Key names one copy in a member.
type Key struct {
	GVK  schema.GroupVersionKind
	Name string
}

func (k Key) String() string { return k.GVK.Kind + " " + k.Name }

// owner is whose a member object is, as a member run sees it.
type owner int

const (
	// notACopy: no fleet's copy (the member's own object, or a namespace
	// this fleet made for copies); adopt may take it.
	notACopy owner = iota
	// ours: this fleet's copy of the run's Propagation.
	ours
	// otherPropagation: this fleet's copy of another Propagation, which
	// is left to it; adopt does not take it.
	otherPropagation
	// otherFleet: another fleet's copy, which is never applied over,
	// deleted or orphaned.
	otherFleet
	// unproven: a copy stamped without an identity (before fleets had
	// one) by a fleet of this namespace's name, which cannot be proven
	// this fleet's: left alone as another fleet's.
	unproven
)

// ownerOf says whose member object obj is to the run of Propagation
// propagation in the fleet of namespace fleet and identity fleetID. A copy
// is the fleet's when it carries its identity. A copy stamped without one
// is the fleet's when proven says so (see Run.proven).
func ownerOf(obj metav1.Object, fleet, fleetID, propagation string, proven func() bool) owner {
	name, isCopy := objmeta.Label(obj, fleetv1alpha1.PropagationLabel)
	id, stamped := objmeta.Label(obj, fleetv1alpha1.FleetIDLabel)
	switch {
	case stamped && id != fleetID:
		return otherFleet
	case stamped && name == propagation:
		return ours
	case !isCopy:
		return notACopy
	case stamped:
		return otherPropagation
	case objmeta.LabelValue(obj, fleetv1alpha1.FleetLabel) != fleet:
		return otherFleet
	case !proven():
		return unproven
	case name == propagation:
		return ours
	}
	return otherPropagation
}

// ownerOf says whose member object obj is; hub is the hub object the run
// applies in its place, or nil.
func (run *Run) ownerOf(obj, hub *unstructured.Unstructured) owner {
	return ownerOf(obj, run.env.Fleet, run.id, run.key.Name, func() bool { return run.proven(obj, hub) })
}

// proven reports whether obj, a copy stamped without an identity by a
// fleet of this namespace's name, is this fleet's: it copies hub, the
// object the run applies in its place, or the journal holds it with its
// content hash, which covers the UID of the object it copies.
func (run *Run) proven(obj, hub *unstructured.Unstructured) bool {
	if uid := objmeta.AnnotationValue(obj, fleetv1alpha1.SourceUIDAnnotation); hub != nil && uid != "" && uid == string(hub.GetUID()) {
		return true
	}
	c := JournalCopy(obj)
	if c.Hash == "" {
		return false
	}
	copies, ok := run.journaled[c.Propagation]
	if !ok {
		var err error
		if copies, err = run.env.Journal.CopiesOf(run.member.Name, c.Namespace, c.Propagation); err != nil {
			return false
		}
		run.journaled[c.Propagation] = copies
	}
	return slices.ContainsFunc(copies, func(j journal.Copy) bool { return j.Object == c.Object && j.Hash == c.Hash })
}

// propagationOf names the Propagation whose copy obj is: a
// ClusterPropagation's, for a cluster-scoped object.
func propagationOf(obj *unstructured.Unstructured) string {
	kind := "Propagation"
	if obj.GetNamespace() == "" {
		kind = "ClusterPropagation"
	}
	return kind + " " + objmeta.LabelValue(obj, fleetv1alpha1.PropagationLabel)
}

// apply makes the member's copy what desired, a copy of hub, says, with no
// request when it already is, and returns the copy as the member holds it
// then, or nil if it holds none. live is this fleet's copy, if the member
// holds one. Another fleet's copy is left alone, and an object that is no
// copy taken over only under adopt.
func (run *Run) apply(ctx context.Context, k Key, desired, live, hub *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if run.skipRemoval[k.GVK] {
		return nil, nil // the member cannot list the kind: existing reported it
	}
	p, name := run.p, run.member.Name
	adopted := false
	if live == nil {
		if !run.namespaced && run.key.Namespace != "" {
			if err := run.ensureNamespace(ctx); err != nil {
				return nil, run.failed(err, "create", namespaceKey(run.key.Namespace))
			}
			run.namespaced = true
		}
		found := run.others[k]
		if found == nil {
			found = &unstructured.Unstructured{}
			found.SetGroupVersionKind(k.GVK)
			err := run.member.Reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: k.Name}, found)
			if apierrors.IsNotFound(err) {
				found = nil
			} else if err != nil {
				return nil, run.failed(err, "get", k)
			}
		}
		if found != nil {
			switch run.ownerOf(found, hub) {
			case ours:
				live = found
			case otherFleet:
				run.Fail(Failure{Reason: fleetv1alpha1.ReasonAlreadyExists, Message: fmt.Sprintf("%s exists in the member and is another fleet's copy: it is left alone (adopt does not take it)", k)})
				return nil, nil
			case unproven:
				run.Fail(Failure{Reason: fleetv1alpha1.ReasonAlreadyExists, Message: fmt.Sprintf("%s exists in the member as a copy without a fleet identity that is not provably this fleet's: it is left alone (adopt does not take it)", k)})
				return nil, nil
			case otherPropagation:
				run.Fail(Failure{Reason: fleetv1alpha1.ReasonAlreadyExists, Message: fmt.Sprintf("%s exists in the member and is %s's copy: it is left alone (adopt does not take another Propagation's copy)", k, propagationOf(found))})
				return nil, nil
			case notACopy:
				switch {
				case !p.Spec.Adopt && objmeta.LabelValue(found, fleetv1alpha1.FleetIDLabel) == run.id:
					run.Fail(Failure{Reason: fleetv1alpha1.ReasonAlreadyExists, Message: fmt.Sprintf("%s exists in the member, made by this fleet for other copies (a Propagation's namespace); set adopt to take it over", k)})
					return nil, nil
				case !p.Spec.Adopt:
					run.Fail(Failure{Reason: fleetv1alpha1.ReasonAlreadyExists, Message: fmt.Sprintf("%s exists in the member and is not a copy (managers: %s); set adopt to take it over", k, managersOf(found))})
					return nil, nil
				}
				if marked, err := run.markAdopted(ctx, k, found); !marked {
					return nil, err // a failure that is not an error is reported
				}
				live, adopted = found, true
			}
		}
	}
	id := CopyID{Namespace: run.key.Namespace, Key: k}
	revision := run.revisionOf(desired, nil)
	if live != nil && !adopted {
		hash := objmeta.AnnotationValue(desired, fleetv1alpha1.ContentHashAnnotation)
		sameHub := objmeta.AnnotationValue(live, fleetv1alpha1.ContentHashAnnotation) == hash
		var changedFields []string
		if sameHub {
			revision = run.revisionOf(desired, live)
			// A copy unchanged since a check found no drift is not
			// compared again, until the check is DriftRecheck old: then
			// the run is asked again.
			if trusted, left := run.member.Cache.Unchanged(id, live, hash); trusted {
				run.recheckIn(left)
			} else if changedFields = Drift(desired, live); len(changedFields) == 0 {
				run.member.Cache.CheckedClean(id, live, hash)
			}
		}
		relabel := revision != "" && objmeta.LabelValue(live, fleetv1alpha1.RevisionLabel) != revision
		switch {
		case sameHub && len(changedFields) == 0 && !relabel:
			run.Hold(k.GVK)
			return live, nil
		case sameHub && p.Spec.Drift == fleetv1alpha1.DriftReport && len(changedFields) > 0:
			run.Hold(k.GVK)
			run.reportDrift(k, changedFields)
			if relabel {
				// Only the label: applying the copy would correct the drift.
				_, err := run.labelRevision(ctx, k, live, revision)
				return live, err
			}
			return live, nil
		case sameHub && len(changedFields) > 0:
			// (A copy that lacks only its label is applied whole too, so
			// that the label stays the applies' own: no drift.)
			run.env.Metrics.DriftDetected.WithLabelValues(name).Inc()
			defer func() { run.env.Metrics.DriftCorrected.WithLabelValues(name).Inc() }()
			logf.FromContext(ctx).Info("Correcting drift", "kind", k.GVK.Kind, "object", k.Name, "fields", changedFields)
		}
	}
	desired = desired.DeepCopy() // it may be shared, and the apply's response replaces it
	if revision != objmeta.LabelValue(desired, fleetv1alpha1.RevisionLabel) {
		labels := desired.GetLabels()
		labels[fleetv1alpha1.RevisionLabel] = revision
		desired.SetLabels(labels)
	}
	if live != nil {
		WithoutClaims(desired, ClaimedByOthers(live))
	}
	start := time.Now()
	run.member.Cache.Write(id)
	err := run.member.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), client.FieldOwner(fleetv1alpha1.FieldManager), client.ForceOwnership)
	run.env.Metrics.ApplyDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		run.member.Cache.Wrote(id, nil)
		run.env.Metrics.Applies.WithLabelValues(name, ApplyFailed).Inc()
		return nil, run.failed(err, "patch", k)
	}
	run.env.Metrics.Applies.WithLabelValues(name, ApplySucceeded).Inc()
	run.member.Cache.Wrote(id, desired)
	run.Hold(k.GVK)
	if _, stale := objmeta.Label(desired, fleetv1alpha1.RevisionLabel); stale && revision == "" {
		// The label labelRevision patched under drift Report is no field of
		// the applies, so an apply without it leaves it: removed, so that a
		// copy never names a revision whose content it does not hold.
		return run.labelRevision(ctx, k, desired, "")
	}
	return desired, nil // the apply's response: the copy as the member holds it now
}

// revisionOf is the revision (RevisionLabel) the member's copy of desired
// carries: the one live carries, if it holds desired's content already (nil
// otherwise): a copy keeps the revision that gave it its content, and an
// unchanged copy is not written again when its member takes a revision. A
// copy without one (applied before its revision was made), or of other
// content, carries the run's revision number, if it has one yet, else the
// label desired carries. Desired copies are shared, and carry no run's
// number: apply labels the copy it writes.
func (run *Run) revisionOf(desired, live *unstructured.Unstructured) string {
	if live != nil {
		if revision, ok := objmeta.Label(live, fleetv1alpha1.RevisionLabel); ok {
			return revision
		}
	}
	if run.Number > 0 {
		return strconv.FormatInt(run.Number, 10)
	}
	return objmeta.LabelValue(desired, fleetv1alpha1.RevisionLabel)
}

// labelRevision sets RevisionLabel of live, copy k, to revision, or
// removes it if revision is "", and nothing else. It returns the copy as
// the member holds it then.
func (run *Run) labelRevision(ctx context.Context, k Key, live *unstructured.Unstructured, revision string) (*unstructured.Unstructured, error) {
	value := "null"
	if revision != "" {
		value = strconv.Quote(revision)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, fleetv1alpha1.RevisionLabel, value)
	patched := nameOf(live)
	id := CopyID{Namespace: run.key.Namespace, Key: k}
	run.member.Cache.Write(id)
	if err := run.member.Client.Patch(ctx, patched, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil {
		run.member.Cache.Wrote(id, nil)
		return nil, run.failed(err, "patch", k)
	}
	run.member.Cache.Wrote(id, patched)
	return patched, nil
}

// markAdopted marks obj, which adopt takes over as copy k, with
// AdoptedAnnotation when the member made it (it carries no identity of
// this fleet), before the copy is applied, so that it is orphaned, never
// deleted, once no longer wanted. It is written under a field manager of
// its own, which the copy's applies leave alone. It reports whether obj
// may be taken over: marked, or made by this fleet.
func (run *Run) markAdopted(ctx context.Context, k Key, obj *unstructured.Unstructured) (bool, error) {
	if objmeta.LabelValue(obj, fleetv1alpha1.FleetIDLabel) == run.id || objmeta.AnnotationValue(obj, fleetv1alpha1.AdoptedAnnotation) == "true" {
		return true, nil
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.GetResourceVersion(), // what was judged not a copy
		"annotations":     map[string]any{fleetv1alpha1.AdoptedAnnotation: "true"},
	}})
	if err != nil {
		return false, err
	}
	if err := run.member.Client.Patch(ctx, nameOf(obj), client.RawPatch(types.MergePatchType, raw), client.FieldOwner(adoptionFieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return false, fmt.Errorf("marking %s adopted: it changed meanwhile: %w", k, err)
		}
		return false, run.failed(err, "patch", k)
	}
	return true, nil
}

// adoptionFieldManager writes AdoptedAnnotation.
const adoptionFieldManager = fleetv1alpha1.FieldManager + "-adoption"

// reportDrift records drifted fields of a copy, and tells of drift that
// was not known before as an Event and in the metric.
func (run *Run) reportDrift(k Key, fields []string) {
	for _, f := range fields {
		run.Drifted = append(run.Drifted, k.String()+": "+f)
	}
	if reported, ok := run.env.ReportedDrift(run.key, run.member.Name); ok && containsAll(reported, run.Drifted) {
		return
	}
	run.env.Metrics.DriftDetected.WithLabelValues(run.member.Name).Inc()
	run.env.Recorder.Eventf(run.env.HubObject(run.p), nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDrifted, "DetectDrift",
		"member %s: %s changed %s", run.member.Name, k, strings.Join(fields, ", "))
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// ensureNamespace creates the Propagation's namespace in the member when
// it is missing, stamped with the fleet's identity. The manager never
// deletes it, and a ClusterPropagation takes it over only under adopt. A manager that may neither read nor create Namespaces, as
// one registered with `register --namespaces`, goes on: its rights in the
// namespace may be all it needs, and the apply tells.
func (run *Run) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{}
	err := run.member.Reader.Get(ctx, types.NamespacedName{Name: run.key.Namespace}, ns)
	if err == nil || (!apierrors.IsNotFound(err) && !apierrors.IsForbidden(err)) {
		return err
	}
	unread := apierrors.IsForbidden(err)
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: run.key.Namespace, Labels: map[string]string{
		fleetv1alpha1.FleetLabel: run.env.Fleet, fleetv1alpha1.FleetIDLabel: run.id,
	}}}
	err = run.member.Client.Create(ctx, ns, client.FieldOwner(fleetv1alpha1.FieldManager))
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case unread && apierrors.IsForbidden(err):
		run.namespaceUnknown = true
		return nil
	}
	return err
}

// remove deletes a copy that is no longer wanted, or, under deletion
// Orphan, lets it go: it keeps the object and drops what made it a copy.
// A copy is orphaned too, whatever the policy, when adopt took it over
// from the member, or when it is a container (see isContainer) that
// holds anything but the Propagation's own copies: run.orphaned says so.
func (run *Run) remove(ctx context.Context, live *unstructured.Unstructured) error {
	policy := fleetv1alpha1.DeletionPolicy(objmeta.AnnotationValue(live, fleetv1alpha1.DeletionAnnotation))
	if run.p != nil {
		policy = DeletionPolicy(run.p)
	}
	k := Key{GVK: live.GroupVersionKind(), Name: live.GetName()}
	if policy == fleetv1alpha1.DeletionOrphan {
		return run.orphan(ctx, live, k)
	}
	reason, why := "", ""
	switch {
	case objmeta.AnnotationValue(live, fleetv1alpha1.AdoptedAnnotation) == "true":
		reason, why = fleetv1alpha1.ReasonAdoptedOrphaned, "adopt took it over from the member, which made it"
	case isContainer(k.GVK.GroupKind()):
		what, err := run.otherContent(ctx, live)
		if err != nil {
			return err
		}
		reason, why = fleetv1alpha1.ReasonContainerNotEmpty, what
	}
	if why != "" {
		failures := len(run.Failures)
		if err := run.orphan(ctx, live, k); err != nil || len(run.Failures) > failures {
			return err
		}
		run.letGo(ctx, k, reason, fmt.Sprintf("%s was orphaned, not deleted: %s", k, why))
		return nil
	}
	uid := live.GetUID()
	if err := run.member.Client.Delete(ctx, live, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		run.Hold(k.GVK)
		return run.failed(err, "delete", k)
	}
	run.member.Cache.Forget(CopyID{Namespace: run.key.Namespace, Key: k})
	logf.FromContext(ctx).V(1).Info("Copy removed", "kind", k.GVK.Kind, "object", k.Name)
	return nil
}

// orphan drops from live, copy k, the labels and annotations that made it
// a copy, and keeps the object.
func (run *Run) orphan(ctx context.Context, live *unstructured.Unstructured, k Key) error {
	patch := map[string]any{"metadata": map[string]any{
		"labels": map[string]any{fleetv1alpha1.FleetLabel: nil, fleetv1alpha1.FleetIDLabel: nil, fleetv1alpha1.PropagationLabel: nil, fleetv1alpha1.RevisionLabel: nil},
		"annotations": map[string]any{
			fleetv1alpha1.SourceAnnotation: nil, fleetv1alpha1.SourceUIDAnnotation: nil, fleetv1alpha1.ContentHashAnnotation: nil,
			fleetv1alpha1.DeletionAnnotation: nil, fleetv1alpha1.AdoptedAnnotation: nil,
		},
	}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := run.member.Client.Patch(ctx, nameOf(live), client.RawPatch(types.MergePatchType, raw)); err != nil && !apierrors.IsNotFound(err) {
		return run.failed(err, "patch", k)
	}
	run.member.Cache.Forget(CopyID{Namespace: run.key.Namespace, Key: k})
	return nil
}

// nameOf returns an object that names obj, and holds nothing else, for
// a request that writes its answer into the object it is given: obj may
// be the copy cache's own (the controller's watched kinds share their objects).
func nameOf(obj *unstructured.Unstructured) *unstructured.Unstructured {
	named := &unstructured.Unstructured{}
	named.SetGroupVersionKind(obj.GroupVersionKind())
	named.SetNamespace(obj.GetNamespace())
	named.SetName(obj.GetName())
	return named
}

// failed turns an error of a request to the member into the member's
// failure, if it is one that retrying soon will not cure, and returns
// the rest. The failure is told in the manager's words: a member's
// message never reaches the hub.
func (run *Run) failed(err error, verb string, k Key) error {
	where := "in namespace " + run.key.Namespace
	if run.key.Namespace == "" {
		where = "(cluster-scoped)"
	}
	switch {
	case meta.IsNoMatchError(err):
		run.waitForKind(k.GVK)
	case apierrors.IsForbidden(err):
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonForbidden, Message: fmt.Sprintf("the member forbids the manager to %s %s (%s) %s%s", verb, run.env.ResourceOf(k.GVK), k, where, GrantHint(run.member.Name))})
	case apierrors.IsNotFound(err) && run.namespaceUnknown:
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonForbidden, Message: fmt.Sprintf("the member has no namespace %s, and forbids the manager to read or create namespaces", run.key.Namespace)})
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("the member rejects %s %s: %s", k, where, DescribeStatus(err))})
	case notInSchema(err):
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("the member rejects %s %s: it sets a field the member's schema of %s does not declare (%s)", k, where, k.GVK.Kind, DescribeStatus(err))})
	default:
		return fmt.Errorf("%s %s %s: %w", verb, k, where, err)
	}
	return nil
}

// notInSchema reports whether err is a member's answer to an apply whose
// object its schema of the kind cannot type (a field it does not declare,
// say): server-side apply answers 500, though no retry cures it.
func notInSchema(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed to create typed patch object")
}

// namespaceKey names namespace as a Key, for failed.
func namespaceKey(namespace string) Key {
	return Key{GVK: corev1.SchemeGroupVersion.WithKind("Namespace"), Name: namespace}
}

// DescribeStatus describes the API status of err, an error of a member,
// by its code and reason, as "422 Invalid": a reason that is not one
// CamelCase word is left out, and the member's message always is.
func DescribeStatus(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "no status"
	}
	s := status.Status()
	if reason := string(s.Reason); camelCase.MatchString(reason) {
		return fmt.Sprintf("%d %s", s.Code, reason)
	}
	return strconv.Itoa(int(s.Code))
}

// camelCase matches a reason of an API status.
var camelCase = regexp.MustCompile(`^[A-Z][A-Za-z]{0,63}$`)

// managersOf names the field managers of obj, for AlreadyExists.
func managersOf(obj *unstructured.Unstructured) string {
	var names []string
	for _, e := range obj.GetManagedFields() {
		if !slices.Contains(names, e.Manager) {
			names = append(names, e.Manager)
		}
	}
	if len(names) == 0 {
		return "none recorded"
	}
	return strings.Join(names, ", ")
}

// sharedInputs is what a copy no override changes is built from, beside
// its hub object: the same in every member of a Propagation.
type sharedInputs struct {
	propagation string
	deletion    fleetv1alpha1.DeletionPolicy
	fleetID     string
}

// sharedContents is how many contents of one Propagation SharedCopies
// keeps copies of: a Progressive rollout gives members two at a time.
const sharedContents = 2

// SharedCopies keeps, per Propagation, the desired copies no override
// changes, of the contents its members were last given, by copy: built
// by the first member run, and read by every other. The zero value is
// ready; its copies are read-only (see Run.desiredCopies).
type SharedCopies struct {
	mu     sync.Mutex
	copies map[types.NamespacedName][]*sharedContent // newest first
}

type sharedContent struct {
	content *content.Content
	inputs  sharedInputs
	copies  map[Key]*unstructured.Unstructured
}

// Get returns Propagation key's shared copy k of content c built from
// inputs, nil if none was kept.
func (s *SharedCopies) Get(key types.NamespacedName, c *content.Content, inputs sharedInputs, k Key) *unstructured.Unstructured {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.copies[key] {
		if sc.content == c && sc.inputs == inputs {
			return sc.copies[k]
		}
	}
	return nil
}

// Put keeps d as Propagation key's shared copy k of content c built from
// inputs, dropping the copies of all but the newest contents.
func (s *SharedCopies) Put(key types.NamespacedName, c *content.Content, inputs sharedInputs, k Key, d *unstructured.Unstructured) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.copies[key]
	i := slices.IndexFunc(kept, func(sc *sharedContent) bool { return sc.content == c && sc.inputs == inputs })
	if i < 0 {
		kept = slices.Insert(kept, 0, &sharedContent{content: c, inputs: inputs, copies: map[Key]*unstructured.Unstructured{}})
		kept, i = kept[:min(len(kept), sharedContents)], 0
	}
	kept[i].copies[k] = d
	if s.copies == nil {
		s.copies = map[types.NamespacedName][]*sharedContent{}
	}
	s.copies[key] = kept
}

// Forget drops Propagation key's copies.
func (s *SharedCopies) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.copies, key)
}

// JournalCopy is the journal's entry of a copy.
func JournalCopy(obj *unstructured.Unstructured) journal.Copy {
	return journal.Copy{
		Object:      journal.Object{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Propagation: objmeta.LabelValue(obj, fleetv1alpha1.PropagationLabel),
		Hash:        objmeta.AnnotationValue(obj, fleetv1alpha1.ContentHashAnnotation),
	}
}

// GrantHint is what a member's Forbidden failure adds to say how to fix
// it: the command that grants a member registered with --permissions=fleet
// what the fleet's Propagations copy (docs/registration.md).
func GrantHint(member string) string {
	return "; to grant it, run: fleet-manager grants sync " + member
}
