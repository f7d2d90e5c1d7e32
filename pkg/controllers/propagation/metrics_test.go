package propagation

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsLintAndForgetAMember(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []string{"east", "west"} {
		m.applies.WithLabelValues(cluster, applySucceeded).Inc()
		m.applyDuration.WithLabelValues(cluster).Observe(0.01)
		m.driftDetected.WithLabelValues(cluster).Inc()
		m.driftCorrected.WithLabelValues(cluster).Inc()
		m.owedDeletions.WithLabelValues(cluster).Set(1)
	}
	m.setReadiness(map[string]int{"True": 2})
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	m.forget("east")
	if n := testutil.CollectAndCount(m.applies); n != 1 {
		t.Errorf("fleet_propagation_applies_total has %d series after forgetting east, want west's 1", n)
	}
	if n := testutil.CollectAndCount(m.owedDeletions); n != 1 {
		t.Errorf("fleet_propagation_owed_deletions has %d series after forgetting east, want 1", n)
	}
	if n := testutil.CollectAndCount(m.propagationsBy); n != 3 {
		t.Errorf("fleet_propagations has %d series, want one per Ready status", n)
	}
}
