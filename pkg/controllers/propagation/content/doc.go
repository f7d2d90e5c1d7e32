// Package content is the first stage of the Propagation pipeline: from a
// Propagation and the hub's objects, what it applies, before it is fitted
// to any member.
//
// # What it owns
//
// A [Content] holds a Propagation's resources and overrides, the hub
// objects they select as their authors wrote them ([Authored]: no status,
// no server-set metadata), sorted by namespace and name so that the same
// objects make the same content, and the problems met reading them. Its
// JSON ([Content.Encode]) is what a PropagationRevision holds, and the
// hash of that JSON names the revision. [Content.Selected] is what the
// resources select now, for status; it is no part of a revision.
//
// The stage owns the refusal rules ([Refusal]: nothing of the fleet's
// credentials is ever copied) and Envelopes.
//
// # Envelopes
//
// An Envelope holds manifests that are live in members only. A
// Propagation that selects one applies each manifest in the Envelope's
// namespace of its members, as a hub object of that namespace, labelled
// with the Envelope's name, at the wave and under the availableWhen of
// the resource that selects the Envelope. Each manifest is checked on the
// hub by itself ([Builder.Unpack]): apiVersion, kind and name set, no other
// namespace, no nested Envelope, no kind the hub knows as cluster-scoped,
// nothing refused; a failure names "manifest N (Kind name) of Envelope
// E", and the Envelope's other manifests are applied. A ClusterEnvelope
// is a ClusterPropagation's: its manifests must be cluster-scoped. Manifests are never
// cut: the hub bounds an Envelope's size when it is written.
//
// # Inputs and outputs
//
// A [Builder] reads the hub through Builder.List (the controller's hub
// object caches) and tells kinds' scopes through Builder.Mapper. An entry
// the hub cannot list for a reason ([ReasonedError]: a kind it lacks, a
// selector that does not parse, the fleet namespace) is a [Problem] of
// the content, which fails every member given it and, when it names a
// kind, keeps that kind's copies from being removed: a doubt never
// removes. Any other error fails the build, and nothing is decided.
//
// # Lifecycle
//
// A [Cache] builds each Propagation's content once per change of what it
// is built from (the Propagation's UID and generation, the selected
// objects' UIDs and resourceVersions, the problem met listing an entry)
// and hands the same content to every caller: member runs, status,
// revisions. It is read-only: a caller copies an object before it changes
// it (a member's copy). [Cache.Forget] drops a Propagation that is gone.
//
// The package imports no later stage.
package content
