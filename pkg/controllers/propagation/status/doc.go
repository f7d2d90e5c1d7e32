// Package status is the last stage of the Propagation controller: it
// sums members' results up into a Propagation's status, and bounds that
// status in bytes.
//
// # Owns
//
// The status budget: a status, once [Fit], marshals to at most [Budget]
// bytes, cutting what is listed (drifted fields, messages, listed hub
// objects, listed members), never the counts, the conditions, the kinds
// or the rollout. And how conditions read: [SetConditions] says Ready
// only when every selected member applied and is available, and the
// reason of the first thing that holds it otherwise.
//
// # Inputs and outputs
//
// Plain values: the Propagation, the status being built, what its
// resources select ([Selection]), what keeps it from Ready beside its
// members ([Problems]). Every function is pure: the same inputs give the
// same status, so a status written is not written again. It reads no
// cluster and imports no other stage; the controller package reads the
// members' results and the hub, calls these functions, and decides when a
// status write is due (at most once per StatusInterval per Propagation,
// and at once for the sum that completes the picture).
package status
