package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MaxEnvelopeManifests bounds an Envelope's manifests. An Envelope is
// one hub object, so the hub's own bound on an object's size (etcd's
// request limit, 1.5 MiB by default) bounds it too: a larger one is
// refused when it is written, never cut.
const MaxEnvelopeManifests = 256

// EnvelopeLabel, on a copy made from an Envelope's manifest, names the
// Envelope.
const EnvelopeLabel = "fleet.fleetkube.io/envelope"

// Envelope holds manifests of objects that are applied in members only:
// nothing of it is live on the hub, so a Deployment in it runs in no hub
// node, and a quota or a NetworkPolicy in it acts on nothing of the hub. A
// Propagation that selects it (apiVersion fleet.fleetkube.io/v1alpha1,
// kind Envelope) applies each manifest in the Envelope's namespace of its
// members, as it would a hub object of that namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=fleet
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Envelope struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Manifests are the objects, each as its author would write it for a
	// member: apiVersion, kind, metadata.name, and no namespace or the
	// Envelope's own. Each is checked on the hub as the Propagation's
	// objects are: a manifest of a cluster-scoped kind, of another
	// namespace, or that holds the fleet's credentials fails the members
	// that select it, naming it.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:pruning:PreserveUnknownFields
	// +listType=atomic
	Manifests []runtime.RawExtension `json:"manifests"`
}

// +kubebuilder:object:root=true

// EnvelopeList is a list of Envelopes.
type EnvelopeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Envelope `json:"items"`
}

// ClusterEnvelope is an Envelope of cluster-scoped manifests, which a
// ClusterPropagation selects (kind ClusterEnvelope): a webhook
// configuration or an admission policy in it acts on no hub request.
// Its manifests are checked as an Envelope's, but must be of no
// namespace and of a cluster-scoped kind.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=fleet
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterEnvelope struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Manifests are the cluster-scoped objects, each as its author would
	// write it for a member.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:pruning:PreserveUnknownFields
	// +listType=atomic
	Manifests []runtime.RawExtension `json:"manifests"`
}

// +kubebuilder:object:root=true

// ClusterEnvelopeList is a list of ClusterEnvelopes.
type ClusterEnvelopeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterEnvelope `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Envelope{}, &EnvelopeList{}, &ClusterEnvelope{}, &ClusterEnvelopeList{})
}
