package configmapreport

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "configmap-report"

// Clusters gives a request's cluster by name. *fleet.Manager is one.
type Clusters interface {
	GetCluster(ctx context.Context, clusterName string) (cluster.Cluster, error)
}

// Reconciler reports every ConfigMap it is asked about: it logs it and
// hands it to Report.
type Reconciler struct {
	// Fleet gives the cluster of each request. Required.
	Fleet Clusters

	// Report, if set, is called with each ConfigMap after it is logged. It
	// runs in a reconcile worker, so it must not block.
	Report func(clusterName string, cm *corev1.ConfigMap)
}

var _ fleet.Reconciler = (*Reconciler)(nil)

// SetupWithManager adds the reconciler to mgr as a controller of the
// ConfigMaps, in every member, that pass predicates.
func (r *Reconciler) SetupWithManager(mgr *fleet.Manager, predicates ...predicate.Predicate) error {
	return fleet.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(predicates...)).
		WatchClusters(fleet.Members).
		Complete(r)
}

// Reconcile reports the ConfigMap req names, read from req's cluster.
func (r *Reconciler) Reconcile(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	cl, err := r.Fleet.GetCluster(ctx, req.ClusterName)
	if errors.Is(err, member.ErrClusterNotFound) {
		// The cluster left the fleet; its requests die with it.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	cm := &corev1.ConfigMap{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); apierrors.IsNotFound(err) {
		log.Info("ConfigMap deleted")
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	log.Info("ConfigMap seen", "keys", len(cm.Data)+len(cm.BinaryData), "resourceVersion", cm.ResourceVersion)
	if r.Report != nil {
		r.Report(req.ClusterName, cm)
	}
	return reconcile.Result{}, nil
}
