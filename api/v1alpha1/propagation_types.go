package v1alpha1

import (
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// DriftPolicy says what happens when a copy in a member no longer matches
// its hub object.
//
// +kubebuilder:validation:Enum=Correct;Report
type DriftPolicy string

const (
	// DriftCorrect applies the hub object again.
	DriftCorrect DriftPolicy = "Correct"
	// DriftReport leaves the copy as it is and reports the changed fields.
	DriftReport DriftPolicy = "Report"
)

// DeletionPolicy says what happens to copies that stop being wanted.
//
// +kubebuilder:validation:Enum=Delete;Orphan
type DeletionPolicy string

const (
	// DeletionDelete deletes them from the member.
	DeletionDelete DeletionPolicy = "Delete"
	// DeletionOrphan leaves them in the member, without the labels and
	// annotations that made them copies.
	DeletionOrphan DeletionPolicy = "Orphan"
)

// Copies carry these labels and annotations. The labels select them in
// the copy caches; the annotations say where they come from.
const (
	// PropagationLabel names the Propagation a copy belongs to; the copy
	// also carries FleetLabel, naming the fleet namespace, and
	// FleetIDLabel, the fleet's identity. A copy is a fleet's only if it
	// carries that fleet's identity: a manager never applies over,
	// deletes or orphans another fleet's.
	PropagationLabel = "fleet.fleetkube.io/propagation"
	// SourceAnnotation is the hub object a copy was made from:
	// "<apiVersion>/<kind>/<namespace>/<name>" (a core kind has "v1").
	SourceAnnotation = "fleet.fleetkube.io/source"
	// SourceUIDAnnotation is the hub object's UID.
	SourceUIDAnnotation = "fleet.fleetkube.io/source-uid"
	// ContentHashAnnotation is a hash of what was applied.
	ContentHashAnnotation = "fleet.fleetkube.io/content-hash"
	// DeletionAnnotation is the Propagation's deletion policy when the copy
	// was applied, so that a copy whose Propagation is gone is treated as
	// it asked.
	DeletionAnnotation = "fleet.fleetkube.io/deletion"
	// AdoptedAnnotation marks a copy that adopt took over from the
	// member, which the manager did not create: when no longer wanted it
	// is orphaned, never deleted. It is written before the copy is first
	// applied, under its own field manager, and taken off with the copy's
	// labels.
	AdoptedAnnotation = "fleet.fleetkube.io/adopted"
)

// PropagationFinalizer holds a deleted Propagation until the removal of
// its copies is done, or recorded as owed by members that are not Ready.
const PropagationFinalizer = "fleet.fleetkube.io/propagation-cleanup"

// FieldManager is the server-side apply field manager of every copy.
const FieldManager = "fleet-manager"

// Propagation keeps hub objects of its namespace present and identical in
// the same namespace of the selected members.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=prop,categories=fleet
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="the name must be at most 63 characters: copies carry it in a label"
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`,description="Members selected"
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.applied`,description="Members whose copies are applied and in sync"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`,description="Members whose copies are applied, in sync and available"
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`,description="Members where applying failed, or that missed the progress deadline"
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.rollout.revision`,description="The revision being rolled out"
// +kubebuilder:printcolumn:name="Pinned",type=integer,JSONPath=`.spec.revision`,description="The revision spec.revision pins, if any: the newest is not rolled out while it is set"
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`,description="Where the rollout stands"
// +kubebuilder:printcolumn:name="Drifted",type=integer,JSONPath=`.status.drifted`,description="Members whose copies drifted",priority=1
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.selectedResourceCount`,description="Hub objects selected",priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Status of the Ready condition"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Propagation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PropagationSpec `json:"spec"`
	// +optional
	Status PropagationStatus `json:"status,omitempty"`
}

// PropagationSpec says which hub objects go to which members, and how.
type PropagationSpec struct {
	// Resources select objects of the Propagation's own namespace on the
	// hub. Each is copied into the same namespace of every selected member,
	// which is created there when missing. Cluster-scoped kinds are
	// refused. A ClusterPropagation's select cluster-scoped objects, and
	// refuse namespaced kinds.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Resources []ResourceSelector `json:"resources"`

	// Members select the member clusters, by the labels of their
	// MemberClusters (their registration's labels) and by name. An empty
	// members selects every member.
	Members MemberSelector `json:"members"`

	// Drift says what happens when a field the manager applied is changed
	// in a member: Correct applies it again, Report leaves it and reports
	// it in status, as an Event and in a metric.
	//
	// +kubebuilder:default=Correct
	// +optional
	Drift DriftPolicy `json:"drift,omitempty"`

	// Deletion says what happens to copies that stop being wanted: the hub
	// object is deleted or stops matching, a member stops being selected,
	// or the Propagation is deleted.
	//
	// +kubebuilder:default=Delete
	// +optional
	Deletion DeletionPolicy `json:"deletion,omitempty"`

	// Adopt takes over an object that exists in a member and is not a
	// copy: without it, that member reports AlreadyExists. It never takes
	// another fleet's copy, nor an old copy (one without the fleet's
	// identity) that the manager cannot prove its own.
	//
	// +optional
	Adopt bool `json:"adopt,omitempty"`

	// Suspend stops applying, correcting and deleting; status still
	// follows the members.
	//
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Overrides change the copies of some members: each rule selects
	// members and copies, and patches what would be applied there. The
	// patched copy is the intent: drift is judged against it. Rules apply
	// in order.
	//
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Overrides []Override `json:"overrides,omitempty"`

	// ProgressDeadlineSeconds is how long a member may take to have every
	// copy applied and Available, from when it is given a change or its
	// copies stop being Available; after it, the member is Failed, reason
	// ProgressDeadlineExceeded. Unset: no deadline.
	//
	// +kubebuilder:validation:Minimum=1
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// Strategy says how a new revision reaches the members: All at once
	// (the default) or Progressive.
	//
	// +optional
	Strategy RolloutStrategy `json:"strategy,omitempty"`

	// Paused stops the rollout: no member is given another revision until
	// it is unset. Copies are still kept as the revision each member has
	// says, drift included.
	//
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Revision pins the revision rolled out, such as an earlier one to
	// roll back to; it rolls out with the strategy. Unset: the newest.
	//
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision *int64 `json:"revision,omitempty"`

	// RevisionHistoryLimit is how many revisions are kept, counting the
	// one rolled out and those members are given; those are never
	// deleted, so more are kept while members are given more. Default 10.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// DisruptionBudget bounds how many selected members may be without
	// the copies Available at once while members are drained.
	//
	// +optional
	DisruptionBudget DisruptionBudget `json:"disruptionBudget,omitempty"`
}

// Override patches the copies of the members it selects.
//
// +kubebuilder:validation:XValidation:rule="has(self.jsonPatch) != has(self.mergePatch)",message="exactly one of jsonPatch and mergePatch must be set"
type Override struct {
	// Name names the rule in status and Events.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Members select the members whose copies the rule patches, as
	// spec.members does. Empty: every selected member.
	//
	// +optional
	Members MemberSelector `json:"members,omitempty"`
	// Target selects the copies the rule patches, by kind and, if set,
	// name.
	Target OverrideTarget `json:"target"`
	// JSONPatch is an RFC 6902 JSON patch of the copy. String values may
	// hold ${MEMBER_NAME} and ${MEMBER_LABEL:<key>}, replaced by the
	// member's name and the value of its label key.
	//
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	JSONPatch []JSONPatchOperation `json:"jsonPatch,omitempty"`
	// MergePatch is an RFC 7386 JSON merge patch of the copy, with the
	// same variables as JSONPatch.
	//
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	MergePatch *apiextensionsv1.JSON `json:"mergePatch,omitempty"`
}

// OverrideTarget selects copies by kind and name.
type OverrideTarget struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Name selects one copy; empty selects every copy of the kind.
	//
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// JSONPatchOperation is one operation of an RFC 6902 JSON patch.
type JSONPatchOperation struct {
	// +kubebuilder:validation:Enum=add;remove;replace;test
	Op string `json:"op"`
	// Path is a JSON pointer, such as /spec/replicas.
	//
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path"`
	// Value is the operation's value, for add, replace and test.
	//
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +optional
	Value *apiextensionsv1.JSON `json:"value,omitempty"`
}

// ResourceSelector selects hub objects of one kind, by name or by labels.
//
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name and selector must be set"
type ResourceSelector struct {
	// APIVersion is the objects' group/version, such as "apps/v1" or "v1".
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// Kind is the objects' kind, such as "Deployment".
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Name selects one object.
	//
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
	// Selector selects the objects whose labels it matches.
	//
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`
	// Wave orders the copies in each member: those of a lower wave are
	// applied and Available before any of a higher wave is applied, and
	// removed after. Within a wave, Namespaces and CustomResourceDefinitions
	// come first. Default 0.
	//
	// +kubebuilder:validation:Minimum=-100
	// +kubebuilder:validation:Maximum=100
	// +optional
	Wave int32 `json:"wave,omitempty"`
	// AvailableWhen is a CEL expression over a copy in its member, as
	// self, that is true once the copy is available, such as
	// `self.status.phase == "Ready"`. It takes the place of the kind's
	// built-in rule, or tracks a kind that has none.
	//
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	AvailableWhen string `json:"availableWhen,omitempty"`
}

// MemberSelector selects member clusters. A member is selected when it
// matches every part that is set.
type MemberSelector struct {
	// Selector matches MemberCluster labels.
	//
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`
	// Names are member cluster names.
	//
	// +kubebuilder:validation:MaxItems=1000
	// +listType=set
	// +optional
	Names []string `json:"names,omitempty"`
}

// Selects reports whether s selects the member named name, labelled
// memberLabels. A selector that does not parse is an error for every
// member, named or not: it deselects no one.
func (s MemberSelector) Selects(name string, memberLabels map[string]string) (bool, error) {
	selector := labels.Everything()
	if s.Selector != nil {
		var err error
		if selector, err = s.Selector.AsSelector(); err != nil {
			return false, err
		}
	}
	if len(s.Names) > 0 && !slices.Contains(s.Names, name) {
		return false, nil
	}
	return selector.Matches(labels.Set(memberLabels)), nil
}

// Conditions of a Propagation.
const (
	// PropagationReady: every selected member has every copy applied and in
	// sync, and no deletion is owed.
	PropagationReady = "Ready"
	// PropagationApplied: every selected member has every copy applied.
	PropagationApplied = "Applied"
	// PropagationDrifted: some member's copies drifted.
	PropagationDrifted = "Drifted"
	// PropagationAvailable: every selected member has every copy applied
	// and Available.
	PropagationAvailable = "Available"
	// PropagationStatusTruncated: the status was cut to fit its byte
	// budget, or status.kinds to MaxCopiedKinds; the message says what was
	// cut. Counts, conditions and status.rollout are never cut.
	PropagationStatusTruncated = "StatusTruncated"
	// ReasonStatusBudget: what StatusTruncated's message names was cut.
	ReasonStatusBudget = "StatusBudget"
	// PropagationResourcesSelected: every entry of spec.resources selects
	// at least one hub object (status.selectedResources lists them).
	// False names the first entry that selects none: the Propagation is
	// not Ready, and the other entries' objects are still copied.
	PropagationResourcesSelected = "ResourcesSelected"
	// ReasonResourcesSelected: every entry selects a hub object.
	ReasonResourcesSelected = "ResourcesSelected"
	// ReasonResourceNotFound: an entry names a hub object (name) that
	// does not exist.
	ReasonResourceNotFound = "ResourceNotFound"
	// ReasonNothingSelected: an entry's label selector matches no hub
	// object.
	ReasonNothingSelected = "NothingSelected"
)

// MemberResult is where a Propagation stands in one member.
//
// +kubebuilder:validation:Enum=Applied;Drifted;Failed;Pending;DeletionOwed
type MemberResult string

const (
	// ResultApplied: every copy is applied and in sync.
	ResultApplied MemberResult = "Applied"
	// ResultDrifted: a copy was changed in the member (drift: Report).
	ResultDrifted MemberResult = "Drifted"
	// ResultFailed: a copy could not be applied; the reason says why.
	ResultFailed MemberResult = "Failed"
	// ResultPending: not applied yet, for example because the member is
	// not Ready.
	ResultPending MemberResult = "Pending"
	// ResultDeletionOwed: copies must be removed from a member that is not
	// Ready; it happens when the member is Ready again.
	ResultDeletionOwed MemberResult = "DeletionOwed"
)

// Reasons of a member's result and of the Propagation's conditions,
// beside ReasonKindNotFound and ReasonForbidden.
const (
	// ReasonApplied: every copy is applied and in sync.
	ReasonApplied = "Applied"
	// ReasonDrifted: copies were changed in a member.
	ReasonDrifted = "Drifted"
	// ReasonMemberUnhealthy: the member is not Ready.
	ReasonMemberUnhealthy = "MemberUnhealthy"
	// ReasonAlreadyExists: the member holds an object of that name that
	// is not a copy, and adopt is not set, or that is another fleet's
	// copy, which adopt does not take.
	ReasonAlreadyExists = "AlreadyExists"
	// ReasonRefused: a selected hub object holds the fleet's credentials
	// and is never copied (the message names the rule); the Propagation's
	// other objects are copied.
	ReasonRefused = "Refused"
	// ReasonInvalid: the member rejected a copy, or the Propagation names
	// an invalid apiVersion.
	ReasonInvalid = "Invalid"
	// ReasonClusterScoped: a Propagation's resource is of a cluster-scoped
	// kind (a ClusterPropagation copies it).
	ReasonClusterScoped = "ClusterScopedKind"
	// ReasonNamespacedKind: a ClusterPropagation's resource is of a
	// namespaced kind (a Propagation of its namespace copies it).
	ReasonNamespacedKind = "NamespacedKind"
	// ReasonInvalidSelector: a label selector does not parse.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonSuspended: spec.suspend is set.
	ReasonSuspended = "Suspended"
	// ReasonDeletionOwed: a member that is not Ready owes the removal of
	// copies.
	ReasonDeletionOwed = "DeletionOwed"
	// ReasonNotAvailable: copies are applied and some are not available
	// yet; the message names the first and what it waits for.
	ReasonNotAvailable = "NotAvailable"
	// ReasonAvailable: every copy is applied and available.
	ReasonAvailable = "Available"
	// ReasonWaitingForWave: copies of a later wave wait for those of an
	// earlier one to be Available (Namespaces and CRDs come first).
	ReasonWaitingForWave = "WaitingForWave"
	// ReasonWaitingForKind: the member does not serve a kind yet; its
	// copies wait for its CRD.
	ReasonWaitingForKind = "WaitingForKind"
	// ReasonProgressDeadlineExceeded: a member did not have every copy
	// Available within spec.progressDeadlineSeconds.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonOverrideFailed: an override rule does not apply to a copy;
	// the message names the rule.
	ReasonOverrideFailed = "OverrideFailed"
	// ReasonInvalidAvailableWhen: a resource's availableWhen does not
	// compile.
	ReasonInvalidAvailableWhen = "InvalidAvailableWhen"
	// ReasonAvailabilityRuleRefused: a resource's availableWhen could
	// cost more than the manager allows; the message names the cost and
	// the limit. The members' copies are held as they are.
	ReasonAvailabilityRuleRefused = "AvailabilityRuleRefused"
	// ReasonContainerNotEmpty: a copy of a kind whose deletion deletes
	// other objects (a Namespace, a CustomResourceDefinition) was no
	// longer wanted but held objects that are not the Propagation's own
	// copies: it was orphaned, not deleted.
	ReasonContainerNotEmpty = "ContainerNotEmpty"
	// ReasonAdoptedOrphaned: a copy that adopt took over from the member
	// was no longer wanted: it was orphaned, not deleted.
	ReasonAdoptedOrphaned = "AdoptedOrphaned"
	// ReasonJournalLost, of a Warning Event on a MemberCluster: the
	// manager's journal could not be used and was started anew.
	ReasonJournalLost = "JournalLost"
	// ReasonMembersFailed, ReasonMembersPending, ReasonNoMembersSelected
	// and ReasonNoDrift sum up the members in the conditions.
	ReasonMembersFailed     = "MembersFailed"
	ReasonMembersPending    = "MembersPending"
	ReasonNoMembersSelected = "NoMembersSelected"
	ReasonNoDrift           = "NoDrift"
	// ReasonMembersExcluded, of a Warning Event on a Propagation: a
	// TenancyPolicy change keeps its namespace from members it had
	// selected; their copies are removed as on a deselection.
	ReasonMembersExcluded = "MembersExcluded"
)

// MaxListedMembers bounds status.members; failing, drifted and pending
// members are listed first, and members beyond the bound are only
// counted.
const MaxListedMembers = 1000

// MaxMemberMessageLength bounds a member's message in status.
const MaxMemberMessageLength = 512

// MaxDriftedFields bounds the field paths listed for one member.
const MaxDriftedFields = 16

// MaxListedResources bounds status.selectedResources; the others are
// only counted, in status.selectedResourceCount.
const MaxListedResources = 100

// MaxCopiedKinds bounds status.kinds: as many as one Envelope may hold
// (MaxEnvelopeManifests).
const MaxCopiedKinds = 256

// MaxListedExcludedMembers bounds status.excludedMembers; the others are
// only counted, in status.excluded.
const MaxListedExcludedMembers = 100

// ExcludedMember is a member spec.members selects that tenancy keeps the
// Propagation from.
type ExcludedMember struct {
	// Name is the member's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Reason is NotReachable, or TenancyUnknown.
	// +kubebuilder:validation:MaxLength=64
	// +required
	Reason string `json:"reason"`
	// Message says which policies were asked.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// PropagationStatus is what the manager observed, per member and in sum.
type PropagationStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Selected counts the selected members.
	// +kubebuilder:default=0
	// +optional
	Selected int32 `json:"selected"`
	// Applied counts the members whose copies are applied and in sync.
	// +kubebuilder:default=0
	// +optional
	Applied int32 `json:"applied"`
	// Available counts the members whose copies are applied, in sync and
	// available.
	// +kubebuilder:default=0
	// +optional
	Available int32 `json:"available"`
	// Drifted counts the members whose copies drifted.
	// +kubebuilder:default=0
	// +optional
	Drifted int32 `json:"drifted"`
	// Failed counts the members where a copy failed.
	// +kubebuilder:default=0
	// +optional
	Failed int32 `json:"failed"`
	// PendingDeletions counts the members that owe a deletion.
	// +kubebuilder:default=0
	// +optional
	PendingDeletions int32 `json:"pendingDeletions"`

	// SelectedResourceCount counts the hub objects spec.resources select
	// now, an Envelope's manifests each; refused objects are not counted.
	// +kubebuilder:default=0
	// +optional
	SelectedResourceCount int32 `json:"selectedResourceCount"`
	// SelectedResources lists them, in the order of spec.resources, at
	// most MaxListedResources: the others are only counted.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	SelectedResources []ResourceIdentifier `json:"selectedResources,omitempty"`

	// Kinds are every kind the Propagation has copied, so that copies of a
	// kind removed from resources are still found and removed; sorted, the
	// kinds it copies now first, at most MaxCopiedKinds.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Kinds []KindReference `json:"kinds,omitempty"`

	// Members lists every member that is not Applied and Available (at
	// most MaxListedMembers of them, failing first); the others are
	// counted only.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []MemberPropagationStatus `json:"members,omitempty"`

	// Excluded counts the members spec.members selects that tenancy
	// (TenancyPolicies) keeps the Propagation's namespace from reaching:
	// they are not selected, and hold no copies of it.
	// +kubebuilder:default=0
	// +optional
	Excluded int32 `json:"excluded"`
	// ExcludedMembers names the first MaxListedExcludedMembers of them, by
	// name, and why.
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=name
	// +optional
	ExcludedMembers []ExcludedMember `json:"excludedMembers,omitempty"`

	// Revision is the newest revision of what the Propagation applies.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// Rollout is where the rollout of a revision stands, and which
	// revision each member is given.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// Shards are each replica's part of this status when replicas share
	// the fleet (run --shard): each writes its own, from the members it
	// owns, and one replica sums them up into the fields above.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=replica
	// +optional
	Shards []PropagationShard `json:"shards,omitempty"`
}

// MaxShardMembers bounds a shard's members: failing, drifted and pending
// first.
const MaxShardMembers = 100

// PropagationShard is one replica's part of a Propagation's status: the
// counts of the members it owns, and those of them not Applied.
type PropagationShard struct {
	// Replica names the replica.
	Replica string `json:"replica"`
	// ObservedGeneration is the generation the shard describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Selected, Applied, Available, Drifted, Failed and PendingDeletions count the
	// replica's members as the status's fields of those names count all.
	// +optional
	Selected int32 `json:"selected,omitempty"`
	// +optional
	Applied int32 `json:"applied,omitempty"`
	// +optional
	Available int32 `json:"available,omitempty"`
	// +optional
	Drifted int32 `json:"drifted,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	PendingDeletions int32 `json:"pendingDeletions,omitempty"`
	// Members lists the replica's members that are not Applied, at most
	// MaxShardMembers.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Members []MemberPropagationStatus `json:"members,omitempty"`
	// Given is a hash of the rollout's revision when the shard was
	// written and of the names of the replica's members that
	// status.rollout.members then gave it: the shard speaks of those
	// members only while the record gives the revision to the same ones.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Given string `json:"given,omitempty"`
	// Revision is the rollout's revision when every one of those members
	// had it applied and Available, and there was one; else 0.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// AvailableSince is, when Revision is set, since when the last of
	// those members has been Available with it: minSuccessTime is judged
	// from it.
	// +optional
	AvailableSince *metav1.Time `json:"availableSince,omitempty"`
	// Released is true once the Propagation is deleted and every member of
	// the replica has removed its copies or owes their removal.
	// +optional
	Released bool `json:"released,omitempty"`
}

// ResourceIdentifier names a hub object a Propagation selects, of its
// namespace (none for a ClusterPropagation).
type ResourceIdentifier struct {
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Envelope names the Envelope the object is a manifest of, if it is.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Envelope string `json:"envelope,omitempty"`
}

// KindReference names a kind.
type KindReference struct {
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// MemberPropagationStatus is where a Propagation stands in one member.
type MemberPropagationStatus struct {
	// Name is the member cluster's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Result sums up the member.
	Result MemberResult `json:"result"`
	// Reason is a CamelCase reason, such as KindNotFound or Forbidden.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, naming the object.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
	// DriftedFields are the changed field paths of drifted copies, such as
	// "ConfigMap web: .data.color".
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	DriftedFields []string `json:"driftedFields,omitempty"`
	// Available says whether every copy is available: True, False, or
	// Unknown while the member is not Ready or not applied yet.
	// +kubebuilder:validation:Enum=True;False;Unknown
	// +optional
	Available metav1.ConditionStatus `json:"available,omitempty"`
	// Revision is the revision the member was last given and applied.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// ObservedGeneration is the Propagation's generation the result is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastConfirmedTime is when the manager last read the member's copies
	// and found this result; a member that is not Ready keeps the time it
	// was last confirmed.
	// +optional
	LastConfirmedTime *metav1.Time `json:"lastConfirmedTime,omitempty"`
	// LastTransitionTime is when the result last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// +kubebuilder:object:root=true

// PropagationList is a list of Propagations.
type PropagationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Propagation `json:"items"`
}

// ClusterPropagation keeps cluster-scoped hub objects (Namespaces,
// CustomResourceDefinitions, ClusterRoles and their bindings, webhook
// configurations...) present and identical in the selected members, with
// a Propagation's spec and status. Only who may create cluster-scoped
// objects, a cluster admin, should be granted ClusterPropagations:
// through one, the manager writes cluster-scoped objects in members with
// its own rights. Namespaced kinds are refused (NamespacedKind): they go
// through a Propagation of their namespace, or an Envelope.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=clusterprop,categories=fleet
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="the name must be at most 63 characters: copies carry it in a label"
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`,description="Members selected"
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.applied`,description="Members whose copies are applied and in sync"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`,description="Members whose copies are applied, in sync and available"
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`,description="Members where applying failed, or that missed the progress deadline"
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.rollout.revision`,description="The revision being rolled out"
// +kubebuilder:printcolumn:name="Pinned",type=integer,JSONPath=`.spec.revision`,description="The revision spec.revision pins, if any: the newest is not rolled out while it is set"
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`,description="Where the rollout stands"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Status of the Ready condition"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Drifted",type=integer,JSONPath=`.status.drifted`,description="Members whose copies drifted",priority=1
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.selectedResourceCount`,description="Hub objects selected",priority=1
type ClusterPropagation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PropagationSpec `json:"spec"`
	// +optional
	Status PropagationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterPropagationList is a list of ClusterPropagations.
type ClusterPropagationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPropagation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Propagation{}, &PropagationList{}, &ClusterPropagation{}, &ClusterPropagationList{})
}
