package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RegistrationFormat is the kind of Secret, or a ClusterProfile, a member
// cluster is registered with.
//
// +kubebuilder:validation:Enum=native;multicluster-runtime;cluster-api;argocd;clusterprofile
type RegistrationFormat string

const (
	// FormatNative is fleet-manager's own format: a Secret in the fleet
	// namespace labelled fleet.fleetkube.io/kubeconfig: "true".
	FormatNative RegistrationFormat = "native"
	// FormatMulticlusterRuntime is multicluster-runtime's kubeconfig
	// provider Secret, labelled
	// sigs.k8s.io/multicluster-runtime-kubeconfig: "true".
	FormatMulticlusterRuntime RegistrationFormat = "multicluster-runtime"
	// FormatClusterAPI is Cluster API's <cluster>-kubeconfig Secret of type
	// cluster.x-k8s.io/secret.
	FormatClusterAPI RegistrationFormat = "cluster-api"
	// FormatArgoCD is Argo CD's cluster Secret, labelled
	// argocd.argoproj.io/secret-type: cluster.
	FormatArgoCD RegistrationFormat = "argocd"
	// FormatClusterProfile is a ClusterProfile of SIG-Multicluster's
	// Cluster Inventory API (multicluster.x-k8s.io/v1alpha1), read with
	// an access provider of the manager's provider file.
	FormatClusterProfile RegistrationFormat = "clusterprofile"
)

// RegistrationFormats are every RegistrationFormat.
var RegistrationFormats = []RegistrationFormat{FormatNative, FormatMulticlusterRuntime, FormatClusterAPI, FormatArgoCD, FormatClusterProfile}

// MemberState is where a member cluster is in its life:
// Pending → Connecting → Ready ⇄ Unhealthy → Disconnected → Connecting …
// A removed member has no MemberCluster.
//
// +kubebuilder:validation:Enum=Pending;Connecting;Ready;Unhealthy;Disconnected
type MemberState string

const (
	// MemberStatePending: registered, not started yet; also the state of
	// a member whose kubeconfig was refused (see CredentialsAccepted).
	MemberStatePending MemberState = "Pending"
	// MemberStateConnecting: its cache is starting, or starting again
	// after a disconnection; no probe has succeeded since.
	MemberStateConnecting MemberState = "Connecting"
	// MemberStateReady: engaged, and its last probe succeeded.
	MemberStateReady MemberState = "Ready"
	// MemberStateUnhealthy: the failure threshold of probes in a row
	// failed. Its work is held and its informers are kept.
	MemberStateUnhealthy MemberState = "Unhealthy"
	// MemberStateDisconnected: probes kept failing past the disconnect
	// grace period. Its cache is torn down and its queued work dropped;
	// probing goes on, and reconnection is retried with backoff.
	MemberStateDisconnected MemberState = "Disconnected"
)

// MemberStates are the states of a member, in the order of its life.
var MemberStates = []MemberState{MemberStatePending, MemberStateConnecting, MemberStateReady, MemberStateUnhealthy, MemberStateDisconnected}

// ProbeResult is the outcome of one health probe.
//
// +kubebuilder:validation:Enum=Success;Failure
type ProbeResult string

const (
	// ProbeResultSuccess: the member answered the authenticated probe.
	ProbeResultSuccess ProbeResult = "Success"
	// ProbeResultFailure: the probe timed out, could not connect, or got
	// an error answer.
	ProbeResultFailure ProbeResult = "Failure"
)

// Condition types of MemberClusterStatus.Conditions.
const (
	// ConditionReady is True while the member is engaged and healthy
	// (State Ready), so that fleet-wide controllers reconcile its objects.
	ConditionReady = "Ready"
	// ConditionHealthy is the outcome of the recent health probes: False
	// once the failure threshold is reached, True again after the next
	// success, Unknown before the first probe.
	ConditionHealthy = "Healthy"
	// ConditionCredentialsAccepted is False when the registration's
	// kubeconfig breaks the manager's policy, or the member rejects its
	// credentials (401 or 403); True once a client was built from it and
	// the member accepted it.
	ConditionCredentialsAccepted = "CredentialsAccepted"
	// ConditionCredentialsExpiring is True when less than a tenth of the
	// credential's lifetime is left and no renewal has replaced it; the
	// message gives the expiry. False while the credential has time, or
	// has no expiry.
	ConditionCredentialsExpiring = "CredentialsExpiring"
)

// Common condition reasons. When CredentialsAccepted is False because the
// kubeconfig policy refused the Secret, its reason is the policy's own
// (for example ExecPluginRefused or InsecureTLSRefused), and its message
// says why, without any credential.
const (
	// ReasonEngaged (Ready True, or a ControllerCondition True): the
	// member is engaged.
	ReasonEngaged = "Engaged"
	// ReasonPending (Ready False): the member is not started yet.
	ReasonPending = "Pending"
	// ReasonConnecting (Ready False): the member's cache is starting.
	ReasonConnecting = "Connecting"
	// ReasonUnhealthy (Ready False): the member fails its probes; its work
	// is held.
	ReasonUnhealthy = "Unhealthy"
	// ReasonDisconnected (Ready False): the member was torn down and is
	// being reconnected with backoff.
	ReasonDisconnected = "Disconnected"
	// ReasonCredentialsRefused (Ready False): the member cannot start
	// because CredentialsAccepted is False.
	ReasonCredentialsRefused = "CredentialsRefused"
	// ReasonDeregistered (an Event): the cluster's registration is gone
	// and its MemberCluster was deleted.
	ReasonDeregistered = "Deregistered"
	// ReasonMoved (an Event): another replica owns the member now.
	ReasonMoved = "Moved"

	// ReasonNotProbed (Healthy Unknown): no probe has finished yet.
	ReasonNotProbed = "NotProbed"
	// ReasonProbeSucceeded (Healthy True): the last probe succeeded.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonProbeFailed (Healthy False): the failure threshold of probes
	// in a row failed.
	ReasonProbeFailed = "ProbeFailed"

	// ReasonAccepted (CredentialsAccepted True): the kubeconfig passed the
	// policy and the member accepted its credentials.
	ReasonAccepted = "Accepted"
	// ReasonUnauthorized (CredentialsAccepted False): the member answered
	// 401.
	ReasonUnauthorized = "Unauthorized"
	// ReasonForbidden (CredentialsAccepted False): the member answered
	// 403.
	ReasonForbidden = "Forbidden"

	// ReasonKindNotFound (a ControllerCondition False): a kind the
	// controller watches does not exist in the member, e.g. a CRD that is
	// not installed there. The member itself is unaffected.
	ReasonKindNotFound = "KindNotFound"
	// ReasonEngageFailed (a ControllerCondition False): engaging the
	// controller with the member failed for another reason, or timed out.
	ReasonEngageFailed = "EngageFailed"

	// ReasonNoExpiry (CredentialsExpiring False): the credential does not
	// expire, or its expiry is unknown (exec plugins, basic auth).
	ReasonNoExpiry = "NoExpiry"
	// ReasonValid (CredentialsExpiring False): more than a tenth of the
	// credential's lifetime is left.
	ReasonValid = "Valid"
	// ReasonExpiring (CredentialsExpiring True): less than a tenth of the
	// lifetime is left; a renewable token's renewals are failing.
	ReasonExpiring = "Expiring"
	// ReasonExpired (CredentialsExpiring True): the credential has expired.
	ReasonExpired = "Expired"
)

// MaxTokenLifetime is the longest lifetime of a token `fleet-manager
// register` or the manager's renewal asks a member for: how long a token
// outlives the revocation of its service account's right to mint
// successors. The member's API server may grant less.
const MaxTokenLifetime = 24 * time.Hour

// MaxRecentTransitions is how many state changes
// MemberClusterStatus.RecentTransitions keeps; older ones are dropped. The
// manager's journal keeps the longer history (`fleet-manager status`).
const MaxRecentTransitions = 10

// MaxLastErrorLength is the longest MemberClusterStatus.LastError the API
// server accepts, in characters; writers shorten longer errors.
const MaxLastErrorLength = 1024

// FleetLabel is set on every MemberCluster a manager keeps, to its fleet
// namespace. A manager touches only the MemberClusters of its own fleet.
const FleetLabel = "fleet.fleetkube.io/fleet"

// A fleet's identity is unique across hubs: a UID the manager creates once
// and keeps on the hub, in the ConfigMap FleetIdentityName of the fleet
// namespace under the key FleetIdentityKey. A manager stamps it, as
// FleetIDLabel, on everything it creates in a member, and touches in a
// member only what carries it: two hubs whose fleet namespaces have the
// same name never take each other's objects. Copying the ConfigMap to a
// new hub moves the fleet there.
const (
	FleetIDLabel      = "fleet.fleetkube.io/fleet-id"
	FleetIdentityName = "fleet-identity"
	FleetIdentityKey  = "id"
)

// MaxServerVersionLength is the longest MemberClusterStatus.ServerVersion
// the API accepts; the manager cuts a longer one.
const MaxServerVersionLength = 64

// MemberCluster is the hub's record of one member cluster: the Secret that
// registers it, and how the manager sees it (state, health, probes, engaged
// controllers). The manager creates it when it reads the registration,
// keeps its status current, and deletes it itself when the Secret goes (a
// cluster-scoped object cannot be owned by a namespaced Secret, and envtest
// runs no garbage collector). The Secret's labels are copied onto its
// metadata.labels, where placement selects members.
//
// MemberCluster is cluster-scoped and named after the cluster name: a
// cluster can be registered from Secrets in several namespaces (Cluster
// API, Argo CD), and its name is unique across the whole fleet. Cluster
// names are DNS-1123 subdomains, so every cluster name is a valid object
// name.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=fleet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`,description="Where the member is in its life"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Status of the Ready condition"
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`,description="Status of the Healthy condition"
// +kubebuilder:printcolumn:name="Last Probe",type=date,JSONPath=`.status.lastProbeTime`,description="When the last probe finished, which State, Ready and Healthy are as of: older than 18 probe intervals (72s at the default 4s), no manager probes the member and they are stale (fleet-manager get members shows it Unknown)"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.serverVersion`,description="Kubernetes version of the member's API server"
// +kubebuilder:printcolumn:name="Failures",type=integer,JSONPath=`.status.consecutiveFailures`,description="Failed probes in a row"
// +kubebuilder:printcolumn:name="Maintenance",type=string,JSONPath=`.spec.maintenance`,description="Cordon or Drain, when the member is taken out of rollouts"
// +kubebuilder:printcolumn:name="Replica",type=string,JSONPath=`.status.replica`,priority=1,description="The replica that owns the member, when replicas share the fleet"
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.spec.secretRef.format`,priority=1,description="Format of the registration Secret"
// +kubebuilder:printcolumn:name="Credentials Expire",type=date,JSONPath=`.status.credentials.expirationTime`,priority=1,description="When the member's credential expires"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MemberCluster struct {
	metav1.TypeMeta `json:",inline"`
	// metadata.name is the cluster name; metadata.labels are the
	// registration Secret's labels.
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the registration this member comes from.
	// +required
	Spec MemberClusterSpec `json:"spec"`

	// Status is how the manager sees the member. Only the manager writes
	// it.
	// +optional
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterSpec is the registration a member cluster comes from,
// which the manager writes from the Secret (an edit is overwritten), and
// the member's maintenance, which its operators set.
type MemberClusterSpec struct {
	// SecretRef is the Secret that registers the cluster.
	// +required
	SecretRef SecretReference `json:"secretRef"`
	// Maintenance takes the member out of rollouts: Cordon, and it takes
	// no new revision and no new Propagation; Drain, and its copies are
	// removed too, within each Propagation's disruption budget. Set by
	// fleet-manager cordon and drain, cleared by uncordon.
	// +optional
	Maintenance MaintenanceMode `json:"maintenance,omitempty"`
}

// MaintenanceMode takes a member out of rollouts.
//
// +kubebuilder:validation:Enum=Cordon;Drain
type MaintenanceMode string

const (
	// MaintenanceCordon: the member takes no new revision and no new
	// Propagation; what it has stays.
	MaintenanceCordon MaintenanceMode = "Cordon"
	// MaintenanceDrain: cordoned, and its copies are removed.
	MaintenanceDrain MaintenanceMode = "Drain"
)

// ConditionDrained, set while a member is drained, says whether every
// copy is removed from it, or what the removal waits for.
const ConditionDrained = "Drained"

// SecretReference names a registration Secret on the hub and its format.
type SecretReference struct {
	// Namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the Secret. It differs from the cluster name when the
	// format derives the name (Cluster API, Argo CD) or the Secret's
	// fleet.fleetkube.io/cluster-name annotation overrides it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Format is how the Secret holds the kubeconfig: native,
	// multicluster-runtime, cluster-api or argocd.
	// +required
	Format RegistrationFormat `json:"format"`
}

// MemberClusterStatus is how the manager sees a member cluster. It never
// holds credentials or response bodies.
type MemberClusterStatus struct {
	// ObservedGeneration is the metadata.generation the status was last
	// written for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Ready, Healthy and CredentialsAccepted, each with a
	// reason and a message. They are set from the first status write on.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replica names the fleet-manager replica that owns the member and
	// writes this status, when replicas share the fleet (run --shard);
	// empty when one manager works alone. State, Ready and Healthy are
	// current while that replica's Lease in the fleet namespace is: the
	// replica writes this status only when it changes.
	// +optional
	Replica string `json:"replica,omitempty"`

	// State is where the member is in its life. Set from the first status
	// write on.
	// +optional
	State MemberState `json:"state,omitempty"`

	// StateSince is when State last changed.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`

	// RecentTransitions are the last state changes, oldest first, at most
	// 10 (MaxRecentTransitions): the manager drops the oldest when it
	// appends an eleventh. The last one matches State and StateSince.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	RecentTransitions []StateTransition `json:"recentTransitions,omitempty"`

	// ServerVersion is the member API server's Kubernetes version
	// (e.g. v1.37.1), as it reported after the last connection.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ServerVersion string `json:"serverVersion,omitempty"`

	// ClusterID identifies the cluster the registration reaches: the UID
	// of its kube-system Namespace, read through the member's own
	// credentials when it connects, or, when they may not read it,
	// "sha256:" and a hash of its server URL and CA. Two names whose
	// members reach one cluster are duplicates: the name registered first
	// keeps the cluster, the other is refused (state Pending, reason
	// DuplicateCluster) and engages nothing.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ClusterID string `json:"clusterID,omitempty"`

	// LastProbeTime is when the last health probe finished. Unset before
	// the first probe.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// ObservedSecretVersion is the resourceVersion of the registration
	// object (spec.secretRef) as the manager read it when it last probed
	// the member with the credentials in it. A client that wrote the
	// Secret knows the manager has seen its write once this equals the
	// resourceVersion the write returned (register --wait waits for it).
	// Unset before the first such probe.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ObservedSecretVersion string `json:"observedSecretVersion,omitempty"`

	// LastProbeResult is the outcome of the last health probe. Unset
	// before the first probe.
	// +optional
	LastProbeResult ProbeResult `json:"lastProbeResult,omitempty"`

	// ConsecutiveFailures is the number of probes in a row that failed;
	// reset to 0 by a success.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ConsecutiveFailures int32 `json:"consecutiveFailures"`

	// EngagedControllers are the names of the fleet-wide controllers the
	// member is engaged with, sorted. Empty while the member is not
	// engaged.
	// +optional
	// +listType=set
	EngagedControllers []string `json:"engagedControllers,omitempty"`

	// ControllerConditions say, per fleet-wide controller, whether it works
	// with this member. A False entry, e.g. a kind missing in the member
	// (ReasonKindNotFound), holds back only that controller: the member
	// stays Ready and the other controllers go on.
	// +optional
	// +listType=map
	// +listMapKey=name
	ControllerConditions []ControllerCondition `json:"controllerConditions,omitempty"`

	// LastError is the last error the manager met with this member
	// (connecting, syncing, probing), shortened to 1024 characters
	// (MaxLastErrorLength); cleared when the member is Ready again. It never holds
	// credentials or response bodies.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`

	// Credentials describe the credential the manager reaches the member
	// with: its kind, its expiry and its renewals. Never the credential.
	// +optional
	Credentials *CredentialStatus `json:"credentials,omitempty"`

	// OwedRemovals are the removals of Propagations' copies the member
	// owes, from the manager's journal, oldest first: at most 20
	// (MaxOwedRemovals). They are carried out when the member is Ready.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	OwedRemovals []OwedRemoval `json:"owedRemovals,omitempty"`

	// OwedRemovalCount counts every removal the member owes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OwedRemovalCount int32 `json:"owedRemovalCount,omitempty"`

	// Drain is where the member's drain stands, while spec.maintenance is
	// Drain.
	// +optional
	Drain *DrainStatus `json:"drain,omitempty"`
}

// DrainStatus is where a member's drain stands.
type DrainStatus struct {
	// Remaining counts the Propagations whose copies the member still
	// holds.
	// +optional
	Remaining int32 `json:"remaining"`
	// Message says what the drain waits for, naming a Propagation.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// MaxOwedRemovals bounds MemberClusterStatus.OwedRemovals.
const MaxOwedRemovals = 20

// OwedRemoval is a removal of a Propagation's copies a member owes.
type OwedRemoval struct {
	// Propagation is the Propagation's namespace/name, or a
	// ClusterPropagation's name.
	// +kubebuilder:validation:MaxLength=317
	Propagation string `json:"propagation"`

	// Reason says why the removal was not carried out when it was decided.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Reason string `json:"reason,omitempty"`

	// Since is when the removal was decided.
	Since metav1.Time `json:"since"`
}

// CredentialType is the kind of credential a member's kubeconfig holds.
// +kubebuilder:validation:Enum=Token;ClientCertificate;ExecPlugin;BasicAuth;None
type CredentialType string

const (
	CredentialTypeToken             CredentialType = "Token"
	CredentialTypeClientCertificate CredentialType = "ClientCertificate"
	CredentialTypeExecPlugin        CredentialType = "ExecPlugin"
	CredentialTypeBasicAuth         CredentialType = "BasicAuth"
	CredentialTypeNone              CredentialType = "None"
)

// CredentialStatus describes a member's credential without holding it.
type CredentialStatus struct {
	// Type is the kind of credential; with both a token and a client
	// certificate, the token.
	Type CredentialType `json:"type"`
	// ExpirationTime is when the credential stops working: a token's exp
	// claim, a client certificate's notAfter. Unset when it does not
	// expire or the manager cannot tell.
	// +optional
	ExpirationTime *metav1.Time `json:"expirationTime,omitempty"`
	// Renewable is true for a service account token in a native
	// registration Secret, which the manager renews through the member's
	// TokenRequest API at about 80% of its lifetime and writes back into
	// the Secret.
	// +optional
	Renewable bool `json:"renewable,omitempty"`
	// LastRenewalTime is when the manager last wrote a renewed token into
	// the Secret.
	// +optional
	LastRenewalTime *metav1.Time `json:"lastRenewalTime,omitempty"`
	// LastRenewalError is why the last renewal failed; cleared by a
	// renewal that succeeds. It never holds the token.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastRenewalError string `json:"lastRenewalError,omitempty"`
}

// StateTransition is one change of a member's state.
type StateTransition struct {
	// State is the state the member entered.
	// +required
	State MemberState `json:"state"`
	// Time is when it entered it.
	// +required
	Time metav1.Time `json:"time"`
	// Reason is a CamelCase word for why, e.g. ProbeFailed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// ControllerCondition is how one fleet-wide controller works with a member.
type ControllerCondition struct {
	// Name is the controller's name, as given to Named in its builder.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Status is True when the controller works with the member, False
	// when it cannot, Unknown while it is being engaged.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`
	// Reason is a CamelCase word for Status, e.g. KindNotFound.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
	Reason string `json:"reason"`
	// Message says what is wrong in a sentence, e.g. which kind is
	// missing.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Status last changed.
	// +required
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}

// SetState records that the member entered state at now, for reason: it
// sets State and StateSince and appends to RecentTransitions, dropping the
// oldest beyond MaxRecentTransitions. It changes nothing and returns false
// when state and reason are the current ones.
func (s *MemberClusterStatus) SetState(state MemberState, reason string, now metav1.Time) bool {
	if n := len(s.RecentTransitions); s.State == state && (n == 0 || s.RecentTransitions[n-1].Reason == reason) {
		return false
	}
	s.State = state
	s.StateSince = &now
	s.RecentTransitions = append(s.RecentTransitions, StateTransition{State: state, Time: now, Reason: reason})
	if n := len(s.RecentTransitions) - MaxRecentTransitions; n > 0 {
		s.RecentTransitions = append([]StateTransition(nil), s.RecentTransitions[n:]...)
	}
	return true
}

// MemberClusterList is a list of MemberClusters.
//
// +kubebuilder:object:root=true
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the MemberClusters.
	Items []MemberCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MemberCluster{}, &MemberClusterList{})
}
