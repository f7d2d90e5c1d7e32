// Package apply holds the pure parts of one member's run of a
// Propagation: the copy the member should hold of each hub object, the
// order the copies are applied and removed in, and what counts as drift.
// It reads no cluster and keeps no state; the Propagation controller calls
// it from each member run, then applies, waits and removes by what it
// says. It may use package health; it never uses the controller.
//
// # The desired copy
//
// [DesiredCopy] is the hub object as its author wrote it (no status, no
// server-set metadata, none of the fields a hub server or controller
// fills in, such as a Service's cluster IPs and node ports, kept only
// where the author chose them), patched by spec.overrides, then labelled
// and annotated as a copy of the Propagation in this fleet, with a content
// hash of all of it. Each override that selects the [Member] (its
// MemberSelector, by name and labels) and the copy (apiVersion, kind,
// name) applies, in order, as an RFC 6902 JSON patch (an add into a
// missing parent fails) or an RFC 7386 merge patch (which replaces lists
// whole), with ${MEMBER_NAME} and ${MEMBER_LABEL:<key>} in string values
// replaced. A rule may change neither what names the copy nor what the
// member's API server owns. A rule that does not apply is an error naming
// it, the copy and the operation; the copy is then not changed at all.
// A copy [Overridden] says no rule may change is the same in every
// member, so the controller builds it once for all of them.
// [DeletionPolicy] is the policy a copy carries.
//
// # Order
//
// [Order] splits a member's copies into steps: by wave (the wave of the
// resource that selects them), and within a wave Namespaces and
// CustomResourceDefinitions first; each step sorted by kind and name, so
// that runs apply in the same order. The controller applies a step once
// every copy of the earlier steps is Available, and removes in the reverse
// order, a copy no resource selects at [RemovalWave]: the wave of the
// first resource of its kind, 0 once there is none.
//
// # Drift
//
// [Drift] lists the fields of the desired copy that the member's copy
// does not hold, leaving out what the member adds (defaults, other
// managers' fields) and the revision label. A field another manager claims
// on purpose ([ClaimedByOthers]: by server-side apply, or through a
// subresource, as an autoscaler writes replicas through scale) is theirs:
// not drift, and [WithoutClaims] takes it out of what is applied. A plain
// update (kubectl edit) claims nothing: what it changed is drift.
//
// # The member run
//
// [Run], for one Propagation in one member, uses these functions; the
// controller decides what the member is given and records the result
// (its memberRun). [NewRun] takes only what it names: the Propagation
// (nil once gone), its key and the fleet's identity, the member
// ([Target]: its name, a client that writes, a reader of its API server,
// discovery and metadata, its [CopyCache]) and what it uses of the
// controller ([Env]: the fleet and its journal, the copies shared by
// every member, the kinds the journal holds, the names of resources, a
// Propagation's kinds and hub object, the drift last reported, recorder
// and metrics). The controller sets its [Input] (the content, overrides
// and revision number they come from, what tenancy lets the member
// hold), calls Want for each hub object wanted (none when its copies are
// removed), then Converge. It imports no later stage and not the
// controller: a kind the member cannot be asked for is known by its
// error's ErrorReason. It guarantees:
//   - each copy is recorded in the journal before it is applied, step by
//     step in [Order], a step once the earlier ones are Available;
//   - it removes only this fleet's copies of this Propagation (by identity,
//     or, stamped without one, proven by the hub object's UID or the
//     journal's hash), deleting none adopt took over and no container that
//     holds anything else (both are orphaned); a kind it cannot list, or
//     whose hub objects it cannot read, loses nothing, and a run held (a
//     spec it cannot use, tenancy in doubt, no revision given, a drain
//     waiting for its budget) neither applies nor removes;
//   - the journal forgets a copy only once the member confirms it gone.
//
// What it found is in its [Report] (failures, drift, what is not
// Available, what waits for a kind, a wave or a deletion, what was
// orphaned, the copies and kinds left), which the controller records as
// the member's one result; it tells new drift and each orphaned copy as
// Events. A run lasts one request; what lasts is the member's copy caches
// (drift checks, its own writes), the copies shared per content, and the
// journal.
package apply
