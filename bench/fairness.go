package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

const (
	fairnessTable   = "Fairness"
	floodObjects    = 3000
	floodBacklog    = 1000
	fairnessWork    = 2 * time.Millisecond
	fairnessWorkers = 2
)

// benchFairness measures a quiet member's create-to-reconcile latency
// while a noisy member, on another API server, floods creates: on the fair
// queue, and on controller-runtime's priority queue in its place.
func (b *bench) benchFairness(ctx context.Context) error {
	t := b.res.table(fairnessTable, fmt.Sprintf("A noisy member floods %d ConfigMap creates; the reconciler takes %s on %d workers. The quiet member, on another API server, gets one ConfigMap once at least %d noisy requests are queued (or the flood is over). Baseline: the same with controller-runtime's priority queue as the controller's queue.", floodObjects, fairnessWork, fairnessWorkers, floodBacklog))
	fair, fairDepth, err := b.fairness(ctx, nil)
	if err != nil {
		return fmt.Errorf("fair queue: %w", err)
	}
	cr, crDepth, err := b.fairness(ctx, func(o *fleet.ControllerOptions) {
		o.NewQueue = func(name string, rl workqueue.TypedRateLimiter[fleet.Request]) workqueue.TypedRateLimitingInterface[fleet.Request] {
			return priorityqueue.New(name, func(o *priorityqueue.Opts[fleet.Request]) { o.RateLimiter = rl })
		}
	})
	if err != nil {
		return fmt.Errorf("controller-runtime's queue: %w", err)
	}
	t.addDuration("fair queue: quiet object, create to reconcile", fair, atMost(50, "1,436 ms"))
	t.add("fair queue: noisy requests queued at the quiet create", "requests", fairDepth, nil)
	t.addDuration("controller-runtime queue: quiet object, create to reconcile", cr, nil)
	t.add("controller-runtime queue: noisy requests queued at the quiet create", "requests", crDepth, nil)
	t.add("fair ÷ controller-runtime, quiet latency", "×", ms(fair)/ms(cr), nil)
	return nil
}

// fairness runs one flood and returns the quiet object's latency and the
// queue's depth when it was created.
func (b *bench) fairness(ctx context.Context, options func(*fleet.ControllerOptions)) (time.Duration, float64, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer b.cleanUp(ctx, ns)
	noisy, quiet := b.lab.clients[0], b.lab.clients[1]
	for _, c := range []struct {
		server int
		name   string
	}{{0, "noisy"}, {1, "quiet"}} {
		cl := b.lab.clients[c.server]
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return 0, 0, err
		}
		if err := cl.Create(ctx, configMap(ns, "seed", 16)); err != nil {
			return 0, 0, err
		}
	}
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: ns, workers: fairnessWorkers, work: fairnessWork, options: options, trackRequests: true})
	if err != nil {
		return 0, 0, err
	}
	defer b.stopFleet(f)
	noisyName, quietName := ns+"-noisy", ns+"-quiet"
	if err := errors.Join(
		b.lab.register(ctx, ns, noisyName, b.lab.kubeconfig[0]),
		b.lab.register(ctx, ns, quietName, b.lab.kubeconfig[1]),
	); err != nil {
		return 0, 0, err
	}
	for _, name := range []string{noisyName, quietName} {
		if _, err := f.awaitEngaged(name, time.Minute); err != nil {
			return 0, 0, err
		}
	}

	flooded := make(chan error, 1)
	go func() { flooded <- createConfigMaps(ctx, noisy, ns, "flood", floodObjects, 16, 16) }()
	var depth float64
	var floodErr error
	floodOver := false
	if err := await("a noisy backlog", time.Minute, func() bool {
		select {
		case floodErr = <-flooded:
			floodOver = true
			return true
		default:
		}
		depth = queueDepth(f.controller)
		return depth >= floodBacklog
	}); err != nil {
		return 0, 0, err
	}
	if floodErr != nil {
		return 0, 0, floodErr
	}
	created := time.Now()
	if err := quiet.Create(ctx, configMap(ns, "quiet", 16)); err != nil {
		return 0, 0, err
	}
	reconciled, err := f.awaitReconciled(fleet.Request{ClusterName: quietName, NamespacedName: types.NamespacedName{Namespace: ns, Name: "quiet"}}, time.Minute)
	if !floodOver {
		err = errors.Join(err, <-flooded)
	}
	if err != nil {
		return 0, 0, err
	}
	return reconciled.Sub(created), depth, nil
}

// queueDepth reads workqueue_depth of a controller's queue, which both
// the fair queue and controller-runtime's queues report.
func queueDepth(controller string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range families {
		if mf.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == controller {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}
