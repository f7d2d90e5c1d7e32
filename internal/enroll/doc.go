// Package enroll registers a member cluster with a fleet and removes it
// again: what `fleet-manager register` and `unregister` do.
//
// [Register] writes, in the member, a namespace fleet-system, a
// ServiceAccount fleet-manager, the bindings its permissions name, and a
// Role that lets the ServiceAccount mint tokens for itself only. With
// [FleetPreset] it writes the rules too, a ClusterRole (and with
// namespaces a Role in each) that [FleetRights] computes from the hub's
// Propagations: namespaces, and the kinds they copy, never RBAC kinds,
// tokens, impersonation, nor Secrets cluster-wide; running it again
// updates them. The built-in presets come with a warning ([PresetWarning])
// of what they allow. It mints a token of at most [MaxTokenTTL] with the
// TokenRequest API and writes the native registration Secret on the hub: the member's server and CA from
// the person's kubeconfig, and that token. The person's own credentials
// reach the member and are never copied. Running it again with the same
// options changes nothing in the member and updates the hub Secret in
// place; when that Secret pointed at another server, it warns.
//
// # Whose objects
//
// A member holds the objects of one fleet: each object Register creates
// carries [ManagedByLabel], [ClusterNameLabel] and
// fleetv1alpha1.FleetIDLabel, the fleet's identity, which Register reads
// on the hub (registry.FleetID, created when missing). The names are
// shared, so a second fleet's Register fails before it writes, rather than
// re-bind or prune the first fleet's objects. An object of those names
// without the three labels is not touched either. Objects an earlier
// register made without a fleet identity are taken for this fleet's only
// when the hub's registration Secret of the name points at the member's
// server: Register then stamps them, and Cleanup deletes them.
//
// [Cleanup] (`unregister --cleanup`) deletes exactly this fleet's objects
// for the cluster's name, then fleet-system if it is this fleet's and
// holds nothing else than what the API server adds to every namespace; a
// fleet-system that existed before is never labelled, so never deleted.
// What it keeps that is labelled for the name, it returns with the reason.
// [RemoveCopies], run before Cleanup, deletes (or names, to keep) the copies the
// fleet's Propagations made: only objects of the kinds they copy that
// carry the fleet's identity and fleetv1alpha1.PropagationLabel.
// [WaitReady] and [WaitGone] read only the MemberCluster labelled for the
// fleet (fleetv1alpha1.FleetLabel).
//
// All are one-shot: they return when done, start nothing that outlives
// them, and hold no state between calls. Errors never contain a token.
package enroll
