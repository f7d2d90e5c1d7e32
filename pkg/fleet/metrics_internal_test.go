package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

var errMetricsTest = errors.New("boom")

// newTestMetrics returns fleetMetrics registered with a fresh registry.
func newTestMetrics(t *testing.T) (*fleetMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newFleetMetrics(reg)
	if err != nil {
		t.Fatalf("newFleetMetrics: %v", err)
	}
	return m, reg
}

// feedMetrics observes engagements and reconciles of clusters "a" and
// "b", each one failed and one good, and a reconcile of the hub.
func feedMetrics(m *fleetMetrics) {
	m.follow("a", registered("a"))
	m.follow("b", registered("b"))
	for _, name := range []string{"a", "b"} {
		m.observeEngage(name, "widgets", 2*time.Second, errMetricsTest)
		m.observeEngage(name, "widgets", 150*time.Millisecond, nil)
		m.observeReconcile("widgets", name, 40*time.Millisecond, nil)
		m.observeReconcile("widgets", name, 10*time.Millisecond, errMetricsTest)
	}
	m.observeReconcile("widgets", "", 5*time.Millisecond, nil)
}

// registered returns an accepted cluster.
func registered(name string) *registry.Cluster {
	return &registry.Cluster{Name: name, Claims: []registry.Claim{{}}, State: fleetv1alpha1.MemberStateReady}
}

func TestMetricsLintAndValues(t *testing.T) {
	m, reg := newTestMetrics(t)
	feedMetrics(m)

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	for name, tc := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"a engagement failures": {m.engagements.WithLabelValues("a", "widgets", resultFailure), 1},
		"b reconcile errors":    {m.reconcileErrors.WithLabelValues("widgets", "b"), 1},
		"hub reconcile errors":  {m.reconcileErrors.WithLabelValues("widgets", ""), 0},
		"hub reconcile success": {m.reconciles.WithLabelValues("widgets", "", resultSuccess), 1},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", name, got, tc.want)
		}
	}

	// Both results for each of three clusters, the hub included.
	if got := testutil.CollectAndCount(m.reconciles); got != 6 {
		t.Errorf("fleet_reconciles_total has %d series, want 6", got)
	}
}

func TestMetricsForget(t *testing.T) {
	m, reg := newTestMetrics(t)
	feedMetrics(m)

	before := seriesByCluster(t, reg)
	if before["a"] == 0 {
		t.Fatal("no series with cluster=a before forget")
	}
	m.follow("a", nil)
	after := seriesByCluster(t, reg)

	if n := after["a"]; n != 0 {
		t.Errorf("after a was removed: %d series with cluster=a, want 0", n)
	}
	for _, name := range []string{"b", ""} {
		if after[name] == 0 || after[name] != before[name] {
			t.Errorf("cluster=%q: %d series after forget(a), %d before; want the same, not 0", name, after[name], before[name])
		}
	}
	// Every metric family still has cluster b's series.
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if len(families) != 5 {
		t.Errorf("gathered %d metric families, want 5", len(families))
	}
}

// TestMetricsFollowRegistration checks that a cluster's series exist
// only while the registry accepts it: a refused cluster's series are
// deleted, observations made after it was refused (a member reporting as
// it stops) create none, and they start afresh once it is accepted again.
func TestMetricsFollowRegistration(t *testing.T) {
	m, reg := newTestMetrics(t)
	m.observeReconcile("widgets", "a", time.Millisecond, nil)
	if n := seriesByCluster(t, reg)["a"]; n != 0 {
		t.Fatalf("%d series of a cluster never registered, want 0", n)
	}
	m.follow("a", registered("a"))
	m.observeReconcile("widgets", "a", time.Millisecond, errMetricsTest)
	refused := registered("a")
	refused.Refusal = &kubeconfig.RefusedError{Reason: "ExecPluginNotAllowed"}
	m.follow("a", refused)
	m.observeEngage("a", "widgets", time.Millisecond, nil)
	m.observeReconcile("widgets", "a", time.Millisecond, nil)
	if n := seriesByCluster(t, reg)["a"]; n != 0 {
		t.Fatalf("%d series of a refused cluster, want 0", n)
	}
	m.follow("a", registered("a"))
	m.observeReconcile("widgets", "a", time.Millisecond, nil)
	want := `
# HELP fleet_reconcile_errors_total Reconciles per controller and cluster that returned an error.
# TYPE fleet_reconcile_errors_total counter
fleet_reconcile_errors_total{cluster="a",controller="widgets"} 0
# HELP fleet_reconciles_total Reconciles per controller and cluster, by result (success or error).
# TYPE fleet_reconciles_total counter
fleet_reconciles_total{cluster="a",controller="widgets",result="error"} 0
fleet_reconciles_total{cluster="a",controller="widgets",result="success"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleet_reconciles_total", "fleet_reconcile_errors_total"); err != nil {
		t.Error(err)
	}
}

func TestMetricsReconcileDoesNotAllocate(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.follow("a", registered("a"))
	m.observeReconcile("widgets", "a", time.Millisecond, nil)
	if n := testing.AllocsPerRun(100, func() {
		m.observeReconcile("widgets", "a", time.Millisecond, nil)
		m.observeReconcile("widgets", "a", time.Millisecond, errMetricsTest)
	}); n != 0 {
		t.Errorf("observeReconcile allocates %v times per call pair, want 0", n)
	}
}

// seriesByCluster gathers reg and counts its series by cluster label.
func seriesByCluster(t *testing.T, reg prometheus.Gatherer) map[string]int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	counts := map[string]int{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			// A label with an empty value, the hub's, is not exposed.
			name := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == labelCluster {
					name = l.GetValue()
				}
			}
			counts[name]++
		}
	}
	return counts
}

func TestMetricsRegisterTwice(t *testing.T) {
	first, reg := newTestMetrics(t)
	second, err := newFleetMetrics(reg)
	if err != nil {
		t.Fatalf("second newFleetMetrics: %v", err)
	}
	second.follow("a", registered("a"))
	second.observeReconcile("widgets", "a", time.Millisecond, nil)
	if got := testutil.ToFloat64(first.reconciles.WithLabelValues("widgets", "a", resultSuccess)); got != 1 {
		t.Errorf("fleet_reconciles_total{cluster=a,result=success} through the first = %v, want 1: the collectors are not shared", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	if len(problems) != 0 {
		t.Errorf("lint problems: %v", problems)
	}
}

func TestMetricsRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_reconciles_total",
		Help: "Something else.",
	}))
	if _, err := newFleetMetrics(reg); err == nil {
		t.Error("newFleetMetrics with a conflicting fleet_reconciles_total: no error")
	}
}
