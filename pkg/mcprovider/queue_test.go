package mcprovider_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
)

// mcrFleet is a fleet wrapped for multicluster-runtime, not started.
type mcrFleet struct {
	*fleettest.Fleet
	provider *mcprovider.Provider
	mgr      mcmanager.Manager
}

func newMCRFleet(t *testing.T) *mcrFleet {
	f := suite.StartFleet(t, fleettest.FleetOptions{Deferred: true})
	provider := mcprovider.New(f.Manager, mcprovider.Options{})
	mgr, err := mcmanager.WithMultiCluster(f.Manager, provider)
	if err != nil {
		t.Fatal(err)
	}
	return &mcrFleet{Fleet: f, provider: provider, mgr: mgr}
}

// run starts the manager and returns a function that stops it and
// waits until it has.
func (f *mcrFleet) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ignoreCanceled(f.mgr.Start(ctx)); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// waitListed waits until the provider has engaged multicluster-runtime
// with the named members.
func (f *mcrFleet) waitListed(t *testing.T, names ...string) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%v engaged with multicluster-runtime", names), func() bool {
		listed := f.provider.ListClusters()
		for _, n := range names {
			if !slices.Contains(listed, mcluster.ClusterName(n)) {
				return false
			}
		}
		return true
	})
}

// inNamespace keeps a controller to the test's namespace: the members are
// shared with the package's other tests.
func inNamespace(ns string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
}

func mcrRequest(clusterName, namespace, name string) mcreconcile.Request {
	return mcreconcile.Request{
		ClusterName: mcluster.ClusterName(clusterName),
		Request:     reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}},
	}
}

// series returns the samples of metric family name whose labels include
// every label given.
func series(t *testing.T, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// queued returns the ready requests in a controller's queue, summed over
// priorities: controller-runtime's workqueue_depth, which both its queue
// and the fair queue write.
func queued(t *testing.T, controller string) float64 {
	var sum float64
	for _, m := range series(t, "workqueue_depth", map[string]string{"name": controller}) {
		sum += m.GetGauge().GetValue()
	}
	return sum
}

// orderLog records the order in which a controller reconciles.
type orderLog struct {
	mu    sync.Mutex
	order []mcreconcile.Request
}

func (l *orderLog) add(req mcreconcile.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, req)
}

func (l *orderLog) index(req mcreconcile.Request) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Index(l.order, req)
}

// A noisy member's backlog, queued behind a held worker, does not delay a
// quiet member's request in a multicluster-runtime controller with the
// fair queue: it is reconciled after at most the request in flight and
// one more of the noisy member. The same controller with
// controller-runtime's queue, fed the same events, reconciles it after
// the whole backlog: the control that shows the assertion can fail.
func TestFairQueueQuietMemberIsNotStarvedByANoisyOne(t *testing.T) {
	t.Parallel()
	suite.Need(t)
	const (
		backlog = 300
		ns      = "mcr-fairness"
		noisy   = "mcr-noisy"
		quiet   = "mcr-quiet"
	)
	f := newMCRFleet(t)
	gate := make(chan struct{})
	var closeGate sync.Once
	t.Cleanup(func() { closeGate.Do(func() { close(gate) }) })
	logs := map[string]*orderLog{"mcr-fair": {}, "mcr-fifo": {}}
	for name, log := range logs {
		opts := mccontroller.Options{MaxConcurrentReconciles: 1}
		if name == "mcr-fair" {
			opts.NewQueue = f.provider.FairQueue(mcprovider.QueueOptions{})
		}
		err := mcbuilder.ControllerManagedBy(f.mgr).
			Named(name).
			For(&corev1.ConfigMap{}).
			WithEventFilter(inNamespace(ns)).
			WithOptions(opts).
			Complete(mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
				<-gate
				log.add(req)
				return reconcile.Result{}, nil
			}))
		if err != nil {
			t.Fatal(err)
		}
	}
	f.run(t)
	f.Register(t, noisy, suite.Kubeconfigs[0])
	f.Register(t, quiet, suite.Kubeconfigs[1])
	f.waitListed(t, noisy, quiet)

	noisyClient, quietClient := suite.MemberClients[0], suite.MemberClients[1]
	fleettest.CreateNamespace(t, noisyClient, ns)
	fleettest.CreateNamespace(t, quietClient, ns)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < backlog; i += 4 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("noise-%04d", i)}}
				if err := noisyClient.Create(t.Context(), cm); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// In each controller one request is with the held worker; the rest
	// are queued.
	for name := range logs {
		poll.Until(t, name+" queued the noisy backlog", func() bool { return queued(t, name) >= backlog-1 })
	}
	fleettest.CreateConfigMap(t, quietClient, ns, "whisper")
	for name := range logs {
		poll.Until(t, name+" queued the quiet request", func() bool { return queued(t, name) >= backlog })
	}
	closeGate.Do(func() { close(gate) })

	whisper := mcrRequest(quiet, ns, "whisper")
	position := map[string]int{}
	for name, log := range logs {
		poll.Until(t, name+" reconciled the quiet request", func() bool { return log.index(whisper) >= 0 })
		position[name] = log.index(whisper) + 1
	}
	t.Logf("behind a noisy backlog of %d, the quiet request was reconciled %d-th with the fair queue, %d-th with controller-runtime's",
		backlog, position["mcr-fair"], position["mcr-fifo"])
	if position["mcr-fair"] > 3 {
		t.Errorf("with the fair queue the quiet request was reconciled %d-th: it waited for more than one noisy request besides the one in flight", position["mcr-fair"])
	}
	if position["mcr-fifo"] <= backlog/2 {
		t.Errorf("control: with controller-runtime's queue the quiet request was reconciled %d-th, not behind the backlog: the test no longer tells the queues apart", position["mcr-fifo"])
	}
}

// A multicluster-runtime controller's per-cluster series (reconciles by
// result, errors, durations, queue depth) appear for each member, and
// those of a member that leaves are deleted while the others' stay; the
// member registered again is reconciled again. It runs alone: it checks
// that no goroutine outlives the manager.
func TestMeteredControllerSeriesFollowMembers(t *testing.T) {
	suite.Need(t)
	const (
		controller = "mcr-metered"
		ns         = "mcr-metrics"
		east       = "mcr-east"
		west       = "mcr-west"
	)
	eastClient, westClient := suite.MemberClients[0], suite.MemberClients[1]
	// The suite's clients, shared by the package's tests, connect before
	// the baseline: their connections are not the manager's.
	fleettest.CreateNamespace(t, eastClient, ns)
	fleettest.CreateNamespace(t, westClient, ns)
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	baseline := goleak.IgnoreCurrent()
	f := newMCRFleet(t)
	var mu sync.Mutex
	reconciled := map[mcreconcile.Request]bool{}
	r := mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
		mu.Lock()
		reconciled[req] = true
		mu.Unlock()
		if req.Name == "broken" {
			return reconcile.Result{}, reconcile.TerminalError(errors.New("broken on purpose"))
		}
		return reconcile.Result{}, nil
	})
	err := mcbuilder.ControllerManagedBy(f.mgr).
		Named(controller).
		For(&corev1.ConfigMap{}).
		WithEventFilter(inNamespace(ns)).
		WithOptions(mccontroller.Options{NewQueue: f.provider.FairQueue(mcprovider.QueueOptions{MaxConcurrentReconcilesPerCluster: 1})}).
		Complete(f.provider.MeteredReconciler(controller, r))
	if err != nil {
		t.Fatal(err)
	}
	stop := f.run(t)
	f.Register(t, east, suite.Kubeconfigs[0])
	westSecret := f.Register(t, west, suite.Kubeconfigs[1])
	f.waitListed(t, east, west)

	fleettest.CreateConfigMap(t, eastClient, ns, "fine")
	fleettest.CreateConfigMap(t, westClient, ns, "broken")
	has := func(name string, labels map[string]string, atLeast float64) func() bool {
		return func() bool {
			for _, m := range series(t, name, labels) {
				if m.GetCounter().GetValue() >= atLeast || m.GetHistogram().GetSampleCount() >= uint64(atLeast) {
					return true
				}
			}
			return false
		}
	}
	of := func(clusterName string, more ...string) map[string]string {
		l := map[string]string{"controller": controller, "cluster": clusterName}
		for i := 0; i+1 < len(more); i += 2 {
			l[more[i]] = more[i+1]
		}
		return l
	}
	poll.Until(t, "east's success counted", has("fleet_reconciles_total", of(east, "result", "success"), 1))
	poll.Until(t, "west's error counted", has("fleet_reconciles_total", of(west, "result", "error"), 1))
	poll.Until(t, "west's error counted as an error", has("fleet_reconcile_errors_total", of(west), 1))
	poll.Until(t, "west's reconcile timed", has("fleet_reconcile_duration_seconds", of(west), 1))
	for _, c := range []string{east, west} {
		if len(series(t, "fleet_queue_depth", of(c))) != 1 {
			t.Errorf("no fleet_queue_depth series of %s", c)
		}
	}
	if len(series(t, "fleet_reconcile_errors_total", of(east))) != 1 || has("fleet_reconcile_errors_total", of(east), 1)() {
		t.Errorf("east's errors: %v, want one series at 0", series(t, "fleet_reconcile_errors_total", of(east)))
	}

	if err := f.Hub.Client.Delete(t.Context(), westSecret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every series of west deleted", func() bool {
		for _, name := range []string{"fleet_reconciles_total", "fleet_reconcile_errors_total", "fleet_reconcile_duration_seconds", "fleet_queue_depth"} {
			if len(series(t, name, of(west))) > 0 {
				return false
			}
		}
		return true
	})
	for _, name := range []string{"fleet_reconciles_total", "fleet_reconcile_errors_total", "fleet_reconcile_duration_seconds", "fleet_queue_depth"} {
		if len(series(t, name, of(east))) == 0 {
			t.Errorf("%s of east deleted with west's", name)
		}
	}

	// West, registered again, is reconciled again: its drop from the
	// queue did not outlive its engagement.
	f.Register(t, west, suite.Kubeconfigs[1])
	f.waitListed(t, west)
	fleettest.CreateConfigMap(t, westClient, ns, "again")
	poll.Until(t, "west reconciled after it was registered again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reconciled[mcrRequest(west, ns, "again")]
	})

	stop()
	f.Stop(t)
	var leaked error
	for range 100 {
		if leaked = goleak.Find(baseline, goleak.IgnoreTopFunction("time.Sleep")); leaked == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("goroutines left after the manager stopped: %v", leaked)
}
