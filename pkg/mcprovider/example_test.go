package mcprovider_test

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
)

// A multicluster-runtime controller opts in to the fleet's fair queue,
// capped at two reconciles per member, and to per-member metrics.
func ExampleProvider_FairQueue() {
	fm, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{})
	if err != nil {
		panic(err)
	}
	provider := mcprovider.New(fm, mcprovider.Options{})
	mgr, err := mcmanager.WithMultiCluster(fm, provider)
	if err != nil {
		panic(err)
	}
	r := mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	})
	err = mcbuilder.ControllerManagedBy(mgr).
		Named("configmaps").
		For(&corev1.ConfigMap{}).
		WithOptions(mccontroller.Options{
			NewQueue: provider.FairQueue(mcprovider.QueueOptions{MaxConcurrentReconcilesPerCluster: 2}),
		}).
		Complete(provider.MeteredReconciler("configmaps", r))
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}
