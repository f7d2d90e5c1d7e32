package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RolloutType says how a Propagation's members are given a new revision.
//
// +kubebuilder:validation:Enum=All;Progressive
type RolloutType string

const (
	// RolloutAll gives every selected member the new revision at once.
	RolloutAll RolloutType = "All"
	// RolloutProgressive gives it to a few members at a time, in order,
	// each judged by its availability before the next.
	RolloutProgressive RolloutType = "Progressive"
)

// RolloutStrategy says how a new revision reaches the members.
type RolloutStrategy struct {
	// Type is All (the default) or Progressive.
	//
	// +kubebuilder:default=All
	// +optional
	Type RolloutType `json:"type,omitempty"`
	// Progressive tunes a Progressive rollout.
	//
	// +optional
	Progressive *ProgressiveRollout `json:"progressive,omitempty"`
}

// ProgressiveRollout tunes a Progressive rollout. Members go in order: by
// the group their GroupBy label puts them in, in the order of Groups, then
// by name. A group starts once every member of the groups before it has
// the revision and has been Available for MinSuccessTime.
type ProgressiveRollout struct {
	// GroupBy is a member label whose values group the members. Unset:
	// one group, in name order.
	//
	// +kubebuilder:validation:MaxLength=317
	// +optional
	GroupBy string `json:"groupBy,omitempty"`
	// Groups are GroupBy's values in the order their members go, such as
	// [canary, eu, us]. Members with another value, or none, go last, as
	// one group.
	//
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Groups []string `json:"groups,omitempty"`
	// MaxConcurrency is how many members may be between revisions at
	// once (given the new revision, and not yet Available for
	// MinSuccessTime, or failed): a number, or a percentage of the
	// selected members not in maintenance, rounded down but at least 1.
	// A number is at least 1, a percentage above 0%. Default 1.
	//
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^0*[1-9][0-9]{0,5}%$')",message="must be a number of at least 1 or a percentage above 0%"
	// +optional
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// MinSuccessTime is how long a member must have been Available with
	// the new revision before it counts as done. Default 0.
	//
	// +optional
	MinSuccessTime *metav1.Duration `json:"minSuccessTime,omitempty"`
	// MaxFailures is how many members given the new revision may fail
	// (a copy failed, or not Available within progressDeadlineSeconds)
	// before the rollout stops. Default 1: the first failure stops it.
	//
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxFailures *int32 `json:"maxFailures,omitempty"`
}

// DisruptionBudget bounds how many selected members may be without the
// Propagation's copies Available at once while members are drained.
type DisruptionBudget struct {
	// MaxUnavailable is how many members may be unavailable at once: a
	// drained member whose copies are being removed counts, and so does a
	// selected member whose copies are not Available. Default 1.
	//
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// Rollout phases.
//
// +kubebuilder:validation:Enum=Progressing;Complete;Paused;Stopped;Failed;Pinned
type RolloutPhase string

const (
	// RolloutProgressing: members are being given the revision.
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutComplete: every selected member that is not cordoned runs
	// the revision, and has been Available for minSuccessTime.
	RolloutComplete RolloutPhase = "Complete"
	// RolloutPaused: spec.paused is set; no member is given a revision.
	RolloutPaused RolloutPhase = "Paused"
	// RolloutStopped: maxFailures members failed; the message names the
	// first, its object and why.
	RolloutStopped RolloutPhase = "Stopped"
	// RolloutFailed: every member given the revision either runs it or
	// failed, and some failed (under All, or under Progressive short of
	// maxFailures); the message names the failed members and why. It
	// ends when they recover.
	RolloutFailed RolloutPhase = "Failed"
	// RolloutPinned: every member runs the revision spec.revision pins,
	// and a newer one exists that is not rolled out while the pin holds.
	RolloutPinned RolloutPhase = "Pinned"
)

// Reasons of a rollout and of a member held by it.
const (
	// ReasonRolloutStopped, of a Warning Event: the rollout stopped.
	ReasonRolloutStopped = "RolloutStopped"
	// ReasonRolloutComplete, of a Normal Event: the rollout is complete.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonWaitingForRollout: the member has not been given a revision
	// yet; its copies stay as they are.
	ReasonWaitingForRollout = "WaitingForRollout"
	// ReasonCordoned: the member is cordoned and takes no new revision.
	ReasonCordoned = "Cordoned"
	// ReasonDraining: the member is drained; its copies are removed.
	ReasonDraining = "Draining"
	// ReasonWaitingForDisruptionBudget: a drained member waits for the
	// Propagation's disruption budget before its copies are removed.
	ReasonWaitingForDisruptionBudget = "WaitingForDisruptionBudget"
	// ReasonRevisionInvalid: a member's revision cannot be read, or its
	// content does not match its hash.
	ReasonRevisionInvalid = "RevisionInvalid"
	// ReasonRevisionRefused: the hub refused to store a revision of what
	// the Propagation selects now (too large, say). The rollout is Failed
	// and Ready False; members keep the revisions they have.
	ReasonRevisionRefused = "RevisionRefused"
	// ReasonPinnedToOlderRevision: spec.revision pins a revision older
	// than the newest, which is not rolled out (phase Pinned, and Ready
	// False).
	ReasonPinnedToOlderRevision = "PinnedToOlderRevision"
)

// RolloutStatus is where the rollout of a Propagation's revision stands.
type RolloutStatus struct {
	// Revision is the revision being rolled out: the newest, or the one
	// spec.revision pins.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Phase is Progressing, Complete, Paused, Stopped, Failed or Pinned.
	// A rollout to no member is Progressing, reason NoMembersSelected:
	// never Complete.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`
	// Reason is a CamelCase reason for the phase.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says where the rollout stands; a stopped one names the
	// member, the object and the reason.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Updated counts the members that run the revision and have been
	// Available for minSuccessTime.
	// +optional
	Updated int32 `json:"updated,omitempty"`
	// Failed counts the members given the revision that failed.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Members say which revision each member is given, by revision. A
	// member in none is given none yet: its copies stay as they are.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Members []RevisionMembers `json:"members,omitempty"`
	// Draining are the drained members whose copies the disruption
	// budget lets the manager remove now.
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	// +optional
	Draining []string `json:"draining,omitempty"`
}

// RevisionMembers are the members given one revision.
type RevisionMembers struct {
	Revision int64 `json:"revision"`
	// Names are the members, sorted: as many as a fleet has, up to a
	// bound far beyond what one hub holds.
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	Names []string `json:"names"`
}

// PropagationRevision labels: a revision's Propagation and its kind.
const (
	// RevisionOfLabel is the kind of the Propagation a revision is of:
	// Propagation or ClusterPropagation. The Propagation's name is in
	// PropagationLabel.
	RevisionOfLabel = "fleet.fleetkube.io/revision-of"
	// RevisionHashLabel is the hash of the revision's content.
	RevisionHashLabel = "fleet.fleetkube.io/revision-hash"
	// RevisionLabel, on a copy, is the number of the revision that gave it
	// its content (under strategy All, set once that revision is made); a
	// copy a revision leaves unchanged keeps its label. It is neither
	// content nor drift.
	RevisionLabel = "fleet.fleetkube.io/revision"
)

// DefaultRevisionHistoryLimit is how many revisions a Propagation keeps
// when revisionHistoryLimit is unset.
const DefaultRevisionHistoryLimit = 10

// PropagationRevision is one immutable, numbered revision of what a
// Propagation (or ClusterPropagation) applies: the hub objects its
// resources select, their content, and its overrides. The manager makes
// one on every change and keeps revisionHistoryLimit of them, and every
// one a member is given. A Propagation's are in its namespace; a
// ClusterPropagation's in the fleet namespace. A revision holds the
// selected objects as they were, Secrets included: grant read access to
// PropagationRevisions as to Secrets.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=proprev,categories=fleet
// +kubebuilder:printcolumn:name="Propagation",type=string,JSONPath=`.metadata.labels.fleet\.fleetkube\.io/propagation`
// +kubebuilder:printcolumn:name="Of",type=string,JSONPath=`.metadata.labels.fleet\.fleetkube\.io/revision-of`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.revision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.revision) || self.revision == oldSelf.revision",message="a revision's number is immutable"
type PropagationRevision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Revision is the revision's number, from 1, one more than the
	// newest before it.
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision"`
	// Content is what the revision applies. Its hash is in the
	// fleet.fleetkube.io/revision-hash label: a revision whose content
	// does not match it is never applied.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Content runtime.RawExtension `json:"content"`
}

// +kubebuilder:object:root=true

// PropagationRevisionList is a list of PropagationRevisions.
type PropagationRevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PropagationRevision `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PropagationRevision{}, &PropagationRevisionList{})
}
