package mcprovider

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/client-go/util/workqueue"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
)

// QueueOptions configure the fair queue of a multicluster-runtime
// controller. The zero QueueOptions are the defaults.
type QueueOptions struct {
	// MaxConcurrentReconcilesPerCluster caps the reconciles of one
	// cluster in flight, so that a slow member cannot take every worker.
	// Defaults to 0: no cap.
	MaxConcurrentReconcilesPerCluster int
}

// NewQueueFunc is the type of the NewQueue option of a
// multicluster-runtime controller (mccontroller.Options).
type NewQueueFunc = func(controllerName string, rateLimiter workqueue.TypedRateLimiter[mcreconcile.Request]) workqueue.TypedRateLimitingInterface[mcreconcile.Request]

// FairQueue returns, for the NewQueue option of a multicluster-runtime
// controller, the fair queue of fleet controllers (package fairqueue)
// over mcreconcile.Request: within a priority it hands out one request of
// each cluster in turn, so one noisy member cannot starve a quiet one.
// It keeps the contract of controller-runtime's priority queue (the rate
// limiter the controller passes, AddAfter, priorities). Its series are
// controller-runtime's workqueue_* series of the controller, and
// fleet_queue_depth{controller, cluster}. When a member's engagement
// with multicluster-runtime ends, its queued requests are dropped and,
// once none is in flight, its depth series is deleted.
//
// Without it, a multicluster-runtime controller has controller-runtime's
// queue: first in, first out within a priority, across all clusters.
func (p *Provider) FairQueue(opts QueueOptions) NewQueueFunc {
	return func(controllerName string, rateLimiter workqueue.TypedRateLimiter[mcreconcile.Request]) workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
		o := fairqueue.Options[mcreconcile.Request]{
			RateLimiter:           rateLimiter,
			MaxInFlightPerCluster: opts.MaxConcurrentReconcilesPerCluster,
		}
		if m, err := fairqueue.NewMetricsProvider(crmetrics.Registry); err != nil {
			p.mgr.GetLogger().Error(err, "The fair queue of a multicluster-runtime controller has no metrics", "controller", controllerName)
		} else {
			o.MetricsProvider = m
		}
		q := fairqueue.New(controllerName, clusterOf, o)
		p.mu.Lock()
		p.queues = append(p.lockedQueues(), q)
		p.mu.Unlock()
		return q
	}
}

func clusterOf(r mcreconcile.Request) string { return string(r.ClusterName) }

// lockedQueues returns the fair queues still running, and forgets those
// shut down with their controllers. mu must be held.
func (p *Provider) lockedQueues() []*fairqueue.Queue[mcreconcile.Request] {
	p.queues = slices.DeleteFunc(p.queues, (*fairqueue.Queue[mcreconcile.Request]).ShuttingDown)
	return p.queues
}

// MeteredReconciler returns r, recording each of its reconciles in the
// per-cluster series of fleet controllers, labelled with controllerName
// (the controller's name, as given to mcbuilder's Named) and the
// request's cluster: fleet_reconciles_total{controller, cluster, result},
// fleet_reconcile_errors_total and fleet_reconcile_duration_seconds (see
// fleet.Manager.ObserveReconcile). A reconcile that fails with
// multicluster.ErrClusterNotFound is not recorded: its request is
// dropped, as fleet controllers drop a request of a cluster that left.
// A member's series are deleted when it leaves the fleet.
func (p *Provider) MeteredReconciler(controllerName string, r mcreconcile.Reconciler) mcreconcile.Reconciler {
	return mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
		start := time.Now()
		result, err := r.Reconcile(ctx, req)
		if !errors.Is(err, multicluster.ErrClusterNotFound) {
			p.mgr.ObserveReconcile(controllerName, string(req.ClusterName), time.Since(start), err)
		}
		return result, err
	})
}
