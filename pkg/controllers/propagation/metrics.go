package propagation

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetkube/fleet-manager/internal/metrics"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// propagationMetrics are the Propagation controller's series. Every
// per-member series has a cluster label, is written only while the
// registry accepts the member and this replica owns it (writesSeries),
// and is deleted when it no longer does, or the member is handed off:
// neither a reconcile still running nor an owed removal counted after
// forget writes it again.
type propagationMetrics struct {
	applies        memberSeries[prometheus.Counter]
	applyDuration  memberSeries[prometheus.Observer]
	driftDetected  memberSeries[prometheus.Counter]
	driftCorrected memberSeries[prometheus.Counter]
	owedDeletions  memberSeries[prometheus.Gauge]
	memberWatches  memberSeries[prometheus.Gauge]
	// memberWatchStarts counts informers started: each lists its kind.
	memberWatchStarts memberSeries[prometheus.Counter]
	propagationsBy    *prometheus.GaugeVec
	journalLost       prometheus.Gauge
	// contentBuilds counts the builds of Propagations' contents.
	contentBuilds prometheus.Counter
	// unmirrored is by mirror ConfigMap (shard).
	unmirrored     *prometheus.GaugeVec
	perClusterVecs []interface{ DeletePartialMatch(prometheus.Labels) int }

	// live reports whether the registry accepts a member. mu is held
	// across a write's check of live and the series' creation, and by
	// forget, so that no series is created after it was forgotten.
	live func(cluster string) bool
	mu   sync.RWMutex
}

// memberSeries are the series of one vector whose first label is the
// member's name.
type memberSeries[T any] struct {
	m    *propagationMetrics
	with func(labelValues ...string) T
	// ignored takes a write for a member that is not live.
	ignored T
}

// WithLabelValues returns the series of labelValues, its first the
// member's name; a series written nowhere when the member is not live.
func (s memberSeries[T]) WithLabelValues(labelValues ...string) T {
	s.m.mu.RLock()
	defer s.m.mu.RUnlock()
	if !s.m.live(labelValues[0]) {
		return s.ignored
	}
	return s.with(labelValues...)
}

// writesSeries reports whether this replica writes the series of a
// member, c as the registry has it (ok: registered): while the registry
// accepts it and this replica owns it. A member handed off to another
// replica has its series written there, and forgotten here.
func writesSeries(c *registry.Cluster, ok bool) bool {
	return ok && c.Accepted() && c.Owned()
}

// readinessValues are the values of fleet_propagations' ready label.
var readinessValues = []string{"True", "False", "Unknown"}

// newMetrics registers the series with reg; live reports whether the
// registry accepts a member.
func newMetrics(reg prometheus.Registerer, live func(cluster string) bool) (*propagationMetrics, error) {
	applies := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_propagation_applies_total",
		Help: "Server-side applies of Propagation copies to members, by result. An unchanged copy is not applied.",
	}, []string{"cluster", "result"})
	applyDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fleet_propagation_apply_duration_seconds",
		Help:    "Duration of server-side applies of Propagation copies to members.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"cluster"})
	driftDetected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_propagation_drift_detected_total",
		Help: "Copies found changed in a member, in a field the manager applied.",
	}, []string{"cluster"})
	driftCorrected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_propagation_drift_corrected_total",
		Help: "Drifted copies applied again (drift: Correct).",
	}, []string{"cluster"})
	owedDeletions := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_propagation_owed_deletions",
		Help: "Propagations whose copies a member that is not Ready must still remove.",
	}, []string{"cluster"})
	memberWatches := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_propagation_member_watches",
		Help: "Informers watching a member's copies: one per namespace and kind that a run read and that the namespace's Propagations, or the journal's copies and owed removals there, still need.",
	}, []string{"cluster"})
	memberWatchStarts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_propagation_member_watch_starts_total",
		Help: "Informers started to watch a member's copies, each with a LIST of its kind in its namespace: by the first run that reads the kind there, or again after one nothing needed was stopped.",
	}, []string{"cluster"})
	m := &propagationMetrics{
		propagationsBy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_propagations",
			Help: "Propagations, by the status of their Ready condition.",
		}, []string{"ready"}),
		journalLost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_propagation_journal_lost_timestamp_seconds",
			Help: "When this manager's journal, unusable at start, was moved aside and started afresh (Unix seconds; 0: it was not). Removals owed to members that are down are lost unless the hub's mirror holds them.",
		}),
		unmirrored: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_propagation_owed_removals_unmirrored",
			Help: "Owed removals this replica's journal holds that the hub's mirror ConfigMap (shard) has no room for: they are carried out, but a replica taking over without this journal does not learn them.",
		}, []string{"shard"}),
		contentBuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_propagation_content_builds_total",
			Help: "Builds of a Propagation's content (the hub objects it selects, Envelopes unpacked, ordered and hashed): one per change of what it is built from, shared by every member run and status request.",
		}),
		live: live,
	}
	if err := errors.Join(
		metrics.Register(reg, &applies), metrics.Register(reg, &applyDuration),
		metrics.Register(reg, &driftDetected), metrics.Register(reg, &driftCorrected),
		metrics.Register(reg, &owedDeletions), metrics.Register(reg, &memberWatches), metrics.Register(reg, &memberWatchStarts), metrics.Register(reg, &m.propagationsBy),
		metrics.Register(reg, &m.journalLost), metrics.Register(reg, &m.unmirrored), metrics.Register(reg, &m.contentBuilds),
	); err != nil {
		return nil, err
	}
	ignoredCounter := prometheus.NewCounter(prometheus.CounterOpts{Name: "ignored"})
	m.applies = memberSeries[prometheus.Counter]{m: m, with: applies.WithLabelValues, ignored: ignoredCounter}
	m.applyDuration = memberSeries[prometheus.Observer]{m: m, with: applyDuration.WithLabelValues, ignored: prometheus.ObserverFunc(func(float64) {})}
	m.driftDetected = memberSeries[prometheus.Counter]{m: m, with: driftDetected.WithLabelValues, ignored: ignoredCounter}
	m.driftCorrected = memberSeries[prometheus.Counter]{m: m, with: driftCorrected.WithLabelValues, ignored: ignoredCounter}
	m.owedDeletions = memberSeries[prometheus.Gauge]{m: m, with: owedDeletions.WithLabelValues, ignored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ignored"})}
	m.memberWatches = memberSeries[prometheus.Gauge]{m: m, with: memberWatches.WithLabelValues, ignored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ignored"})}
	m.memberWatchStarts = memberSeries[prometheus.Counter]{m: m, with: memberWatchStarts.WithLabelValues, ignored: ignoredCounter}
	m.perClusterVecs = []interface{ DeletePartialMatch(prometheus.Labels) int }{applies, applyDuration, driftDetected, driftCorrected, owedDeletions, memberWatches, memberWatchStarts}
	return m, nil
}

// forget deletes every series of cluster, which live no longer reports.
func (m *propagationMetrics) forget(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
