// Package controllers is the table of fleet-manager's built-in
// controllers and the --controllers selection that starts them, as
// kube-controller-manager's NewControllerInitializers and --controllers
// do.
//
// The rows: membercluster and propagation, on by default, and
// clusterprofile (ClusterProfile export), off by default. Every row's
// package adds its controller with one shape, Add(*fleet.Manager, Options).
//
// Each [Initializer] names a controller, says whether "*" turns it on,
// and adds it to a fleet.Manager with its own concurrency and a hub
// client of its own whose user agent names it, so that the hub's audit
// log says which controller wrote what. A controller whose CRD the hub
// lacks skips itself with one log line. [Start] adds every controller the
// selection enables, once, before the manager starts; the controllers
// then live and stop with the manager.
package controllers
