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
package apply
