// Package shard shares one fleet between replicas of fleet-manager: each
// member is owned by one live replica, which alone runs it (its
// cluster.Cluster, cache, transport, probes and engagements) and does its
// hub work (MemberCluster status, renewal). Ownership is written into the
// registry (registry.Cluster.Ownership), which every part of the manager
// already follows: the member pool runs only what this replica owns or
// takes over, fleet controllers hold and drop the rest, and
// fleet.Manager.GetCluster refuses it.
//
// # Membership
//
// Each replica holds a coordination.k8s.io Lease of its own in the fleet
// namespace, named after it (the pod's name), labelled
// fleet.fleetkube.io/replica, and renews it every RetryPeriod. Hub writes
// grow with replicas, not members: one renewal per replica per
// RetryPeriod, plus a few per handoff. The live replicas are those whose
// Lease changed within its duration, as this replica saw it and the hub
// confirms (below); the
// view is the live replicas that are not leaving. A replica counts
// itself one RetryPeriod after it first wrote its Lease, so that replicas
// starting together see each other first and none takes every member.
//
// # Ownership
//
// A cluster's owner is picked among the view by rendezvous hashing of its
// name: every replica that sees the same view picks the same owner, and a
// replica joining or leaving moves only the names it wins or held, about
// 1/N of them.
//
// # Handoff
//
// A view change hands members over make-before-break, through marks on
// the Leases, so that each step costs one write per replica, not per
// member:
//  1. each replica starts the members it now owns and did not run
//     (Incoming): they connect, their caches sync, their work is held.
//     Once all are warm (or HandoffTimeout passed) it marks the view
//     prepared;
//  2. once every replica of the view is prepared, each stops the members
//     it no longer owns, waiting for their reconciles in flight, and
//     marks the view released;
//  3. once every live replica has released the view, each starts the
//     work of its Incoming members.
//
// A member that stays with its owner never pauses; one that moves pauses
// from its old owner's release to its new owner's start.
//
// # Fencing
//
// A replica acts only while it can prove it holds its Lease: its Lease
// cache has shown a renewal this process sent less than RenewDeadline
// ago, without a gap since its last pass. Without that proof it is
// fenced: it stops every member at once and takes none until it has it
// again. The cache shows changes in the hub's order, so a cache that shows
// a write sent at t is at least as fresh as the hub at t. A renewal
// waits for the hub up to RenewDeadline: a slow hub is not a lost Lease.
// A replica whose cache stops showing its writes (a stalled watch) also
// stops renewing, so that the others take its members over.
//
// The others take a replica's members only once its Lease has not
// changed for LeaseDuration, measured on their own clocks from when their
// cache showed it change, never by comparing its renewTime with their
// clock, as client-go's leader election does: clock skew between replicas
// does not matter, only the rates of their clocks. And only once the hub
// itself, read with a quorum read, still holds the version their cache
// shows: a cache that lags makes a live replica look dead.
//
// Between passes, [Replica.Proved] answers by the clock: false from the
// renew deadline of the last renewal proved, and after a pass that
// fenced. package fleet checks it, besides the member's ownership in the
// registry, as it hands a member's request to a reconciler and before
// each request that could change a member leaves the process, so that a
// process that wakes from a pause acts on nothing before its next pass
// fences it. What remains is a write checked before the pause and sent
// after it: it was checked while the proof held, so LeaseDuration −
// RenewDeadline before any other replica may take its member, which
// covers it if it lands within that margin. Fencing tokens checked by
// the storage are not possible: members' API servers are not ours to
// change.
//
// A replica leaving (its context ends, as on SIGTERM) marks its Lease
// leaving, so that the view no longer holds it, hands its members over
// while they still run (at most HandoffTimeout), then deletes its Lease.
// A replica that crashed is dropped from the view once its Lease expires.
//
// # Published facts
//
// A replica also says on its Lease what its peers must agree with: the
// tenancy mode it resolved ([Replica.SetTenancy], TenancyAnnotation),
// which the others read, for every live replica, with
// [Replica.Tenancies].
//
// # Lifecycle
//
// [New] builds a [Replica] from Options; fleet.New does it for
// fleet.Options.Shard. [Replica.Start] runs until its context ends, then
// hands over and returns; it runs beside the member pool, which stops
// after it. [Replica.Owns] answers for hub work keyed by anything, such as
// a Propagation's summary status.
package shard
