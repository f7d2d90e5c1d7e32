package fleet_test

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// Recipe: a hub object fanned out to every member. Each ConfigMap of the
// hub's "shared" namespace becomes one request per engaged member; a
// member engaged later is handed the requests of the hub objects that
// exist then. The reconciler copies the hub object into its member.
func ExampleToEveryMember() {
	mgr, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{Namespace: "fleet-system"})
	if err != nil {
		panic(err)
	}
	sameKey := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	err = fleet.NewControllerManagedBy(mgr).
		Named("shared-configmaps").
		WatchesFleet(&corev1.ConfigMap{}, fleet.ToEveryMember(mgr, sameKey), fleet.InClusters(fleet.Hub)).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			if req.Namespace != "shared" {
				return reconcile.Result{}, nil
			}
			hub := &corev1.ConfigMap{}
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, hub); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			member, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return reconcile.Result{}, err
			}
			cp := &corev1.ConfigMap{}
			cp.Namespace, cp.Name, cp.Data = hub.Namespace, hub.Name, hub.Data
			err = member.GetClient().Create(ctx, cp)
			if apierrors.IsAlreadyExists(err) {
				err = member.GetClient().Update(ctx, cp)
			}
			return reconcile.Result{}, err
		}))
	if err != nil {
		panic(err)
	}
}

// Recipe: per-member Events, recorded in the member the request came from,
// with the reconciling controller's name as their reporter.
func ExampleManager_GetClusterEventRecorder() {
	mgr, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{Namespace: "fleet-system"})
	if err != nil {
		panic(err)
	}
	err = fleet.NewControllerManagedBy(mgr).
		Named("config-checker").
		For(&corev1.ConfigMap{}).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			member, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return reconcile.Result{}, err
			}
			cm := &corev1.ConfigMap{}
			if err := member.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			if len(cm.Data) == 0 {
				rec, err := mgr.GetClusterEventRecorder(ctx, req.ClusterName, "config-checker")
				if err != nil {
					return reconcile.Result{}, err
				}
				rec.Eventf(cm, nil, corev1.EventTypeWarning, "Empty", "Check", "ConfigMap %s holds no data", cm.Name)
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		panic(err)
	}
}

// Recipe: a controller for some members only, by their labels (those of
// their registration Secrets). It is evaluated again whenever a member's
// labels change: a label edited on the Secret engages or disengages it.
func ExampleClusterSelectorFilter() {
	mgr, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{Namespace: "fleet-system"})
	if err != nil {
		panic(err)
	}
	production := labels.SelectorFromSet(labels.Set{"env": "production"})
	err = fleet.NewControllerManagedBy(mgr).
		Named("production-only").
		For(&corev1.ConfigMap{}).
		WithClusterFilter(fleet.ClusterSelectorFilter(production)).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			ctrl.LoggerFrom(ctx).Info("A production member's ConfigMap")
			return reconcile.Result{}, nil
		}))
	if err != nil {
		panic(err)
	}
}

// Recipe: hub work one replica of several should do. Members' requests
// reach only their owner; hub requests reach every replica, so the
// reconciler asks OwnsKey, and writes with optimistic concurrency (an
// Update carries the resourceVersion it read). A member another replica
// owns is not this replica's: GetCluster says ErrNotOwned.
func ExampleManager_OwnsKey() {
	mgr, err := fleet.New(ctrl.GetConfigOrDie(), fleet.Options{Namespace: "fleet-system"})
	if err != nil {
		panic(err)
	}
	err = fleet.NewControllerManagedBy(mgr).
		Named("hub-summary").
		For(&corev1.ConfigMap{}, fleet.InClusters(fleet.Hub)).
		Complete(fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
			if !mgr.OwnsKey("hub-summary/" + req.String()) {
				return reconcile.Result{}, nil // another replica sums this one up
			}
			summary := &corev1.ConfigMap{}
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, summary); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			if summary.Data == nil {
				summary.Data = map[string]string{}
			}
			for _, name := range mgr.ClusterNames() {
				if _, err := mgr.GetCluster(ctx, name); errors.Is(err, fleet.ErrNotOwned) {
					continue // its owner reports it
				}
				summary.Data[name] = "engaged here"
			}
			return reconcile.Result{}, mgr.GetClient().Update(ctx, summary)
		}))
	if err != nil {
		panic(err)
	}
}
