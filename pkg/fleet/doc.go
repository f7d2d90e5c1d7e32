// Package fleet is what fleet-wide controllers are written against.
//
// # Setup
//
// [New] wraps the hub's controller-runtime manager in a [Manager]. Beside
// the hub manager it runs three things: the provider, one hub controller per
// registration format (native, and those of multicluster-runtime, Cluster
// API and Argo CD when enabled), each reading its Secrets from a cache of
// its own and keeping the member pool in step with them; a cluster name
// claimed by two Secrets engages neither until one goes; the pool of members (package cluster); and the
// engager (package engage), which hands the hub and every member to every
// fleet controller.
//
// # Usage
//
// [NewControllerManagedBy] builds a fleet controller. Its reconciler gets
// a [Request], {ClusterName, NamespacedName}, with "" for the hub, and
// reaches the cluster through [Manager.GetCluster]. One controller has one
// shared queue; every watched cluster feeds it. [Manager.GetFieldIndexer]
// adds an index to the hub and to every member, present and future.
//
// # Lifecycle
//
// Start the Manager like any manager. With leader election only the
// leader runs member caches and fleet controllers. A member that leaves,
// because its Secret was deleted or changed, is disengaged: its handlers
// are removed, its queued requests are dropped when dequeued, a reconcile
// already running for it has its context cancelled, and everything it
// started ends before the pool lets go of it. A refused Secret is logged
// with its reason and reported as an Event on the Secret, and affects no
// other member.
package fleet
