// Package fleet is what fleet-wide controllers are written against.
//
// # Setup
//
// [New] wraps the hub's controller-runtime manager in a [Manager]. Beside
// the hub manager it runs:
//   - the fleet's identity, unique across hubs, which every replica reads
//     from (or, first, creates in) ConfigMap fleet-identity of the fleet
//     namespace, retrying until the hub gives it. [Manager.FleetID] waits
//     for it; fleet controllers stamp it on what they create in members
//     and take nothing there for the fleet's own that lacks it;
//   - the registry (package registry), which reads the registration
//     Secrets of every enabled format (native, and those of
//     multicluster-runtime, Cluster API and Argo CD) and owns each cluster
//     name's claims, refusal, labels and member state. Everything below
//     subscribes to it; nothing is told by callback;
//   - the pool of members (package member), which follows the registry,
//     one member per accepted cluster, and connects, probes, disconnects
//     and reconnects them, writing their states, probes and refusals back
//     to the registry, and owns their per-member metrics;
//   - the engager (package engage), which hands the hub and every member
//     to every fleet controller;
//   - the lifecycle, which holds an Unhealthy member's work in every
//     fleet controller's queue, asks cluster filters again when labels
//     change, reports refusals, and makes the engagement and reconcile
//     series on controller-runtime's registry follow the registry (a
//     cluster that is removed or refused has no series);
//   - the fleet controllers built on it, such as the MemberCluster
//     controller (package controllers/membercluster) and the token
//     renewal (package controllers/tokenrenewal), added with their own
//     Add.
//
// # Usage
//
// [NewControllerManagedBy] builds a fleet controller. Its reconciler gets
// a [Request], {ClusterName, NamespacedName}, with "" for the hub, and
// reaches the cluster through [Manager.GetCluster]. One controller has one
// shared queue, fair across clusters; every watched cluster feeds it.
// [Builder.WatchesClusterSource] starts a source of the controller's own,
// such as a cache of its own, in each cluster it engages.
// [Manager.GetFieldIndexer]
// adds an index to the hub and to every member, present and future;
// [Manager.GetMemberFieldIndexer] to every member only.
// [Manager.EngageMembers] hands any engage.Aware the members this replica
// owns, as the fleet controllers are handed them: what package mcprovider
// runs multicluster-runtime controllers on.
//
// # Lifecycle
//
// [New] sets the process's garbage collector target to [DefaultGCPercent]
// unless GOGC is set or Options.GCPercent says otherwise: a fleet
// manager's heap is mostly long-lived caches.
// Start the Manager like any manager. With leader election only the
// leader runs member caches and fleet controllers; the registry's Secret
// caches run on every replica, and [registry.Registry.Synced] says when
// they have been read once. The hub client gets [DefaultHubQPS] and
// [DefaultHubBurst] when its config sets no limit; its requests wait up to
// 30 s for a hub that refuses connections, so informers resume as soon as
// the hub is back, and each kind of request the hub denies is logged once. The requests of an
// Unhealthy member are held in the queue, without a worker. A member that
// leaves, because its Secret was deleted or changed, it was Disconnected or
// a cluster filter stopped accepting it, is disengaged: its handlers are
// removed, a reconcile already running for it has its context cancelled
// and is waited for, its queued requests are dropped from the queue, and
// everything it started ends before the pool lets go of it. A member that
// is engaged again gets the requests of the hub objects that exist then.
// A refused Secret is logged with its reason, reported as an Event on the Secret and
// on its MemberCluster, and affects no other member.
//
// # Replicas that share the fleet
//
// With Options.Shard (package shard) there is no leader: every replica
// runs, and owns the members rendezvous hashing gives it among the live
// replicas. Only the owner runs a member and reconciles its requests;
// [Manager.GetCluster] of another's member returns an error wrapping
// [ErrNotOwned]. A member this replica takes over runs with its work held
// until the previous owner has let it go. While the replica cannot
// prove by its clock that it holds its Lease (shard.Replica.Proved), it
// hands no member's request to a reconciler, refuses every request that
// could change a member before it is sent, and GetCluster returns
// ErrNotOwned. [Manager.Owns] says whose work a cluster's is now,
// [Manager.OwnsKey] picks one replica for hub work of any key. Hub
// requests reach every replica.
package fleet
