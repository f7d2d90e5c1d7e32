// Package fleetmetrics holds the fleet's per-cluster Prometheus series,
// which a fleet manager registers once on controller-runtime's registry:
// member state and probes, engagements, and reconciles per controller and
// cluster.
//
// A cluster's series exist only while the registry accepts the cluster:
// Fleet.Follow, fed from the registry's stream, deletes every series of a
// cluster that is removed or refused, and observations of a cluster that
// is not accepted, such as a member's last probe as it stops, create none.
package fleetmetrics
