package member

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

var errProbeFailed = errors.New("boom")

func newTestPoolMetrics(t *testing.T) (*poolMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newPoolMetrics(reg)
	if err != nil {
		t.Fatalf("newPoolMetrics: %v", err)
	}
	return m, reg
}

// feedPoolMetrics adds members "a" and "b": "a" has one failed probe
// after a success and is Unhealthy, "b" is Ready.
func feedPoolMetrics(m *poolMetrics) {
	ok := registry.ProbeResult{Duration: 20 * time.Millisecond}
	failed := registry.ProbeResult{Duration: 3 * time.Second, Err: errProbeFailed, ConsecutiveFailures: 1}
	m.add("a", fleetv1alpha1.MemberStatePending)
	m.add("b", fleetv1alpha1.MemberStatePending)
	m.observe("a", fleetv1alpha1.MemberStateReady, &ok)
	m.observe("a", fleetv1alpha1.MemberStateUnhealthy, &failed)
	m.observe("b", fleetv1alpha1.MemberStateReady, &ok)
}

func TestPoolMetricsLintAndValues(t *testing.T) {
	m, reg := newTestPoolMetrics(t)
	feedPoolMetrics(m)

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
		"a ready":                {m.ready.WithLabelValues("a"), 0},
		"b ready":                {m.ready.WithLabelValues("b"), 1},
		"a consecutive failures": {m.consecutiveFailures.WithLabelValues("a"), 1},
		"b consecutive failures": {m.consecutiveFailures.WithLabelValues("b"), 0},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", name, got, tc.want)
		}
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

// TestPoolMetricsForget checks that a member's series exist only while
// the pool holds it: forget deletes them all and leaves the others', and
// a report after it (a member's last probe as it stops) creates none.
func TestPoolMetricsForget(t *testing.T) {
	m, reg := newTestPoolMetrics(t)
	feedPoolMetrics(m)
	before := testutil.CollectAndCount(m.state)
	m.forget("a")
	m.observe("a", fleetv1alpha1.MemberStateUnhealthy, &registry.ProbeResult{Err: errProbeFailed})
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == labelCluster && l.GetValue() == "a" {
					t.Errorf("%s still has a series of a, which the pool forgot", f.GetName())
				}
			}
		}
	}
	if after := testutil.CollectAndCount(m.state); after != before/2 {
		t.Errorf("fleet_member_state has %d series after a was forgotten, %d before; want b's %d", after, before, before/2)
	}
}

// TestPoolMetricsRegisterTwice checks that two pools in one process, on
// one registry, write the same series.
func TestPoolMetricsRegisterTwice(t *testing.T) {
	first, reg := newTestPoolMetrics(t)
	second, err := newPoolMetrics(reg)
	if err != nil {
		t.Fatalf("second newPoolMetrics: %v", err)
	}
	second.add("a", fleetv1alpha1.MemberStateReady)
	if got := testutil.ToFloat64(first.ready.WithLabelValues("a")); got != 1 {
		t.Errorf("fleet_member_ready{cluster=a} through the first = %v, want 1: the collectors are not shared", got)
	}
}

func TestPoolMetricsRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_member_ready", Help: "Something else."}))
	if _, err := newPoolMetrics(reg); err == nil {
		t.Error("newPoolMetrics with a conflicting fleet_member_ready: no error")
	}
}
