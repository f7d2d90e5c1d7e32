// Package membercluster is the built-in controller that keeps one
// cluster-scoped MemberCluster on the hub per registered cluster of a
// fleet: its labels, its registration Secret and its status (conditions
// Ready, Healthy, CredentialsAccepted and CredentialsExpiring, state and
// recent transitions, server version, last probe, engaged controllers,
// the credential's type, expiry and renewals).
//
// # Setup
//
// Add it to a fleet.Manager with Add; a hub without the CRD gets none.
//
// # Lifecycle
//
// It follows the fleet's registry, a level-triggered stream, and the
// facts other controllers publish about each member (Options.Credentials
// from the token renewal, Options.OwedRemovals from Propagation), each
// read whole at every reconcile, so it converges however late it starts. Each MemberCluster carries the label
// fleet.fleetkube.io/fleet with the fleet namespace, and a manager touches
// only its own fleet's. It deletes a MemberCluster only once the registry
// has synced (every registration Secret read once) and no longer holds
// the name, so a manager that starts or becomes leader keeps the
// MemberClusters it will register, with their UIDs and history. A state
// change is recorded as an Event after the status that shows it is
// written, and so is a credential that turns expiring (a Warning).
package membercluster
