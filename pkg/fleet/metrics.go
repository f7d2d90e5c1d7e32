package fleet

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetkube/fleet-manager/internal/metrics"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Label names and values of the fleet's series. Every series has a
// cluster label, "" for the hub; no label holds free text, so the number
// of series is bounded by clusters × controllers.
const (
	labelCluster    = "cluster"
	labelController = "controller"
	labelResult     = "result"

	resultSuccess = "success"
	resultFailure = "failure"
	resultError   = "error"
)

// fleetMetrics are the fleet's per-cluster series beside the member
// pool's: engagements, and reconciles per controller and cluster. A cluster's series exist only while the registry
// accepts the cluster: follow, fed from the registry's stream, deletes
// every series of a cluster that is removed or refused, and observations
// of a cluster that is not accepted create none.
//
// The methods are safe for concurrent use.
type fleetMetrics struct {
	engageDuration    *prometheus.HistogramVec
	engagements       *prometheus.CounterVec
	reconciles        *prometheus.CounterVec
	reconcileErrors   *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec

	// mu guards live, the clusters the registry accepts, and
	// reconcileSeries: the series of each controller and cluster, looked
	// up once rather than at every reconcile. A cluster's series are
	// written only while it is live, so that none outlives it.
	mu              sync.RWMutex
	live            map[string]bool
	reconcileSeries map[reconcileKey]*reconcileSeries
}

type reconcileKey struct{ controller, cluster string }

// reconcileSeries are the series one controller writes for one cluster.
type reconcileSeries struct {
	duration           prometheus.Observer
	succeeded, errored prometheus.Counter // fleet_reconciles_total by result
	errors             prometheus.Counter
}

// newFleetMetrics registers the fleet's series with reg. When they are
// already registered there, as with several managers sharing
// controller-runtime's global registry in one process, it uses the
// registered ones.
func newFleetMetrics(reg prometheus.Registerer) (*fleetMetrics, error) {
	m := &fleetMetrics{
		engageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_member_engage_duration_seconds",
			Help:    "How long engaging the cluster with a controller took.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120},
		}, []string{labelCluster, labelController}),
		engagements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_member_engagements_total",
			Help: "Engagements of the cluster with a controller, by result (success or failure).",
		}, []string{labelCluster, labelController, labelResult}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_reconciles_total",
			Help: "Reconciles per controller and cluster, by result (success or error).",
		}, []string{labelController, labelCluster, labelResult}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_reconcile_errors_total",
			Help: "Reconciles per controller and cluster that returned an error.",
		}, []string{labelController, labelCluster}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleet_reconcile_duration_seconds",
			Help: "How long reconciles took per controller and cluster.",
			// controller-runtime's reconcile buckets.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
				1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{labelController, labelCluster}),
		live:            map[string]bool{},
		reconcileSeries: map[reconcileKey]*reconcileSeries{},
	}
	if err := errors.Join(
		metrics.Register(reg, &m.engageDuration),
		metrics.Register(reg, &m.engagements),
		metrics.Register(reg, &m.reconciles),
		metrics.Register(reg, &m.reconcileErrors),
		metrics.Register(reg, &m.reconcileDuration),
	); err != nil {
		return nil, err
	}
	return m, nil
}

// follow makes a cluster's series follow its registration c, nil once
// removed: every series of a cluster that is not accepted is deleted.
func (m *fleetMetrics) follow(clusterName string, c *registry.Cluster) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c == nil || !c.RunsHere() {
		if m.live[clusterName] {
			delete(m.live, clusterName)
			m.lockedForget(clusterName)
		}
		return
	}
	m.live[clusterName] = true
}

// observeEngage records one engagement of a live cluster with a
// controller.
func (m *fleetMetrics) observeEngage(clusterName, controller string, took time.Duration, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.live[clusterName] && clusterName != registry.HubName {
		return
	}
	m.engageDuration.WithLabelValues(clusterName, controller).Observe(took.Seconds())
	metrics.CountResult(m.engagements, err == nil, resultSuccess, resultFailure, clusterName, controller)
}

// observeReconcile records one reconcile by a controller for a cluster.
// Like controller-runtime, a reconcile that returned an error counts as
// an error, whatever its result.
func (m *fleetMetrics) observeReconcile(controller, clusterName string, took time.Duration, err error) {
	s := m.reconcileSeriesOf(controller, clusterName)
	if s == nil {
		return
	}
	s.duration.Observe(took.Seconds())
	if err != nil {
		s.errored.Inc()
		s.errors.Inc()
	} else {
		s.succeeded.Inc()
	}
}

// reconcileSeriesOf returns the reconcile series of a controller and
// cluster, creating them all at 0 on first use, so rates of either result
// are defined from the first reconcile; nil for a cluster that is not
// live.
func (m *fleetMetrics) reconcileSeriesOf(controller, clusterName string) *reconcileSeries {
	key := reconcileKey{controller, clusterName}
	m.mu.RLock()
	s := m.reconcileSeries[key]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.live[clusterName] && clusterName != registry.HubName {
		return nil
	}
	if s = m.reconcileSeries[key]; s == nil {
		s = &reconcileSeries{
			duration:  m.reconcileDuration.WithLabelValues(controller, clusterName),
			succeeded: m.reconciles.WithLabelValues(controller, clusterName, resultSuccess),
			errored:   m.reconciles.WithLabelValues(controller, clusterName, resultError),
			errors:    m.reconcileErrors.WithLabelValues(controller, clusterName),
		}
		m.reconcileSeries[key] = s
	}
	return s
}

// lockedForget deletes every series of a cluster. mu must be held.
func (m *fleetMetrics) lockedForget(clusterName string) {
	for key := range m.reconcileSeries {
		if key.cluster == clusterName {
			delete(m.reconcileSeries, key)
		}
	}
	match := prometheus.Labels{labelCluster: clusterName}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.engageDuration,
		m.engagements,
		m.reconciles,
		m.reconcileErrors,
		m.reconcileDuration,
	} {
		v.DeletePartialMatch(match)
	}
}

// ObserveReconcile records one reconcile of cluster clusterName by
// controllerName, a controller that the fleet's builder did not build
// (such as a multicluster-runtime controller, through
// mcprovider.Provider.MeteredReconciler), in the series fleet controllers
// write: fleet_reconciles_total, fleet_reconcile_errors_total and
// fleet_reconcile_duration_seconds, labelled controller and cluster. As
// for fleet controllers, a member's series are written only while the
// registry accepts it on this replica, and deleted when it leaves.
func (m *Manager) ObserveReconcile(controllerName, clusterName string, took time.Duration, err error) {
	m.metrics.observeReconcile(controllerName, clusterName, took, err)
}
