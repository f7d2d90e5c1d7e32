package shard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetkube/fleet-manager/internal/metrics"
)

const (
	labelReplica   = "replica"
	labelDirection = "direction"
	directionIn    = "in"
	directionOut   = "out"
)

// replicaMetrics are a replica's series, labelled with its name so that
// replicas sharing a process (as in tests) keep theirs apart.
type replicaMetrics struct {
	replicas prometheus.Gauge
	owned    prometheus.Gauge
	fencedG  prometheus.Gauge
	moves    *prometheus.CounterVec

	// isFenced is the last value of fencedG; only the loop reads it.
	isFenced bool
}

func newReplicaMetrics(reg prometheus.Registerer, replica string) (*replicaMetrics, error) {
	replicas := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_shard_replicas",
		Help: "Live replicas sharing the fleet, not leaving, as this replica sees them.",
	}, []string{labelReplica})
	owned := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_shard_owned_members",
		Help: "Registered clusters this replica owns (its members, with those it is taking over).",
	}, []string{labelReplica})
	fenced := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_shard_fenced",
		Help: "1 while this replica's Lease is not renewed in time and it works on no member.",
	}, []string{labelReplica})
	moves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_shard_member_moves_total",
		Help: "Members handed to this replica (in) or from it (out).",
	}, []string{labelReplica, labelDirection})
	for _, err := range []error{
		metrics.Register(reg, &replicas), metrics.Register(reg, &owned),
		metrics.Register(reg, &fenced), metrics.Register(reg, &moves),
	} {
		if err != nil {
			return nil, err
		}
	}
	m := &replicaMetrics{
		replicas: replicas.WithLabelValues(replica),
		owned:    owned.WithLabelValues(replica),
		fencedG:  fenced.WithLabelValues(replica),
		moves:    moves.MustCurryWith(prometheus.Labels{labelReplica: replica}),
	}
	m.moves.WithLabelValues(directionIn).Add(0)
	m.moves.WithLabelValues(directionOut).Add(0)
	return m, nil
}

func (m *replicaMetrics) fenced() bool { return m.isFenced }

func (m *replicaMetrics) setFenced(fenced bool) {
	m.isFenced = fenced
	if fenced {
		m.fencedG.Set(1)
	} else {
		m.fencedG.Set(0)
	}
}
