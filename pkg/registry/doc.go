// Package registry owns the fleet's cluster names: which registrations
// claim each name, why a name is refused, its labels and its member's
// state. Everything else that follows a cluster's life subscribes to it.
//
// # Sources
//
// A [Format] says which hub Secrets register clusters and how to read one:
// the native format ([NativeFormat]), and those of multicluster-runtime,
// Cluster API and Argo CD, read so that a fleet registered elsewhere needs
// no re-registration. [NewWithSecrets] reads each format's Secrets from a
// cache of its own into claims, on every replica. A Secret that cannot be
// read still claims its name, refused with the reason; one Secret read by
// two formats is one claim, the first format's. [ClusterProfiles] adds the
// ClusterProfiles of SIG-Multicluster's Cluster Inventory API as a source:
// each, in the namespaces named, that lists an access provider of the
// provider file claims <namespace>.<name>, with the kubeconfig the
// module's access package builds; its exec plugin is told that name as
// clusterName. A profile a fleet-manager published is never read. Two
// objects claiming one name are a conflict: the name is refused until one
// goes.
//
// # Trust
//
// Names come from the fleet namespace, the native format's. A claim from
// anywhere else (Cluster API Secrets of other namespaces, Argo CD's,
// ClusterProfiles) on a name a Secret of the fleet namespace claims
// changes nothing of that cluster: it is set aside, reported as
// ClusterNameTaken on its object, and counts only once the fleet
// namespace lets the name go. Cluster API Secrets outside the fleet
// namespace cannot rename their cluster: it stays
// <namespace>.<cluster>. Whoever writes a ClusterProfile's status
// chooses the server its cluster's credentials are sent to, so reading
// ClusterProfiles from a namespace trusts its writers as much as the
// fleet namespace's. The fleet namespace also gives the fleet its
// identity, unique across hubs ([FleetID]): a UID kept in its ConfigMap
// fleet-identity, which the manager and `fleet-manager register` read,
// and the first of them creates, there also recording that the new fleet
// enforces tenancy (run --tenancy=Auto).
//
// # One cluster, one name
//
// Each member reports the identity of the cluster it reaches
// ([Registry.Identify]); the hub's MemberClusters record them
// ([Registry.Record]), read before Synced. Of the names of one cluster,
// the one whose registration was created first keeps it; the others are
// refused as ReasonDuplicateCluster, naming it, until it goes. A
// registry that allows duplicates ([NewWithSecrets], for tests and
// benches that register one API server under many names) refuses none.
//
// # State
//
// The member pool reports each member's state and probes
// ([Registry.ObserveState]) and each kubeconfig it could not build
// ([Registry.Refuse]). Reports about a name that is not accepted, or about
// an older kubeconfig, are ignored, so a member that is stopping cannot
// overwrite the truth.
//
// When replicas share the fleet ([NewShared]), package shard assigns each
// cluster's owner and this replica's part in it ([Registry.Assign],
// [Ownership]); a cluster not run here has no state, and reports about it
// are ignored.
//
// Other facts about a cluster are published by their owners, each kind
// in a [Facts] of its own, so that a change wakes only its readers: the
// token renewal publishes what it knows of each kubeconfig's credential
// ([Credentials]); the Propagation controller, the removals each member
// owes.
//
// # Subscribing
//
// [Registry.Subscribe] returns a [Subscription]: the current state of every
// cluster at once, then an [Event] for each cluster that changes. Changes
// made while the subscriber is busy are folded into one event, which ends
// at the current truth, so the stream is level-triggered: a subscriber
// that starts late, or again, converges. A probe that succeeds like the
// one before it changes the snapshot without an event; a subscriber that
// shows probe times reads them again on its own schedule. A cluster is handed out once at a
// time; different clusters may be handled in parallel. The registry never
// calls a subscriber: subscribers pull, and nobody sets a callback on it.
// [Registry.Source] does the same for a controller-runtime controller.
//
// [Registry.Synced] closes once every format's first pass over its
// Secrets has ended. Nothing may act on a missing registration, such as
// deleting a MemberCluster, before.
package registry
