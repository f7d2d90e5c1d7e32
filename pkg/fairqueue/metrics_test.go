package fairqueue

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/internal/poll"
)

// fqMetricValue returns the value of the series of family name with the
// labels, and whether it exists; for a histogram, its sample count and
// sum.
func fqMetricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (value, sum float64, ok bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), 0, true
			default:
				return m.GetCounter().GetValue(), 0, true
			}
		}
	}
	return 0, 0, false
}

func TestFairQueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	provider, err := NewMetricsProvider(reg)
	if err != nil {
		t.Fatalf("NewMetricsProvider: %v", err)
	}
	if again, err := NewMetricsProvider(reg); err != nil || again.depth != provider.depth {
		t.Fatalf("a second provider on the registry: %v; want the same series", err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	q := New("widgets", requestCluster, Options[Request]{MetricsProvider: provider, Clock: clk})
	defer q.ShutDown()

	queue := map[string]string{"name": "widgets", "controller": "widgets"}
	cluster := func(name string) map[string]string {
		return map[string]string{"controller": "widgets", "cluster": name}
	}
	expect := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if got, _, _ := fqMetricValue(t, reg, name, labels); got != want {
			t.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
	}

	q.Add(fqReq("a", "1"))
	q.Add(fqReq("a", "2"))
	q.Add(fqReq("a", "1"))
	q.Add(fqReq("b", "1"))
	q.AddAfter(fqReq("c", "1"), time.Second)
	expect("workqueue_depth", queue, 3)
	expect("workqueue_adds_total", queue, 3)
	expect("workqueue_retries_total", queue, 1)
	expect("fleet_queue_depth", cluster("a"), 2)
	expect("fleet_queue_depth", cluster("b"), 1)

	clk.Step(time.Second)
	if n := q.Len(); n != 4 {
		t.Fatalf("Len() = %d, want 4", n)
	}
	expect("workqueue_depth", queue, 4)
	expect("workqueue_adds_total", queue, 4)
	expect("fleet_queue_depth", cluster("c"), 1)

	a1, _ := q.Get()
	if n, sum, _ := fqMetricValue(t, reg, "workqueue_queue_duration_seconds", queue); n != 1 || sum != 1 {
		t.Errorf("queue duration: %v samples, sum %v; want 1 of 1s", n, sum)
	}
	expect("workqueue_depth", queue, 3)
	expect("fleet_queue_depth", cluster("a"), 1)

	clk.Step(unfinishedWorkPeriod)
	poll.Until(t, "the unfinished-work update", func() bool {
		v, _, _ := fqMetricValue(t, reg, "workqueue_longest_running_processor_seconds", queue)
		return v == unfinishedWorkPeriod.Seconds()
	})
	clk.Step(time.Second)
	q.Done(a1)
	if n, sum, _ := fqMetricValue(t, reg, "workqueue_work_duration_seconds", queue); n != 1 || sum != 1.5 {
		t.Errorf("work duration: %v samples, sum %v; want 1 of 1.5s", n, sum)
	}

	q.Drop("a")
	expect("workqueue_depth", queue, 2)
	if _, _, ok := fqMetricValue(t, reg, "fleet_queue_depth", cluster("a")); ok {
		t.Error("fleet_queue_depth of a dropped cluster still exists")
	}
	q.Add(fqReq("a", "3"))
	expect("fleet_queue_depth", cluster("a"), 1)
	// A late request of the dropped cluster: once done, its series goes.
	for {
		item, _ := q.Get()
		q.Done(item)
		if item == fqReq("a", "3") {
			break
		}
	}
	if _, _, ok := fqMetricValue(t, reg, "fleet_queue_depth", cluster("a")); ok {
		t.Error("fleet_queue_depth of a dropped cluster came back with a late request and stayed")
	}

	problems, err := testutil.GatherAndLint(reg, "fleet_queue_depth")
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestFairQueueMetricsOfItemsInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	provider, err := NewMetricsProvider(reg)
	if err != nil {
		t.Fatalf("NewMetricsProvider: %v", err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	q := New("gadgets", requestCluster, Options[Request]{MetricsProvider: provider, Clock: clk})
	defer q.ShutDown()
	queue := map[string]string{"name": "gadgets", "controller": "gadgets"}
	unfinished := func(total, longest float64) {
		t.Helper()
		poll.Until(t, fmt.Sprintf("unfinished work %vs, longest %vs", total, longest), func() bool {
			u, _, _ := fqMetricValue(t, reg, "workqueue_unfinished_work_seconds", queue)
			l, _, _ := fqMetricValue(t, reg, "workqueue_longest_running_processor_seconds", queue)
			return u == total && l == longest
		})
	}

	q.Add(fqReq("a", "1"))
	q.Add(fqReq("b", "1"))
	a1, _ := q.Get() // at 0s, queued for 0s
	clk.Step(time.Second)
	b1, _ := q.Get() // at 1s, queued for 1s
	q.Add(a1)        // parked until its Done
	clk.Step(time.Second)
	q.Done(a1)          // worked 2s
	again, _ := q.Get() // at 2s, queued for 1s
	if again != a1 {
		t.Fatalf("Get = %v, want %v again", again, a1)
	}
	if n, sum, _ := fqMetricValue(t, reg, "workqueue_queue_duration_seconds", queue); n != 3 || sum != 2 {
		t.Errorf("queue duration: %v samples, sum %v; want 3 of 2s in all", n, sum)
	}
	clk.Step(unfinishedWorkPeriod)
	unfinished(2, 1.5) // b/1 for 1.5s, a/1 for 0.5s
	q.Done(b1)         // worked 1.5s
	clk.Step(unfinishedWorkPeriod)
	unfinished(1, 1) // a/1 for 1s
	q.Done(again)    // worked 1s
	clk.Step(unfinishedWorkPeriod)
	unfinished(0, 0)
	if n, sum, _ := fqMetricValue(t, reg, "workqueue_work_duration_seconds", queue); n != 3 || sum != 4.5 {
		t.Errorf("work duration: %v samples, sum %v; want 3 of 4.5s in all", n, sum)
	}
}

func TestFairQueueMetricsOnControllerRuntimeRegistry(t *testing.T) {
	// controller-runtime registered its workqueue_* series when its
	// packages loaded; the provider must find them, not conflict.
	provider, err := NewMetricsProvider(crmetrics.Registry)
	if err != nil {
		t.Fatalf("NewMetricsProvider(controller-runtime's registry): %v", err)
	}
	q := New("fairqueue-registry-test", requestCluster, Options[Request]{MetricsProvider: provider})
	defer q.ShutDown()

	series := map[string]map[string]string{
		"workqueue_adds_total": {"name": "fairqueue-registry-test", "controller": "fairqueue-registry-test"},
		"workqueue_depth":      {"name": "fairqueue-registry-test", "controller": "fairqueue-registry-test", "priority": ""},
		"fleet_queue_depth":    {"controller": "fairqueue-registry-test", "cluster": "a"},
	}
	before := map[string]float64{} // The registry is global: -count runs this again.
	for name, labels := range series {
		before[name], _, _ = fqMetricValue(t, crmetrics.Registry, name, labels)
	}
	q.Add(fqReq("a", "1"))
	for name, labels := range series {
		if got, _, _ := fqMetricValue(t, crmetrics.Registry, name, labels); got != before[name]+1 {
			t.Errorf("%s%v = %v on controller-runtime's registry, want %v", name, labels, got, before[name]+1)
		}
	}
}
