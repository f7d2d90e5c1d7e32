// Package clusterprofile publishes the fleet in SIG-Multicluster's
// Cluster Inventory API: a ClusterProfile per member, kept by the leader
// from the registry and the member's MemberCluster, and deleted when the
// member goes.
//
// # Lifecycle
//
// [Add] adds the controller to a fleet manager; it runs on the leader,
// from the registry's first full read of its registrations on. Each
// profile it keeps is named after its member, in the namespace it was
// given, labelled x-k8s.io/cluster-manager: fleet-manager and with the
// fleet's label; profiles without both are never touched.
package clusterprofile
