// Package clusterprofile publishes the fleet in SIG-Multicluster's
// Cluster Inventory API: a ClusterProfile per registered cluster name,
// kept by the leader from the registry and the member's MemberCluster,
// and deleted when the name is no longer registered.
//
// # Lifecycle
//
// [Add] adds the controller to a fleet manager; it runs on the leader,
// from the registry's first full read of its registrations on. Each
// profile it keeps is named after its member, in the namespace it was
// given, labelled x-k8s.io/cluster-manager: fleet-manager and with the
// fleet's label; profiles without both are never touched. A refused
// registration (a name conflict, a kubeconfig the policy refuses) keeps
// its profile, with ControlPlaneHealthy Unknown and the refusal's reason,
// and no access provider: consumers of the inventory see the cluster
// unhealthy, not gone.
//
// # What is published
//
// As KEP-4322 asks: the member's labels as the profile's labels, and its
// KEP-2149 ClusterProperty objects, read every PropertiesInterval, as
// status.properties, names and values unchanged; no property of the
// manager's own. A read that fails keeps what was published.
// The member's server, TLS server name, CA and proxy, with no userinfo in
// any URL, and the member's name as its exec plugin's clusterName; never a
// credential. No fleet-manager reads a profile a fleet-manager published
// as a registration (see registry.PublishedClusterManager).
package clusterprofile
