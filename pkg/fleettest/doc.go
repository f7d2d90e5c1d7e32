// Package fleettest starts a whole fleet for one test, in one call: a hub
// and member API servers (envtest's kube-apiserver and etcd), the fleet's
// CRDs on the hub, a fleet.Manager with the controllers under test, and
// every member registered by a kubeconfig Secret, Ready and engaged by
// every controller that accepts it. It answers "how do I test a
// controller that uses several clusters?" for fleet controllers and for
// multicluster-runtime controllers on the fleet's provider alike: both
// are added in Options.Setup.
//
// # Lifecycle
//
// [Start] returns once every member is engaged, or fails the test. When
// the test ends the manager is stopped and waited for, then the API
// servers are stopped: nothing is left running. Each call starts its own
// servers (about a second each, more on a loaded machine); a package
// whose tests can share a fleet starts one in TestMain with [New] and
// stops it with [Fleet.Stop]. Like envtest, it needs $KUBEBUILDER_ASSETS
// (the directory of kube-apiserver, etcd and kubectl); without it, Start
// skips the test and New returns [ErrNoAssets].
package fleettest
