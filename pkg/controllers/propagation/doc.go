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
// {"", Propagation}, writes the Propagation's status from the members'
// results, at most once per [StatusInterval], and owns its finalizer.
//
// # Reads
//
// Hub objects are read through one cache per namespace that has
// Propagations, so the manager needs read access only there. In each
// member a copy cache holds only objects labelled as copies of this
// fleet, one informer per kind Propagations copy. A copy whose content
// hash and fields match what would be applied costs no request: a resync
// or a restart of an unchanged fleet writes nothing.
//
// # Drift
//
// A field the manager applied that has another value in the member is
// drift: Correct applies the copy again, Report lists the field in status,
// records a Warning Event and counts it. A field another manager claims on
// purpose (by server-side apply, or through a subresource, as an autoscaler
// writes replicas through scale) is theirs: neither drift nor applied.
//
// # Lifecycle
//
// [Add] adds the controller to a fleet.Manager before it starts; it runs on
// the leader with the manager. While the hub is engaged the hub caches run
// and registry events ask every Propagation again about the member that
// changed. A member's copy cache starts when the controller engages the
// member, which then asks it about every Propagation, and stops when it
// leaves. A deleted Propagation keeps its finalizer until each member
// removed its copies, or owes their removal: a member that is not Ready,
// that failed to remove them, or that did not report within 30 s.
//
// # Journal
//
// What the hub cannot say is kept in a [journal.Journal] (Options.Journal):
// each copy is recorded before its first apply, and each owed removal
// before the finalizer goes. A member's owed removals are carried out
// before any other request of the member, once it is engaged and each time
// it is Ready again, including after a restart; the journal forgets them
// once the member confirms the copies gone, and forgets a member that
// leaves the fleet, or that left it while no manager led, once the
// registry has read every registration. An engaged member's copies found in its cache are
// recorded again, so a journal that was lost or kept by another replica
// catches up; then only removals owed for deleted Propagations whose kinds
// no Propagation copies are lost with it.
package propagation
