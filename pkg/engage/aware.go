package engage

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// Aware is a component that works on clusters as they join and leave the
// fleet, such as a fleet controller.
type Aware interface {
	// Engage starts working on cl, named clusterName ("" is the hub), for
	// as long as ctx lives. It returns nil once the cluster is engaged, for
	// example once the aware's informers on cl have synced, and may block
	// until then. On error, it must have undone everything it started for
	// this call; the engager calls it again later with the same ctx.
	//
	// When ctx ends, the aware stops all work for that cluster: no new work
	// for it may start, and whatever it started ends soon after.
	Engage(ctx context.Context, clusterName string, cl cluster.Cluster) error
}

// Disengager is an Aware that must know, before the cluster's name can be
// engaged with it again, that a cluster has left it: the engager calls
// Disengage once the engagement's context has ended and every Engage call
// for it returned, when a Recheck ends the engagement and again before
// Serve returns. It may be called more than once for one engagement.
type Disengager interface {
	Aware
	Disengage(clusterName string)
}
