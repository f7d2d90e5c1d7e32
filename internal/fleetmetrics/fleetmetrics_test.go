package fleetmetrics

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

// newTestMetrics returns Fleet registered with a fresh registry.
func newTestMetrics(t *testing.T) (*Fleet, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewFleet(reg)
	if err != nil {
		t.Fatalf("NewFleet: %v", err)
	}
	return m, reg
}

// feedMetrics observes probes, engagements and reconciles of clusters
// "a" and "b": "a" has one failed probe after a success and is Unhealthy,
// "b" is Ready; each has one failed and one good engagement and
// reconcile.
func feedMetrics(m *Fleet) {
	ok := registry.ProbeResult{Duration: 20 * time.Millisecond}
	failed := registry.ProbeResult{Duration: 3 * time.Second, Err: errMetricsTest, ConsecutiveFailures: 1}
	m.Follow("a", registered("a", fleetv1alpha1.MemberStateUnhealthy, &failed))
	m.Follow("b", registered("b", fleetv1alpha1.MemberStateReady, &ok))
	m.ObserveProbe("a", ok)
	m.ObserveProbe("a", failed)
	m.ObserveProbe("b", ok)
	for _, name := range []string{"a", "b"} {
		m.ObserveEngage(name, "widgets", 2*time.Second, errMetricsTest)
		m.ObserveEngage(name, "widgets", 150*time.Millisecond, nil)
		m.ObserveReconcile("widgets", name, 40*time.Millisecond, nil)
		m.ObserveReconcile("widgets", name, 10*time.Millisecond, errMetricsTest)
	}
	m.ObserveReconcile("widgets", "", 5*time.Millisecond, nil)
}

// registered returns an accepted cluster in state, after probe.
func registered(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult) *registry.Cluster {
	return &registry.Cluster{Name: name, Claims: []registry.Claim{{}}, State: state, Probe: probe}
}

func TestFleetMetricsLintAndValues(t *testing.T) {
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
		"a ready":                {m.memberReady.WithLabelValues("a"), 0},
		"b ready":                {m.memberReady.WithLabelValues("b"), 1},
		"a consecutive failures": {m.consecutiveFailures.WithLabelValues("a"), 1},
		"b consecutive failures": {m.consecutiveFailures.WithLabelValues("b"), 0},
		"a engagement failures":  {m.engagements.WithLabelValues("a", "widgets", resultFailure), 1},
		"b reconcile errors":     {m.reconcileErrors.WithLabelValues("widgets", "b"), 1},
		"hub reconcile errors":   {m.reconcileErrors.WithLabelValues("widgets", ""), 0},
		"hub reconcile success":  {m.reconciles.WithLabelValues("widgets", "", resultSuccess), 1},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", name, got, tc.want)
		}
	}

	// Five states for each of two clusters.
	if got := testutil.CollectAndCount(m.memberState); got != 10 {
		t.Errorf("fleet_member_state has %d series, want 10", got)
	}
	// Both results for each of three clusters, the hub included.
	if got := testutil.CollectAndCount(m.reconciles); got != 6 {
		t.Errorf("fleet_reconciles_total has %d series, want 6", got)
	}

	const want = `
# HELP fleet_member_probes_total Health probes of the cluster, by result (success or failure).
# TYPE fleet_member_probes_total counter
fleet_member_probes_total{cluster="a",result="failure"} 1
fleet_member_probes_total{cluster="a",result="success"} 1
fleet_member_probes_total{cluster="b",result="failure"} 0
fleet_member_probes_total{cluster="b",result="success"} 1
# HELP fleet_member_state The cluster's state: 1 for the current state, 0 for the others.
# TYPE fleet_member_state gauge
fleet_member_state{cluster="a",state="Connecting"} 0
fleet_member_state{cluster="a",state="Disconnected"} 0
fleet_member_state{cluster="a",state="Pending"} 0
fleet_member_state{cluster="a",state="Ready"} 0
fleet_member_state{cluster="a",state="Unhealthy"} 1
fleet_member_state{cluster="b",state="Connecting"} 0
fleet_member_state{cluster="b",state="Disconnected"} 0
fleet_member_state{cluster="b",state="Pending"} 0
fleet_member_state{cluster="b",state="Ready"} 1
fleet_member_state{cluster="b",state="Unhealthy"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fleet_member_probes_total", "fleet_member_state"); err != nil {
		t.Error(err)
	}
}

func TestFleetMetricsForget(t *testing.T) {
	m, reg := newTestMetrics(t)
	feedMetrics(m)

	before := seriesByCluster(t, reg)
	if before["a"] == 0 {
		t.Fatal("no series with cluster=a before forget")
	}
	m.Follow("a", nil)
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
	if len(families) != 10 {
		t.Errorf("gathered %d metric families, want 10", len(families))
	}
}

// TestFleetMetricsFollowRegistration checks that a cluster's series exist
// only while the registry accepts it: a refused cluster's series are
// deleted, observations made after it was refused (a member reporting as
// it stops) create none, and they start afresh once it is accepted again.
func TestFleetMetricsFollowRegistration(t *testing.T) {
	m, reg := newTestMetrics(t)
	m.ObserveReconcile("widgets", "a", time.Millisecond, nil)
	if n := seriesByCluster(t, reg)["a"]; n != 0 {
		t.Fatalf("%d series of a cluster never registered, want 0", n)
	}
	m.Follow("a", registered("a", fleetv1alpha1.MemberStateReady, nil))
	m.ObserveReconcile("widgets", "a", time.Millisecond, errMetricsTest)
	if got := testutil.ToFloat64(m.memberReady.WithLabelValues("a")); got != 1 {
		t.Fatalf("fleet_member_ready{cluster=a} = %v, want 1", got)
	}
	refused := registered("a", "", nil)
	refused.Refusal = &kubeconfig.RefusedError{Reason: "ExecPluginNotAllowed"}
	m.Follow("a", refused)
	m.ObserveProbe("a", registry.ProbeResult{})
	m.ObserveEngage("a", "widgets", time.Millisecond, nil)
	m.ObserveReconcile("widgets", "a", time.Millisecond, nil)
	if n := seriesByCluster(t, reg)["a"]; n != 0 {
		t.Fatalf("%d series of a refused cluster, want 0", n)
	}
	m.Follow("a", registered("a", fleetv1alpha1.MemberStateReady, nil))
	m.ObserveReconcile("widgets", "a", time.Millisecond, nil)
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

func TestFleetMetricsReconcileDoesNotAllocate(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.Follow("a", registered("a", fleetv1alpha1.MemberStateReady, nil))
	m.ObserveReconcile("widgets", "a", time.Millisecond, nil)
	if n := testing.AllocsPerRun(100, func() {
		m.ObserveReconcile("widgets", "a", time.Millisecond, nil)
		m.ObserveReconcile("widgets", "a", time.Millisecond, errMetricsTest)
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

func TestFleetMetricsRegisterTwice(t *testing.T) {
	first, reg := newTestMetrics(t)
	second, err := NewFleet(reg)
	if err != nil {
		t.Fatalf("second NewFleet: %v", err)
	}
	second.Follow("a", registered("a", fleetv1alpha1.MemberStateReady, nil))
	if got := testutil.ToFloat64(first.memberReady.WithLabelValues("a")); got != 1 {
		t.Errorf("fleet_member_ready{cluster=a} through the first = %v, want 1: the collectors are not shared", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	if len(problems) != 0 {
		t.Errorf("lint problems: %v", problems)
	}
}

func TestFleetMetricsRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_member_ready",
		Help: "Something else.",
	}))
	if _, err := NewFleet(reg); err == nil {
		t.Error("NewFleet with a conflicting fleet_member_ready: no error")
	}
}
