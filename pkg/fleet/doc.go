// Package fleet is what fleet-wide controllers are written against.
//
// # Setup
//
// [New] wraps the hub's controller-runtime manager in a [Manager]. Beside
// the hub manager it runs:
//   - the provider: one hub controller per registration format (native,
//     and those of multicluster-runtime, Cluster API and Argo CD when
//     enabled), each reading its Secrets from a cache of its own and
//     keeping the member pool in step with them, several Secrets at once
//     but each cluster name in order. A cluster name claimed by two
//     Secrets engages neither until one goes;
//   - the pool of members (package cluster), which connects, probes,
//     disconnects and reconnects them;
//   - the engager (package engage), which hands the hub and every member
//     to every fleet controller;
//   - the MemberCluster controller, which keeps one MemberCluster per
//     registered cluster when the hub has the CRD;
//   - per-cluster metrics on controller-runtime's registry.
//
// # Usage
//
// [NewControllerManagedBy] builds a fleet controller. Its reconciler gets
// a [Request], {ClusterName, NamespacedName}, with "" for the hub, and
// reaches the cluster through [Manager.GetCluster]. One controller has one
// shared queue, fair across clusters; every watched cluster feeds it.
// [Manager.GetFieldIndexer]
// adds an index to the hub and to every member, present and future.
//
// # Lifecycle
//
// Start the Manager like any manager. With leader election only the
// leader runs member caches and fleet controllers. The requests of an
// Unhealthy member are held in the queue, without a worker. A member that
// leaves, because its Secret was deleted or changed or it was
// Disconnected, is disengaged: its handlers are removed, its queued
// requests are dropped from the queue, a reconcile already running for it
// has its context cancelled, and
// everything it started ends before the pool lets go of it. A refused
// Secret is logged with its reason, reported as an Event on the Secret and
// on its MemberCluster, and affects no other member.
package fleet
