// Command mcr-kubeconfig runs a multicluster-runtime controller on
// fleet-manager's members. The controller is multicluster-runtime code
// only (mcbuilder, mcreconcile, mcmanager): it logs every ConfigMap of
// every member with its cluster, as multicluster-runtime's kubeconfig
// example does. Only the setup differs: the manager is a fleet.Manager
// reading multicluster-runtime's kubeconfig Secrets, wrapped with
// mcmanager.WithMultiCluster and the fleet's provider, instead of
// mcmanager.New with the kubeconfig provider.
package main

import (
	"context"
	"errors"
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

func main() {
	var namespace string
	flag.StringVar(&namespace, "namespace", "default", "Namespace of multicluster-runtime's kubeconfig Secrets")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	entryLog := ctrl.Log.WithName("entrypoint")

	if err := run(ctrl.SetupSignalHandler(), namespace); err != nil {
		entryLog.Error(err, "Unable to run the manager")
		os.Exit(1)
	}
}

func run(ctx context.Context, namespace string) error {
	// fleet-manager: the fleet reads multicluster-runtime's Secrets.
	fm, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{
		SecretFormats: []registry.Format{registry.MulticlusterRuntimeFormat(namespace)},
	})
	if err != nil {
		return err
	}
	mgr, err := mcmanager.WithMultiCluster(fm, mcprovider.New(fm, mcprovider.Options{}))
	if err != nil {
		return err
	}
	if err := setup(mgr); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// setup adds the controller: multicluster-runtime code only.
func setup(mgr mcmanager.Manager) error {
	return mcbuilder.ControllerManagedBy(mgr).
		Named("multicluster-configmaps").
		For(&corev1.ConfigMap{}).
		Complete(mcreconcile.Func(
			func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
				log := ctrl.LoggerFrom(ctx).WithValues("cluster", req.ClusterName)

				cl, err := mgr.GetCluster(ctx, req.ClusterName)
				if err != nil {
					return reconcile.Result{}, err
				}
				cm := &corev1.ConfigMap{}
				if err := cl.GetClient().Get(ctx, req.Request.NamespacedName, cm); err != nil {
					if apierrors.IsNotFound(err) {
						return reconcile.Result{}, nil
					}
					return reconcile.Result{}, err
				}
				log.Info("ConfigMap found", "namespace", cm.Namespace, "name", cm.Name)
				return ctrl.Result{}, nil
			},
		))
}
