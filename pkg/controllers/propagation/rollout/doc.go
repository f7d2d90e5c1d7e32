// Package rollout is the Propagation controller's rollout planner: it
// decides which revision each selected member is given, where the
// rollout stands, and which drained members may remove their copies now.
// It is pure: [PlanOf] reads only its [Input] (the time included), changes
// none of it, and holds no state, client, clock or goroutine; the same
// input always gives the same [Plan]. It imports only the API types.
//
// # Inputs and output
//
// An Input holds the Propagation's spec, the revision to roll out (Target:
// the newest, or the one spec.revision pins; 0 while none exists) and the
// newest, every selected member with its facts (labels, maintenance,
// whether it is down, the revision status.rollout gives it now) and its
// Progress (what its last run said, or unknown), the previous
// status.rollout.draining, the revisions the hub keeps, and why it refused
// a revision of the current content, if it did. A Plan is the status.rollout to write (each
// member's revision, phase, reason, message, counts, draining), when to
// plan again because a minSuccessTime passes, and what each drained member
// that may not remove its copies yet waits for. The controller gathers the
// input (registry, maintenance, its members' results, and for members
// other replicas own their shards: [ShardProgress], [GivenHash]), writes
// the plan, tells its Events, and keeps every revision of
// [RevisionsInUse].
//
// # The concurrency guard
//
// This package alone owns the guard. Under the Progressive strategy:
//   - At most maxConcurrency members (a number, or a percentage of the
//     members not in maintenance, at least 1) are between revisions at
//     once: given the target and not yet done, or failed with it. This
//     holds for a Propagation's first revision too: a member given no
//     revision yet gets the target only within the guard. A member whose
//     progress is unknown (after a restart) counts as in flight.
//   - Groups go in order (spec groups, then members in none), names in
//     order within a group; a group starts only once every member of the
//     groups before it is done: Available with the target for
//     minSuccessTime.
//   - maxFailures failed members stop the rollout: a stopped rollout gives
//     the target to no one. A maxConcurrency the hub refuses (stored
//     before it did) holds it: Stopped, reason Invalid.
//   - spec.paused gives no member another revision, but for one that
//     joins: it gets the revision its group has reached, the target only
//     within the guard.
//
// Under All every member gets the target at once (paused: only one that
// joins a group that has it). Under both, spec.revision pins the target
// (done while a newer one exists is Pinned, not Complete); cordoned and
// drained members keep their revision, hold no slot and are not waited
// for; drained members remove their copies within
// disruptionBudget.maxUnavailable, counting the members given a revision
// that are not Available, a member draining keeps draining, and one that
// is down gets no part of the budget. A rollout to no member is never
// Complete (NoMembersSelected); a pin the hub does not keep is named
// (RevisionInvalid), and so is a refused revision (RevisionRefused),
// which fails a rollout that is not pinned; the message holds at most
// 1024 bytes.
package rollout
