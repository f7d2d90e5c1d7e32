package member

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/metrics"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const (
	labelCluster  = "cluster"
	labelState    = "state"
	labelResult   = "result"
	resultSuccess = "success"
	resultFailure = "failure"
)

// poolMetrics are the series of the pool's members: state and probes.
// A member's series exist while the pool holds it: observations of a
// member that is gone, such as its last probe as it stops, create none.
//
// A member's state is exposed twice, on purpose: fleet_member_ready is
// the one series to alert on (fleet_member_ready == 0), and
// fleet_member_state follows the kube-state-metrics habit of one series
// per state, 1 for the current one, so a dashboard can count members by
// state. Both stay bounded: five state series per member.
type poolMetrics struct {
	ready               *prometheus.GaugeVec
	state               *prometheus.GaugeVec
	probes              *prometheus.CounterVec
	probeDuration       *prometheus.HistogramVec
	consecutiveFailures *prometheus.GaugeVec

	// mu guards live: the members the pool holds.
	mu   sync.RWMutex
	live map[string]bool
}

// newPoolMetrics registers the member series with reg. When they are
// already registered there, as with several pools sharing
// controller-runtime's global registry in one process, it uses the
// registered ones.
func newPoolMetrics(reg prometheus.Registerer) (*poolMetrics, error) {
	m := &poolMetrics{
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_member_ready",
			Help: "Whether the cluster is Ready: engaged, and its last probe succeeded (1) or not (0).",
		}, []string{labelCluster}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_member_state",
			Help: "The cluster's state: 1 for the current state, 0 for the others.",
		}, []string{labelCluster, labelState}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_member_probes_total",
			Help: "Health probes of the cluster, by result (success or failure).",
		}, []string{labelCluster, labelResult}),
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_member_probe_duration_seconds",
			Help:    "How long the cluster's health probes took.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{labelCluster}),
		consecutiveFailures: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_member_consecutive_probe_failures",
			Help: "Health probes of the cluster that failed in a row since its last success.",
		}, []string{labelCluster}),
		live: map[string]bool{},
	}
	if err := errors.Join(
		metrics.Register(reg, &m.ready),
		metrics.Register(reg, &m.state),
		metrics.Register(reg, &m.probes),
		metrics.Register(reg, &m.probeDuration),
		metrics.Register(reg, &m.consecutiveFailures),
	); err != nil {
		return nil, err
	}
	return m, nil
}

// add starts the series of a member the pool now holds, in state.
func (m *poolMetrics) add(name string, state fleetv1alpha1.MemberState) {
	m.mu.Lock()
	m.live[name] = true
	m.mu.Unlock()
	m.consecutiveFailures.WithLabelValues(name).Set(0)
	m.observe(name, state, nil)
}

// observe records a member's state and, when probe is not nil, the probe
// that led to it.
func (m *poolMetrics) observe(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.live[name] {
		return
	}
	m.ready.WithLabelValues(name).Set(boolValue(state == fleetv1alpha1.MemberStateReady))
	for _, s := range fleetv1alpha1.MemberStates {
		m.state.WithLabelValues(name, string(s)).Set(boolValue(state == s))
	}
	if probe == nil {
		return
	}
	m.consecutiveFailures.WithLabelValues(name).Set(float64(probe.ConsecutiveFailures))
	m.probeDuration.WithLabelValues(name).Observe(probe.Duration.Seconds())
	metrics.CountResult(m.probes, probe.Err == nil, resultSuccess, resultFailure, name)
}

// forget deletes every series of a member the pool no longer holds.
func (m *poolMetrics) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, name)
	match := prometheus.Labels{labelCluster: name}
	m.ready.DeletePartialMatch(match)
	m.state.DeletePartialMatch(match)
	m.probes.DeletePartialMatch(match)
	m.probeDuration.DeletePartialMatch(match)
	m.consecutiveFailures.DeletePartialMatch(match)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
