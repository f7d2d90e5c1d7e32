// Package revisions is the second stage of the Propagation pipeline:
// content ↔ PropagationRevision.
//
// # What it owns
//
// A [Store] makes a revision of a Propagation's content whenever that
// changes ([Store.Ensure]): numbered one more than the newest of any
// fleet, labelled with the content's hash and the fleet, owned by the
// Propagation, in its namespace (a ClusterPropagation's in the fleet
// namespace). A number a member was given never names other content:
// the store remembers the newest number it made (the cache may not show
// it yet, [ErrPending]) and reads the hub itself before it numbers past a
// revision deleted by hand. Two managers that make the same number race
// on its name; the loser reads again.
//
// [Store.Load] reads a revision and checks it: its content must match its
// hash, it must be owned by the Propagation, and it must hold nothing the
// manager would never have put there (an object of another namespace, or
// one the refusal rules refuse). A revision that fails is RevisionInvalid,
// and nothing of it is applied. [Store.Prune] deletes revisions past the
// history limit, oldest first, never one the caller keeps (the one rolled
// out, those members are given).
//
// # Inputs and outputs
//
// The store writes through Store.Hub (cached reads) and reads the hub
// itself through Store.Live where the cache may lag. It imports the
// content stage and no later one.
package revisions
