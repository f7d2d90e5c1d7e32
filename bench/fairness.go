package main

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// queue, and on controller-runtime's priority queue in its place. Both
// must probe under the same condition, the backlog queued.
func (b *bench) benchFairness(ctx context.Context) error {
	t := b.res.table(fairnessTable, fmt.Sprintf("A noisy member floods %d ConfigMap creates; the reconciler takes %s on %d workers, held from the flood's start until at least %d noisy requests are queued (workqueue_depth, summed over its series). As they are released, the quiet member, on another API server, gets one ConfigMap. Baseline: the same with controller-runtime's priority queue as the controller's queue. A queue whose flood was over before the backlog was queued has failed the measurement.", floodObjects, fairnessWork, fairnessWorkers, floodBacklog))
	fair, err := b.fairness(ctx, nil)
	if err != nil {
		return fmt.Errorf("fair queue: %w", err)
	}
	cr, err := b.fairness(ctx, func(o *fleet.ControllerOptions) {
		o.NewQueue = func(name string, rl workqueue.TypedRateLimiter[fleet.Request]) workqueue.TypedRateLimitingInterface[fleet.Request] {
			return priorityqueue.New(name, func(o *priorityqueue.Opts[fleet.Request]) { o.RateLimiter = rl })
		}
	})
	if err != nil {
		return fmt.Errorf("controller-runtime's queue: %w", err)
	}
	fairLatency := fair.add(t, "fair queue", atMost(50, "1,436 ms"))
	crLatency := cr.add(t, "controller-runtime queue", nil)
	t.add("fair ÷ controller-runtime, quiet latency", "×", fairLatency/crLatency, nil)
	return nil
}

// fairnessProbe is one flood's quiet latency, and the noisy requests
// queued when the quiet object was created.
type fairnessProbe struct {
	latency time.Duration
	depth   float64
}

// add records the probe of queue and returns its latency in milliseconds,
// NaN if the backlog was not queued.
func (p fairnessProbe) add(t *table, queue string, tg *target) float64 {
	t.add(queue+": noisy requests queued at the quiet create", "requests", p.depth, nil)
	name := queue + ": quiet object, create to reconcile"
	if p.depth < floodBacklog {
		t.fail(name, "ms", fmt.Sprintf("the flood was over with %.0f noisy requests queued, fewer than %d", p.depth, floodBacklog), tg)
		return math.NaN()
	}
	t.addDuration(name, p.latency, tg)
	return ms(p.latency)
}

// fairness runs one flood and returns the quiet object's latency and the
// queue's depth when it was created.
func (b *bench) fairness(ctx context.Context, options func(*fleet.ControllerOptions)) (fairnessProbe, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return fairnessProbe{}, err
	}
	defer b.cleanUp(ctx, ns)
	noisy, quiet := b.lab.clients[0], b.lab.clients[1]
	for _, c := range []struct {
		server int
		name   string
	}{{0, "noisy"}, {1, "quiet"}} {
		cl := b.lab.clients[c.server]
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fairnessProbe{}, err
		}
		if err := cl.Create(ctx, configMap(ns, "seed", 16)); err != nil {
			return fairnessProbe{}, err
		}
	}
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: ns, workers: fairnessWorkers, work: fairnessWork, options: options, trackRequests: true})
	if err != nil {
		return fairnessProbe{}, err
	}
	defer b.stopFleet(f)
	noisyName, quietName := ns+"-noisy", ns+"-quiet"
	if err := errors.Join(
		b.lab.register(ctx, ns, noisyName, b.lab.kubeconfig[0]),
		b.lab.register(ctx, ns, quietName, b.lab.kubeconfig[1]),
	); err != nil {
		return fairnessProbe{}, err
	}
	for _, name := range []string{noisyName, quietName} {
		if _, err := f.awaitEngaged(name, time.Minute); err != nil {
			return fairnessProbe{}, err
		}
	}

	// The workers are held until the backlog is queued, however fast the
	// noisy API server takes the creates.
	release := f.rec.hold()
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
		return fairnessProbe{}, err
	}
	if floodErr != nil {
		return fairnessProbe{}, floodErr
	}
	release()
	created := time.Now()
	if err := quiet.Create(ctx, configMap(ns, "quiet", 16)); err != nil {
		return fairnessProbe{}, err
	}
	reconciled, err := f.awaitReconciled(fleet.Request{ClusterName: quietName, NamespacedName: types.NamespacedName{Namespace: ns, Name: "quiet"}}, time.Minute)
	if !floodOver {
		err = errors.Join(err, <-flooded)
	}
	if err != nil {
		return fairnessProbe{}, err
	}
	return fairnessProbe{latency: reconciled.Sub(created), depth: depth}, nil
}

// queueDepth reads workqueue_depth of a controller's queue, which both
// the fair queue and controller-runtime's queues report, summed over its
// series: controller-runtime's priority queue has one per priority.
func queueDepth(controller string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var depth float64
	for _, mf := range families {
		if mf.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == controller {
					depth += m.GetGauge().GetValue()
				}
			}
		}
	}
	return depth
}
