package fleet_test

import (
	"context"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// This example runs a fleet-wide controller that logs every ConfigMap of
// every member cluster, with the cluster it lives in.
func Example() {
	log := ctrl.Log.WithName("example")

	// The hub: members are registered by kubeconfig Secrets in its
	// fleet namespace.
	mgr, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{Namespace: "fleet-system"})
	if err != nil {
		log.Error(err, "Creating the fleet manager")
		os.Exit(1)
	}
	// Optional: keep a MemberCluster per member on the hub, as fleet-manager run does.
	if err := membercluster.Add(mgr, membercluster.Options{}); err != nil {
		log.Error(err, "Adding the MemberCluster controller")
		os.Exit(1)
	}

	err = fleet.NewControllerManagedBy(mgr).
		Named("configmap-logger").
		For(&corev1.ConfigMap{}). // watched in every engaged member
		WatchClusters(fleet.Members).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			// Read the object from the cluster the request came from.
			cl, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return reconcile.Result{}, err
			}
			cm := &corev1.ConfigMap{}
			if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			// The logger already carries cluster, namespace and name.
			ctrl.LoggerFrom(ctx).Info("ConfigMap seen", "keys", len(cm.Data))
			return reconcile.Result{}, nil
		}))
	if err != nil {
		log.Error(err, "Adding the controller")
		os.Exit(1)
	}

	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Running the fleet manager")
		os.Exit(1)
	}
}
