package propagation

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetkube/fleet-manager/internal/metrics"
)

// Label values of fleet_propagation_applies_total's result.
const (
	applySucceeded = "success"
	applyFailed    = "failure"
)

// propagationMetrics are the Propagation controller's series. Every
// per-member series has a cluster label and is deleted when the member's
// registration goes.
type propagationMetrics struct {
	applies        *prometheus.CounterVec
	applyDuration  *prometheus.HistogramVec
	driftDetected  *prometheus.CounterVec
	driftCorrected *prometheus.CounterVec
	owedDeletions  *prometheus.GaugeVec
	propagationsBy *prometheus.GaugeVec
	perClusterVecs []interface{ DeletePartialMatch(prometheus.Labels) int }
}

// readinessValues are the values of fleet_propagations' ready label.
var readinessValues = []string{"True", "False", "Unknown"}

func newMetrics(reg prometheus.Registerer) (*propagationMetrics, error) {
	m := &propagationMetrics{
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_propagation_applies_total",
			Help: "Server-side applies of Propagation copies to members, by result. An unchanged copy is not applied.",
		}, []string{"cluster", "result"}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_propagation_apply_duration_seconds",
			Help:    "Duration of server-side applies of Propagation copies to members.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"cluster"}),
		driftDetected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_propagation_drift_detected_total",
			Help: "Copies found changed in a member, in a field the manager applied.",
		}, []string{"cluster"}),
		driftCorrected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_propagation_drift_corrected_total",
			Help: "Drifted copies applied again (drift: Correct).",
		}, []string{"cluster"}),
		owedDeletions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_propagation_owed_deletions",
			Help: "Propagations whose copies a member that is not Ready must still remove.",
		}, []string{"cluster"}),
		propagationsBy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_propagations",
			Help: "Propagations, by the status of their Ready condition.",
		}, []string{"ready"}),
	}
	if err := errors.Join(
		metrics.Register(reg, &m.applies), metrics.Register(reg, &m.applyDuration),
		metrics.Register(reg, &m.driftDetected), metrics.Register(reg, &m.driftCorrected),
		metrics.Register(reg, &m.owedDeletions), metrics.Register(reg, &m.propagationsBy),
	); err != nil {
		return nil, err
	}
	m.perClusterVecs = []interface{ DeletePartialMatch(prometheus.Labels) int }{m.applies, m.applyDuration, m.driftDetected, m.driftCorrected, m.owedDeletions}
	return m, nil
}

// forget deletes every series of cluster.
func (m *propagationMetrics) forget(cluster string) {
	for _, v := range m.perClusterVecs {
		v.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	}
}

// setReadiness sets fleet_propagations from counts by Ready status.
func (m *propagationMetrics) setReadiness(counts map[string]int) {
	for _, v := range readinessValues {
		m.propagationsBy.WithLabelValues(v).Set(float64(counts[v]))
	}
}
