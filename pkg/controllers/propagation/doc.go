// Package propagation is the built-in Propagation controller: it keeps
// hub objects of a Propagation's namespace present and identical in the
// same namespace of the members the Propagation selects.
//
// It is one fleet controller (fleet.NewControllerManagedBy) with two kinds
// of request. A member request, {member, Propagation}, makes that member's
// copies what the Propagation wants: each selected hub object is applied
// with server-side apply under the field manager "fleet-manager", server-set
// fields stripped, and each copy no longer wanted is deleted (or, under
// deletion: Orphan, stripped of what made it a copy). A hub request,
// {"", Propagation}, sums up and writes the Propagation's status from the
// members' results, at most once per [StatusInterval] however many
// members report (the sum that completes the picture, at once), and owns
// its finalizer; a write that conflicts with a
// newer version of the Propagation is retried.
//
// # Which fleet
//
// A Propagation belongs to the fleet whose namespace its label
// fleet.fleetkube.io/fleet names; one without it is claimed by the first
// manager that handles it, which sets the label with its finalizer under
// optimistic concurrency. Every other fleet leaves it alone: no member
// run, revision, status, finalizer or metric. A members selector that
// does not parse deselects no one: each member is held, Failed
// InvalidSelector, its copies kept, nothing applied or owed, and the
// rollout frozen.
//
// # Trust
//
// A Propagation in namespace X copies only what a workload in X could
// already read: objects of X, into X, never a cluster-scoped object (a
// Propagation fails them, ClusterScopedKind); and never the fleet's
// credentials. A ClusterPropagation, which only a cluster admin should
// be allowed to write, copies cluster-scoped objects only (it fails
// namespaced kinds, NamespacedKind), never the fleet namespace itself;
// the controller handles it as the Propagation of no namespace, its
// copies, of no namespace either, read through a copy cache of
// cluster-scoped objects.
// Writing Propagations in X is as good as reading, in the members, X's
// other objects of every kind the manager reads there, and, through
// overrides, as writing them there; writing Envelopes in X is as good as
// writing any namespaced object in X in the members. Grant both only to
// whom may write those kinds in X. Refused, each hub object (and each
// manifest of an Envelope) by itself, before anything is applied, with
// the result Refused naming the rule:
//   - every object of the fleet namespace: a Propagation there copies
//     nothing, and the manager does not read that namespace for it;
//   - a Secret any registration format would read, enabled or not:
//     labelled fleet.fleetkube.io/kubeconfig or
//     sigs.k8s.io/multicluster-runtime-kubeconfig (any value), of type
//     cluster.x-k8s.io/secret (any name: Cluster API's kubeconfig, CA,
//     etcd and service account key Secrets too), named
//     <anything>-kubeconfig (Cluster API's kubeconfig name, any type), or
//     labelled argocd.argoproj.io/secret-type (any value: cluster,
//     repository and repo-creds Secrets all hold credentials);
//   - a Secret whose key kubeconfig or value (in data, or an Envelope
//     manifest's stringData) holds a kubeconfig with at least one cluster
//     and one user, whatever its name, type or labels;
//   - a Secret of type kubernetes.io/service-account-token or
//     bootstrap.kubernetes.io/token.
//
// The Propagation's other objects are copied as usual. A copy this fleet
// made of an object now refused is no longer wanted: it is removed (or,
// under deletion: Orphan, let go), as when the object stops matching.
//
// A fleet has an identity unique across hubs (fleet.Manager.FleetID).
// Every copy carries it, as the label fleet.fleetkube.io/fleet-id beside
// fleet.fleetkube.io/fleet (the fleet namespace's name), and so does a
// namespace the manager creates in a member. A copy is this fleet's only
// if it carries this identity: another fleet's copy, even of a fleet
// whose namespace has the same name, is never applied over, deleted,
// orphaned or recorded in the journal, and adopt does not take it; where
// a hub object wants its name, the member reports AlreadyExists. (To move
// a fleet to a new hub, copy its identity ConfigMap.) A copy stamped
// before fleets had an identity, labelled with this fleet namespace's
// name, is this fleet's only when proven: its source UID is the UID of
// the hub object applied in its place now, or the journal holds it with
// its content hash, which covers that UID. Such a copy is stamped with
// the identity at its next apply; one not proven is left alone and
// reported as AlreadyExists, so an upgrade deletes nothing it cannot
// prove its own.
//
// A copy is removed only when the manager is sure nothing else goes with
// it. A container (a Namespace, whose deletion deletes what it holds, or a
// CustomResourceDefinition, whose deletion deletes its custom resources;
// see isContainer) is deleted only when it holds nothing but the
// Propagation's own copies and what the member's controllers make in every
// namespace; otherwise, or on any doubt (discovery or a list failing, a
// kind the manager may not list), it is orphaned, on every removal path,
// and the member's result and a Warning Event say so (ContainerNotEmpty).
// adopt takes over an object the member made, marked AdoptedAnnotation
// before it is first applied; such a copy is orphaned, never deleted
// (AdoptedOrphaned). A namespace the manager created for a Propagation's
// copies is taken over by a ClusterPropagation only under adopt, and is
// not marked: it follows the container rule.
//
// What a member answers never reaches the hub verbatim: a failed request
// is told in the manager's words, with the API status code and reason.
//
// # Tenancy
//
// Where tenancy is enforced (Options.Tenancy; Auto reads the fleet
// identity ConfigMap), a member the Propagation's namespace may not reach
// (package tenancy, from the hub's TenancyPolicies and Namespaces, watched
// in the manager's cache) is not selected, in the member run, the status
// and the rollout's plan: its copies are removed as on a deselection, and
// status.excludedMembers names it. A copy, after overrides, of a kind not
// allowed there is not applied (KindNotAllowed) and, made before, is
// removed. A reach in doubt (a policy that does not parse, a read that
// fails) holds, TenancyUnknown; until the mode and policies are first
// read, a namespaced Propagation's requests wait. ClusterPropagations are
// outside tenancy.
//
// # Reads
//
// Hub objects are read through one cache per namespace that has
// Propagations, so the manager needs read access only there; it stops
// with the namespace's last Propagation. A hub object's change asks again
// only the Propagations whose resources select it, before or after the
// change (a refused object is selected too): an object no Propagation
// selects costs no member reconcile. A member's copies are read the same
// way: one copy cache per namespace that has Propagations, or copies or
// owed removals in the journal, holding only objects labelled as copies
// of a fleet of this namespace's name, one informer per kind that
// namespace needs (its Propagations' kinds, and the journal's copies and
// owed removals there), started by the first run that reads it; so a
// member registered with rights in some namespaces only (register
// --namespaces) receives their Propagations. A sweep (Options.WatchSweep)
// stops an informer no run read since its last look and nothing needs; a
// run that reads a stopped one retries, never reads it as empty. Which copies are this
// fleet's is decided by their identity (see Trust). A Propagation's
// namespace is created in a member that lacks it; a manager that may
// neither read nor create Namespaces goes on, and the apply tells. A copy
// whose content hash and fields match what would be applied costs no
// request: a resync or a restart of an unchanged fleet writes nothing.
//
// One member's trouble stays its own: each request to a member (not its
// watches) and each wait for a kind's informer to sync takes at most
// 30 s, and one member's requests hold at most a quarter of the workers.
//
// # Drift
//
// A field the manager applied that has another value in the member is
// drift, as package apply judges it (a field another manager claims on
// purpose is theirs): Correct applies the copy again, Report lists the
// field in status, records a Warning Event and counts it.
//
// # Order
//
// Each member applies its copies in the steps package apply orders them
// in: by wave (ResourceSelector.Wave), Namespaces and CRDs first. The
// copies of a step are applied once every copy of the earlier steps is
// applied and Available; until then the later copies are left as they
// are, and the member is Pending, WaitingForWave, naming what it waits
// for. A kind the member does not serve yet is no failure: its copies
// wait for its CRD (Pending, WaitingForKind), tried again after a second,
// then twice as long each time, up to a minute, or at once when a CRD the
// run applied defines it and is Available. Copies no longer wanted are
// removed in the reverse order.
//
// # Overrides
//
// spec.overrides patch the copy a member is given, as package apply
// says (apply.DesiredCopy). The patched copy is the intent: its content
// hash, and drift, Correct or Report, are of it. A rule that does not
// apply fails each member it selects, OverrideFailed, naming the rule
// and the operation, and that copy is left as it is there.
//
// # Availability
//
// Each copy is judged as its member holds it, status included, by
// package health: by its kind's built-in rule, or by its resource's
// availableWhen, a CEL expression over the copy as self. A rule health
// refuses (AvailabilityRuleRefused), or one that does not compile, is
// found before anything is applied (and when the hub sums the
// Propagation up), and holds the members' copies as they are. A kind
// with neither is not tracked, and counts as Available. A member whose copies are all
// applied, in sync and Available is counted in status.available and not
// listed; Ready needs every selected member so. A member that is not
// Ready is Pending, MemberUnhealthy, its availability Unknown: what was
// known of it is stale, and is not counted. With
// spec.progressDeadlineSeconds, a member that has not converged (every
// copy applied and Available) that long after it was given a change (the
// content it applies changed) or its copies stopped being Available
// fails, ProgressDeadlineExceeded, with a Warning Event. The deadline's
// clock is kept in memory; a restarted manager starts it from the
// member's status entry, so a deadline that ran fires on time.
//
// # Failures
//
// A member's failure (Forbidden, a missing namespace or kind, Invalid,
// AlreadyExists, Refused...) is in the Propagation's status, and each new
// reason is a Warning Event on the Propagation, with the failure's reason,
// naming the member and related to its MemberCluster; the first run that
// applies again is a Normal Event Applied. A failure is logged at info
// level, at most once per Propagation, member and reason every 10 minutes.
// A failure that stays tells nothing new, and is tried again after a
// second, then twice as long each time, up to a minute: what cures it (a
// right granted, a namespace created in the member) is no event
// the manager sees, and shows within seconds. A member's new kubeconfig
// (a rotated or replaced credential) starts its failures' back-off over
// and tries them at once. Results are kept in memory: a restarted manager
// tells a failure that stays once more.
//
// # Lifecycle
//
// [Add] adds the controller to a fleet.Manager before it starts; it runs on
// the leader with the manager. While the hub is engaged the hub caches run
// and registry events ask every Propagation again about the member that
// changed. When the controller engages a member it asks it about every
// Propagation and journal entry; its copy caches start as those runs read
// them, and all stop when it leaves. Besides its watches of Propagations, the controller has two
// sources: on the hub, its engagement, which starts the hub caches and
// hands the controller's queue on to the requests the controller makes
// itself (a hub object or a member that changed, a status to sum up, an
// owed removal to retry), which are dropped until then; in each member, its
// copy caches, whose events ask for their Propagation there. A deleted
// Propagation keeps its finalizer until each member removed its copies, or
// owes their removal: a member that is not Ready, that failed to remove
// them (also one that may not list a kind the Propagation copied: its
// copies cannot be proven gone), or that did not report within 30 s.
//
// # Journal
//
// What the hub cannot say is kept in a [journal.Journal] (Options.Journal):
// each copy is recorded before its first apply, and each owed removal
// before the finalizer goes. A member's owed removals are carried out
// before any other request of the member, once it is engaged and each time
// it is Ready again, including after a restart: one request carries them
// out, holding no lock, while the member's other requests wait for it; a
// removal that fails is tried again. The journal forgets them once the
// member confirms the copies gone. A member that leaves the fleet (its
// registration deleted, or of a format not enabled on this run) is
// remembered with the time it left, across restarts, and forgotten only
// once gone for Options.ForgetAfter ([DefaultForgetAfter], 7 days): the
// same name registered again within it gets what it owes. A member's
// copies are recorded again as each of its informers first syncs, so a
// journal that was lost catches up.
//
// Owed removals are mirrored on the hub, for the next leader, whose
// journal is its own: in 16 ConfigMaps of the fleet namespace
// ([OwedRemovalsConfigMaps], a member's by a hash of its name), labelled
// with the fleet's identity, holding each member's owed removals and when
// it left. They are written before the finalizer goes, merged into the
// journal when the hub is engaged (only those with this fleet's identity),
// and follow the journal within a second of a change and at every sweep.
// Each member's owed removals are also published, oldest first, in
// Options.OwedRemovals ([NewOwedRemovals]) when set, which the MemberCluster
// controller shows.
//
// # Revisions and rollouts
//
// The hub request makes a PropagationRevision of what a Propagation
// applies whenever that changes (revise; under strategy All the member
// run that first sees the change makes it, at most one per
// StatusInterval, so that every member labels a copy in the write that
// changes it: revisionNumber): its resources and overrides,
// the hub objects they select as authored (Envelopes unpacked), and the
// problems met reading them, numbered one more than the newest, labelled
// with the hash of that content, owned by the Propagation, in its
// namespace (a ClusterPropagation's in the fleet namespace). It prunes
// the oldest past revisionHistoryLimit (default 10), never the one rolled
// out nor one a member is given. [rollout.PlanOf], a pure function that owns
// the concurrency guard (see package rollout), then plans status.rollout:
// which revision each member is given, the phase, and which drained
// members may remove their copies now; the controller writes it and tells
// a rollout that stopped, failed or completed as an Event. The target is
// the newest revision, or the one spec.revision pins. A member not in
// maintenance, of an All Propagation neither paused nor pinned, applies
// the hub's content directly, as before revisions (allAtOnce). Any other
// member request applies the content of the revision its member is
// given, checked against its hash (RevisionInvalid, and nothing applied,
// if it does not match), and judges drift against it. A drained member's
// drain is published in Options.Drains ([NewDrains]), which the
// MemberCluster controller shows.
// Members' progress is kept in memory: after a restart, a member given
// the revision counts as in flight until it reports.
//
// # Replicas that share the fleet
//
// With fleet.Options.Shard every replica runs the controller, and a
// member's requests run only on its owner. Each replica writes its shard
// of a Propagation's status (status.shards: the counts of the members it
// owns, and those not Applied, at most MaxShardMembers), with optimistic
// concurrency; the replica Manager.OwnsKey picks sums the shards of the
// live replicas up into the status, dropping the others'. A deleted
// Propagation goes once every live replica has marked its shard
// released: its members removed their copies or owe their removal. Each
// replica writes the mirror entries of the registered members it owns
// only; a member it takes over has its mirrored owed removals merged into
// the journal first, so the new owner carries out what the old one
// recorded. A member whose registration is gone keeps its mirror entry,
// as last written, stamped with when it left, until it has been gone for
// Options.ForgetAfter; a member only down is registered, and keeps it.
// The replica that sums a Propagation up makes its revisions and plans
// its rollout, from the shards for the members other replicas own.
package propagation
