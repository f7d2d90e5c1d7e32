// Package enroll registers a member cluster with a fleet and removes it
// again: what `fleet-manager register` and `unregister` do.
//
// [Register] writes, in the member, a namespace fleet-system, a
// ServiceAccount fleet-manager, the bindings its permissions name, and a
// Role that lets the ServiceAccount mint tokens for itself only. It mints a
// short-lived token with the TokenRequest API and writes the native
// registration Secret on the hub: the member's server and CA from the
// person's kubeconfig, and that token. The person's own credentials reach
// the member and are never copied. Each member object it creates carries
// [ManagedByLabel] and [ClusterNameLabel]; running it again with the same
// options changes nothing in the member and updates the hub Secret in place.
//
// [Unregister] deletes the hub Secret and, asked to clean up, exactly the
// member objects that carry both labels for the cluster's name; a namespace
// fleet-system that existed before is never labelled, so never deleted.
//
// Both are one-shot: they return when done, start nothing that outlives
// them, and hold no state between calls. Errors never contain a token.
package enroll
