package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/objmeta"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// Env is what the run of a member's copies (Run) uses of the
// controller: the fleet and its journal, the copies shared by every
// member, the kinds the journal holds copies of, the names of resources,
// the kinds of a Propagation and its hub object, the drift last reported,
// and how it tells (recorder, metrics).
type Env struct {
	Fleet   string
	Journal *journal.Journal
	// Shared keeps the copies built once for every member.
	Shared       *SharedCopies
	JournalKinds func(member string, key *types.NamespacedName) []schema.GroupVersionKind
	ResourceOf   func(gvk schema.GroupVersionKind) string
	// KindsOf lists the kinds a Propagation copies and copied; HubObject
	// is a Propagation as the hub holds it, which its Events regard.
	KindsOf   func(p *fleetv1alpha1.Propagation) []schema.GroupVersionKind
	HubObject func(p *fleetv1alpha1.Propagation) client.Object
	// ReportedDrift is the drift member's last result reported for
	// Propagation key, if that result was Drifted.
	ReportedDrift func(key types.NamespacedName, member string) ([]string, bool)

	Recorder events.EventRecorder
	Metrics  Metrics
}

// Target is what the run of a member's copies uses of the member: its
// name, a client that writes, a reader of its API server itself,
// discovery and metadata to read what a container copy holds, and its
// copy caches.
type Target struct {
	Name      string
	Client    client.Client
	Reader    client.Reader
	Discovery discovery.DiscoveryInterface
	Metadata  metadata.Interface
	Cache     CopyCache
}

// CopyCache is what the run of a member's copies uses of the member's
// copy caches: it lists the copies, and keeps what it checked and wrote
// of each.
type CopyCache interface {
	List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]unstructured.Unstructured, error)
	WatchedIn(namespace string) []schema.GroupVersionKind
	Unchanged(id CopyID, live *unstructured.Unstructured, hash string) (ok bool, left time.Duration)
	CheckedClean(id CopyID, live *unstructured.Unstructured, hash string)
	Write(id CopyID)
	Wrote(id CopyID, obj *unstructured.Unstructured)
	Forget(id CopyID)
	Served(gk schema.GroupKind)
}

// A list of the copy cache fails with a kindProblem when the member
// cannot be asked for the kind: its reason (a kind not found, cluster-
// scoped, forbidden) is the run's failure, its message the manager's
// words.
type kindProblem interface {
	error
	ErrorReason() string
}

// Metrics are the series a member run writes; the first label value
// of each is the member's name.
type Metrics struct {
	Applies, DriftDetected, DriftCorrected interface {
		WithLabelValues(...string) prometheus.Counter
	}
	ApplyDuration interface {
		WithLabelValues(...string) prometheus.Observer
	}
}

// Run is the run of one member's copies of a Propagation: given the
// hub objects wanted there, it tells the fleet's copies apart, applies
// the desired copies step by step, judges them, and removes those no
// longer wanted, through the journal; its fields say what it found.
type Run struct {
	env    *Env
	member Target
	p      *fleetv1alpha1.Propagation // nil when the Propagation is gone
	key    types.NamespacedName
	// id is the fleet's identity.
	id string
	Input
	Report

	// selectedBy is the resource that selects each hub object wanted
	// (see want).
	selectedBy map[Key]fleetv1alpha1.ResourceSelector
	// skipRemoval holds kinds whose hub objects could not be read, or
	// whose copies could not be listed: none of their copies can be
	// proven unwanted.
	skipRemoval map[schema.GroupVersionKind]bool
	// others are the member's copies of the Propagation's name that are
	// not this fleet's.
	others map[Key]*unstructured.Unstructured
	// journaled holds the journal's copies, by Propagation, read to prove
	// copies stamped without an identity this fleet's.
	journaled  map[string][]journal.Copy
	namespaced bool
	// namespaceUnknown is set when the manager may neither read nor create
	// the member's namespace: a copy not found there says it is missing.
	namespaceUnknown bool
}

// NewRun returns the run of member's copies of Propagation key, p
// (nil when gone), in the fleet of identity id.
func NewRun(env *Env, member Target, p *fleetv1alpha1.Propagation, key types.NamespacedName, id string) *Run {
	return &Run{
		env: env, member: member, p: p, key: key, id: id, skipRemoval: map[schema.GroupVersionKind]bool{},
		others: map[Key]*unstructured.Unstructured{}, journaled: map[string][]journal.Copy{},
		selectedBy: map[Key]fleetv1alpha1.ResourceSelector{},
	}
}

// Input is what the controller gives the run of a member's copies,
// beside the hub objects wanted: the member's labels (for overrides),
// the content the member is given and its overrides, the number of its
// revision, and what tenancy lets the member hold.
type Input struct {
	Labels map[string]string
	// Content is the Content the member is given, shared read-only.
	Content   *content.Content
	Overrides []fleetv1alpha1.Override
	// Number is the Number of the revision the member is given, stamped
	// on each copy (RevisionLabel); 0 under strategy All until the
	// revision of the hub's content is made.
	Number int64
	// Reach is what the Propagation's namespace may Reach (see
	// enforceTenancy), and tenant the member as tenancy sees it.
	Reach  *tenancy.NamespaceReach
	Tenant tenancy.Member
}

// Report is what the run of a member's copies found, for the
// controller to record as the member's result (the controller's memberRun.record).
type Report struct {
	// Failures are the run's, after those found deciding what the member
	// is given.
	Failures []Failure
	// Orphaned are the copies Orphaned rather than deleted, and why.
	Orphaned []Failure
	Drifted  []string
	// Unavailable says what copies that are not available wait for, and
	// notTracked counts the copies of kinds without a rule.
	Unavailable []string
	NotTracked  int
	// Waiting is set when copies wait: for a kind the member does not
	// serve yet, or for those of an earlier step to be Available.
	Waiting *Failure
	// KindArrived is set when a kind the run waited for is served now.
	KindArrived bool
	// Deleting names the copies whose deletion the member accepted but
	// which are still there (see gone).
	Deleting []string
	// Recheck is when the first drift check the run trusted expires (see
	// recheckIn).
	Recheck time.Duration
	// Copies counts the Copies the member holds after the run, and kinds
	// are their kinds.
	Copies int
	Kinds  []schema.GroupVersionKind
}

type Failure struct {
	Reason, Message string
}

// Converge makes the member's copies what want, the hub objects wanted
// there, says: the fleet's copies told apart, the desired copies recorded
// in the journal and applied step by step, and the copies no longer
// wanted removed (none are wanted when removing). It returns how many of
// the fleet's copies it found, and what it applies (see intentOf).
func (run *Run) Converge(ctx context.Context, want map[Key]*unstructured.Unstructured, removing bool) (int, string, error) {
	// Copies are told apart before the journal records what is applied
	// now: an old copy may be proven this fleet's by the hash recorded
	// when it was applied.
	have, err := run.Existing(ctx, want, removing)
	if err != nil {
		return 0, "", err
	}
	desired := run.desiredCopies(want)
	recorded := make([]journal.Copy, 0, len(desired))
	for _, d := range desired {
		recorded = append(recorded, JournalCopy(d))
	}
	if err := run.env.Journal.Record(run.member.Name, recorded); err != nil {
		return 0, "", fmt.Errorf("recording copies in the journal: %w", err)
	}
	if err := run.applyInOrder(ctx, desired, have, want); err != nil {
		return 0, "", err
	}
	unwanted := make([]Key, 0, len(have))
	for k := range have {
		if _, ok := want[k]; !ok && !run.skipRemoval[k.GVK] {
			unwanted = append(unwanted, k)
		}
	}
	var removed []journal.Copy
	steps := Order(unwanted, Key.kindAndName, func(k Key) int32 { return RemovalWave(run.p, k.GVK) })
	for _, st := range slices.Backward(steps) {
		for _, k := range st {
			failures := len(run.Failures)
			if err := run.remove(ctx, have[k]); err != nil {
				return 0, "", err
			}
			if len(run.Failures) > failures {
				continue
			}
			// A delete accepted is no copy gone: a finalizer may hold it.
			if gone, err := run.gone(ctx, have[k]); err != nil {
				return 0, "", err
			} else if gone {
				removed = append(removed, JournalCopy(have[k]))
			}
		}
	}
	if err := run.env.Journal.Forget(run.member.Name, removed); err != nil {
		return 0, "", fmt.Errorf("recording removed copies in the journal: %w", err)
	}
	if len(run.Failures) == 0 && len(run.skipRemoval) == 0 && len(run.Deleting) == 0 {
		// Every copy the Propagation does not want here is gone.
		keep := make([]journal.Object, 0, len(desired))
		for _, c := range recorded {
			keep = append(keep, c.Object)
		}
		if err := run.env.Journal.Settle(run.member.Name, run.key.Namespace, run.key.Name, keep); err != nil {
			return 0, "", fmt.Errorf("recording removed copies in the journal: %w", err)
		}
	}
	return len(have), intentOf(recorded), nil
}

// Want adds obj, a hub object sel selects, to Want, unless an object of
// its kind and name is there: the same object selected twice is applied
// once, and another one of that name (an Envelope's manifest) fails.
func (run *Run) Want(want map[Key]*unstructured.Unstructured, obj *unstructured.Unstructured, sel fleetv1alpha1.ResourceSelector) {
	k := Key{GVK: obj.GroupVersionKind(), Name: obj.GetName()}
	first, ok := want[k]
	switch {
	case !ok:
		want[k], run.selectedBy[k] = obj, sel
	case first.GetUID() != obj.GetUID() || objmeta.LabelValue(first, fleetv1alpha1.EnvelopeLabel) != objmeta.LabelValue(obj, fleetv1alpha1.EnvelopeLabel):
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("%s is selected twice, from different sources: the first is applied", k)})
	}
}

// desiredCopies returns the copy the member should hold of each hub
// object wanted, but for the number of the revision it comes from
// (RevisionLabel), which its content hash leaves out: apply labels the
// copy it writes (see revisionOf). A hub object an
// override fails to patch gets none: the run fails, naming the rule, and
// its copy stays as it is. A copy, as overrides make it, of a kind
// tenancy does not allow there gets none either, and is taken out of
// want: the run fails, KindNotAllowed, and a copy made before is removed.
//
// A copy no override changes is the same in every member: it is built
// once per content and shared (see SharedCopies), read-only: apply copies
// it whole before it writes.
func (run *Run) desiredCopies(want map[Key]*unstructured.Unstructured) map[Key]*unstructured.Unstructured {
	desired := make(map[Key]*unstructured.Unstructured, len(want))
	if len(want) == 0 {
		return desired // run.p may be gone
	}
	member := Member{Name: run.member.Name, Labels: run.Labels}
	inputs := sharedInputs{propagation: run.p.Name, deletion: DeletionPolicy(run.p), fleetID: run.id}
	for k, hubObj := range want {
		shared := run.Content != nil && !Overridden(hubObj, run.Overrides, member)
		var d *unstructured.Unstructured
		if shared {
			d = run.env.Shared.Get(run.key, run.Content, inputs, k)
		}
		if d == nil {
			var err error
			if d, err = DesiredCopy(hubObj, run.p, run.Overrides, run.env.Fleet, run.id, member); err != nil {
				run.Fail(Failure{Reason: fleetv1alpha1.ReasonOverrideFailed, Message: err.Error()})
				continue
			}
			if shared {
				run.env.Shared.Put(run.key, run.Content, inputs, k, d)
			}
		}
		if !run.kindAllowed(d) {
			delete(want, k) // a copy made before is no longer wanted
			continue
		}
		desired[k] = d
	}
	return desired
}

// intentOf sums up what a run applies, by the copies' content hashes: a
// member whose intent changed is given a change.
func intentOf(copies []journal.Copy) string {
	hashes := make([]string, 0, len(copies))
	for _, c := range copies {
		hashes = append(hashes, c.Hash)
	}
	slices.Sort(hashes)
	sum := sha256.Sum256([]byte(strings.Join(hashes, ",")))
	return hex.EncodeToString(sum[:8])
}

// Existing returns this fleet's copies of the Propagation in the member,
// of every kind it copies or copied, and keeps the copies of its name
// that are not this fleet's in run.others. want are the hub objects the
// run applies; removing says that none are wanted. A kind the Propagation
// copies that the member does not let the manager list fails the run, and
// so does, when removing, a kind it copied: its copies cannot be proven
// gone, and the removal is owed and tried again. A kind the member lacks
// holds no copies.
func (run *Run) Existing(ctx context.Context, want map[Key]*unstructured.Unstructured, removing bool) (map[Key]*unstructured.Unstructured, error) {
	// The journal knows the kinds of the copies made, and of those owed.
	copied := run.env.JournalKinds(run.member.Name, &run.key)
	if run.p != nil {
		copied = append(copied, run.env.KindsOf(run.p)...)
	}
	kinds := slices.Clone(copied)
	for k := range want {
		kinds = append(kinds, k.GVK) // an Envelope's manifests' too
	}
	if run.p == nil {
		// Its kinds went with it: look in every kind watched there too.
		kinds = append(kinds, run.member.Cache.WatchedIn(run.key.Namespace)...)
	}
	slices.SortFunc(kinds, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	kinds = slices.Compact(kinds)
	have := map[Key]*unstructured.Unstructured{}
	selector := labels.SelectorFromSet(labels.Set{fleetv1alpha1.PropagationLabel: run.key.Name})
	for _, gvk := range kinds {
		objs, err := run.member.Cache.List(ctx, gvk, run.key.Namespace, selector)
		if kerr, ok := errors.AsType[kindProblem](err); ok {
			reason := kerr.ErrorReason()
			if removing && reason == fleetv1alpha1.ReasonKindNotFound {
				continue
			}
			run.skipRemoval[gvk] = true
			inSpec := slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(k Key) bool { return k.GVK == gvk }) ||
				run.p != nil && slices.ContainsFunc(run.p.Spec.Resources, func(s fleetv1alpha1.ResourceSelector) bool { k, _ := content.ResourceKind(s); return k == gvk })
			if inSpec && !removing && reason == fleetv1alpha1.ReasonKindNotFound {
				run.waitForKind(gvk)
				continue
			}
			if inSpec || (removing && slices.Contains(copied, gvk) && reason != fleetv1alpha1.ReasonClusterScoped) {
				run.Fail(Failure{Reason: reason, Message: kerr.Error()})
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for i := range objs {
			k := Key{GVK: gvk, Name: objs[i].GetName()}
			if run.ownerOf(&objs[i], want[k]) == ours {
				have[k] = &objs[i]
			} else {
				run.others[k] = &objs[i]
			}
		}
	}
	return have, nil
}

func (run *Run) Fail(f Failure) { run.Failures = append(run.Failures, f) }

// KeepCopies keeps the member's copies of kind gvk, whose hub objects
// could not be read: none can be proven unwanted.
func (run *Run) KeepCopies(gvk schema.GroupVersionKind) { run.skipRemoval[gvk] = true }

// recheckIn asks for the run again in left, when a drift check it trusted
// expires (see CopyCache.Unchanged), unless it is asked sooner.
func (run *Run) recheckIn(left time.Duration) {
	if run.Recheck == 0 || left < run.Recheck {
		run.Recheck = left
	}
}

// Hold counts a copy of kind gvk that the member holds after the run.
func (run *Run) Hold(gvk schema.GroupVersionKind) {
	run.Copies++
	if !slices.Contains(run.Kinds, gvk) {
		run.Kinds = append(run.Kinds, gvk)
	}
}

// kindAllowed reports whether tenancy lets the member be given copy, as
// overrides made it; the run fails, KindNotAllowed, naming it, when not.
func (run *Run) kindAllowed(copy *unstructured.Unstructured) bool {
	if run.Reach == nil {
		return true
	}
	ok, why := run.Reach.Allows(run.Tenant, copy.GroupVersionKind().GroupKind())
	if !ok {
		run.Fail(Failure{Reason: fleetv1alpha1.ReasonKindNotAllowed, Message: fmt.Sprintf("%s %s is not applied: %s", copy.GetKind(), copy.GetName(), why)})
	}
	return ok
}

// ReasonWaitingForDeletion is the reason of a member run whose copy the
// member accepted to delete but still holds (a finalizer holds it).
const ReasonWaitingForDeletion = "WaitingForDeletion"

// gone reports whether copy live, whose deletion the member accepted, is
// gone: not found when read from the member's API server, or found
// without a deletion under way (orphaned: no longer a copy). One still
// being deleted is counted as held, and named in run.deleting and
// run.waiting: a drain is not done, and keeps its place in the
// disruption budget, until it is gone.
func (run *Run) gone(ctx context.Context, live *unstructured.Unstructured) (bool, error) {
	found := &unstructured.Unstructured{}
	found.SetGroupVersionKind(live.GroupVersionKind())
	err := run.member.Reader.Get(ctx, client.ObjectKeyFromObject(live), found)
	if apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("reading %s %s after its deletion: %w", live.GetKind(), live.GetName(), err)
	}
	if found.GetUID() != live.GetUID() || found.GetDeletionTimestamp() == nil {
		return true, nil
	}
	run.Hold(live.GroupVersionKind())
	name := live.GetKind() + " " + live.GetName()
	run.Deleting = append(run.Deleting, name)
	if run.Waiting == nil {
		run.Waiting = &Failure{Reason: ReasonWaitingForDeletion, Message: "waiting for the member to delete " + name + ": finalizers hold it"}
	}
	return false, nil
}

// CopyID names a copy in a member: its namespace ("" if cluster-scoped),
// kind and name.
type CopyID struct {
	Namespace string
	Key
}

// Label values of fleet_propagation_applies_total's result.
const (
	ApplySucceeded = "success"
	ApplyFailed    = "failure"
)
