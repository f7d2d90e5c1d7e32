package fleet

import (
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/engage"
)

// Request asks a fleet reconciler to reconcile one object in one cluster:
// {ClusterName, NamespacedName}. ClusterName is "" for the hub.
type Request = engage.Request

// Reconciler reconciles fleet requests.
type Reconciler = reconcile.TypedReconciler[Request]

// ReconcilerFunc is a function that implements Reconciler.
type ReconcilerFunc = reconcile.TypedFunc[Request]
