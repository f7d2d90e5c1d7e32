package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenancyPolicy says which members the Propagations (and Envelopes) of
// some hub namespaces may reach, and which kinds they may carry there. It
// is cluster-scoped, so only who may write cluster-scoped objects of
// fleet.fleetkube.io (cluster admins) writes it: a tenant with every right
// in its own namespace cannot grant its namespace anything.
//
// Where tenancy is enforced, a namespace reaches a member only when some
// policy names both, and carries a kind there only when one of those
// policies allows it; policies add up, none takes away what another gives.
// With no policy for it, a namespace reaches nothing. ClusterPropagations
// are cluster admins' own and outside tenancy.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tenancy,categories=fleet
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenancyPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TenancyPolicySpec `json:"spec"`
}

// TenancyPolicySpec names namespaces, the members they may reach, and the
// kinds they may carry there.
type TenancyPolicySpec struct {
	// Namespaces the policy is for: hub namespaces, by name or by their
	// labels (whoever may label Namespaces on the hub may then bring a
	// namespace under the policy).
	// +required
	Namespaces NamespaceSelector `json:"namespaces"`

	// Members the namespaces may reach: by name or by their MemberClusters'
	// labels, and from the registration sources named (when any are).
	// +required
	Members ReachableMembers `json:"members"`

	// Kinds the namespaces may carry to those members. Empty allows every
	// namespaced kind the manager may write.
	// +optional
	Kinds KindRules `json:"kinds,omitempty"`
}

// NamespaceSelector selects hub namespaces by name and by label. A
// namespace is selected when its name is listed or its labels match the
// selector; with neither, no namespace is. An empty selector ({}) selects
// every namespace.
type NamespaceSelector struct {
	// Names are namespace names.
	//
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	// +optional
	Names []string `json:"names,omitempty"`
	// Selector matches Namespace labels.
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`
}

// ReachableMembers selects members. A member is reachable when its name is
// listed or its MemberCluster's labels match the selector (with neither,
// no member is; an empty selector matches every member), and, when Sources
// is set, its registration Secret is in one of the namespaces it names.
type ReachableMembers struct {
	// Names are member cluster names.
	//
	// +kubebuilder:validation:MaxItems=1000
	// +listType=set
	// +optional
	Names []string `json:"names,omitempty"`
	// Selector matches MemberCluster labels.
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`
	// Sources are where the members must be registered from: the hub
	// namespace of their registration Secret, whatever its format (the
	// fleet namespace, a Cluster API namespace, the Argo CD namespace), or
	// "clusterprofile/<namespace>" for a member a ClusterProfile of that
	// namespace registers (a ClusterProfile in the fleet namespace does not
	// match the fleet namespace). Labels chosen by Cluster API, Argo CD or
	// a ClusterProfile's writer then reach only what those sources
	// register. Empty: any source.
	//
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=78
	// +listType=set
	// +optional
	Sources []string `json:"sources,omitempty"`
}

// KindRules allow and deny kinds. A kind is allowed when Allow is empty or
// a rule of it matches, and no rule of Deny matches: Deny wins.
type KindRules struct {
	// Allow lists the kinds allowed; empty allows every kind.
	//
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	// +optional
	Allow []KindRule `json:"allow,omitempty"`
	// Deny lists the kinds refused, whatever Allow says.
	//
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	// +optional
	Deny []KindRule `json:"deny,omitempty"`
}

// KindRule matches the kinds of one API group: "" is the core group, "*"
// every group; Kind "*" (or empty) every kind of the group. Both match
// exactly, case included, as a manifest's apiVersion and kind say them:
// the API server refuses what could match nothing, such as the group
// "core" or the kind "secrets".
type KindRule struct {
	// Group is an API group (a DNS subdomain, such as apps), "" for the
	// core group (not "core"), or "*" for any.
	//
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	// +kubebuilder:validation:XValidation:rule="self != 'core'",message="the core group is \"\" (empty), not core"
	// +optional
	Group string `json:"group"`
	// Kind is a kind as manifests spell it (ConfigMap, not configmaps),
	// or "*" (or empty) for every kind of the group.
	//
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(\*|[A-Z][A-Za-z0-9]*)?$`
	// +optional
	Kind string `json:"kind,omitempty"`
}

// Matches reports whether r matches the kind of group group.
func (r KindRule) Matches(group, kind string) bool {
	return (r.Group == "*" || r.Group == group) && (r.Kind == "" || r.Kind == "*" || r.Kind == kind)
}

// Allows reports whether the rules allow the kind of group group.
func (k KindRules) Allows(group, kind string) bool {
	for _, r := range k.Deny {
		if r.Matches(group, kind) {
			return false
		}
	}
	if len(k.Allow) == 0 {
		return true
	}
	for _, r := range k.Allow {
		if r.Matches(group, kind) {
			return true
		}
	}
	return false
}

// +kubebuilder:object:root=true

// TenancyPolicyList is a list of TenancyPolicies.
type TenancyPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenancyPolicy `json:"items"`
}

// Tenancy modes: whether TenancyPolicies are enforced (run --tenancy).
const (
	// TenancyEnforce: a namespace's Propagations reach only what policies
	// let them.
	TenancyEnforce = "Enforce"
	// TenancyOff: policies are not enforced; every namespace reaches every
	// member, as before tenancy existed.
	TenancyOff = "Off"
	// TenancyAuto: Enforce for a fleet created by a version that knows
	// tenancy (its identity ConfigMap holds FleetTenancyKey: Enforce), Off
	// for an older fleet until its admin opts in.
	TenancyAuto = "Auto"
)

// FleetTenancyKey, in the fleet identity ConfigMap, records that the fleet
// was created with tenancy enforced (value TenancyEnforce). The ConfigMap
// is immutable: a fleet older than tenancy never gains it.
const FleetTenancyKey = "tenancy"

// Reasons a Propagation gives for what tenancy held or refused.
const (
	// ReasonNotReachable: no TenancyPolicy lets the Propagation's namespace
	// reach the member.
	ReasonNotReachable = "NotReachable"
	// ReasonKindNotAllowed: no TenancyPolicy that lets the namespace reach
	// the member allows the kind there.
	ReasonKindNotAllowed = "KindNotAllowed"
	// ReasonTenancyUnknown: the policies for the namespace cannot be read
	// or one does not parse: nothing is removed or added until they can.
	ReasonTenancyUnknown = "TenancyUnknown"
)

func init() {
	SchemeBuilder.Register(&TenancyPolicy{}, &TenancyPolicyList{})
}
