package fairqueue

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/fleetkube/fleet-manager/internal/metrics"
)

// MetricsProvider is a workqueue.MetricsProvider writing
// controller-runtime's workqueue_* series, labelled name and controller
// with the queue's name as controller-runtime's queues are (depth with an
// empty priority label, as its non-priority queues), that also writes the
// depth of each cluster of a Queue: fleet_queue_depth{controller,
// cluster}, deleted when the Queue drops the cluster.
type MetricsProvider struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
	clusterDepth   *prometheus.GaugeVec
}

var _ clusterDepthProvider = (*MetricsProvider)(nil)

// NewMetricsProvider registers the series with reg, or uses
// those registered there already. controller-runtime registers its
// workqueue_* series on its registry (metrics.Registry) when its
// controller packages load; these are described identically, so on that
// registry they are controller-runtime's own series, registered once.
func NewMetricsProvider(reg prometheus.Registerer) (*MetricsProvider, error) {
	names := []string{"name", "controller"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem:                       "workqueue",
			Name:                            name,
			Help:                            help,
			Buckets:                         buckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, names)
	}
	p := &MetricsProvider{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue",
			Name:      "depth",
			Help:      "Current depth of workqueue by workqueue and priority",
		}, []string{"name", "controller", "priority"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue",
			Name:      "adds_total",
			Help:      "Total number of adds handled by workqueue",
		}, names),
		latency:      histogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested"),
		workDuration: histogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes."),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue",
			Name:      "unfinished_work_seconds",
			Help: "How many seconds of work has been done that " +
				"is in progress and hasn't been observed by work_duration. Large " +
				"values indicate stuck threads. One can deduce the number of stuck " +
				"threads by observing the rate at which this increases.",
		}, names),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue",
			Name:      "longest_running_processor_seconds",
			Help: "How many seconds has the longest running " +
				"processor for workqueue been running.",
		}, names),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue",
			Name:      "retries_total",
			Help:      "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
		}, names),
		clusterDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_queue_depth",
			Help: "Ready requests of the cluster in the controller's queue.",
		}, []string{"controller", "cluster"}),
	}
	if err := errors.Join(
		metrics.Register(reg, &p.depth),
		metrics.Register(reg, &p.adds),
		metrics.Register(reg, &p.latency),
		metrics.Register(reg, &p.workDuration),
		metrics.Register(reg, &p.unfinished),
		metrics.Register(reg, &p.longestRunning),
		metrics.Register(reg, &p.retries),
		metrics.Register(reg, &p.clusterDepth),
	); err != nil {
		return nil, err
	}
	return p, nil
}

// NewDepthMetric returns the depth of the queue name.
func (p *MetricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name, name, "")
}

// NewAddsMetric returns the adds of the queue name.
func (p *MetricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name, name)
}

// NewLatencyMetric returns the queue latency of the queue name.
func (p *MetricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name, name)
}

// NewWorkDurationMetric returns the work duration of the queue name.
func (p *MetricsProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name, name)
}

// NewUnfinishedWorkSecondsMetric returns the unfinished work of the queue
// name.
func (p *MetricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name, name)
}

// NewLongestRunningProcessorSecondsMetric returns the longest running item
// of the queue name.
func (p *MetricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(name, name)
}

// NewRetriesMetric returns the retries of the queue name.
func (p *MetricsProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name, name)
}

func (p *MetricsProvider) newClusterDepthMetric(name, clusterName string) workqueue.GaugeMetric {
	return p.clusterDepth.WithLabelValues(name, clusterName)
}

func (p *MetricsProvider) deleteClusterDepthMetric(name, clusterName string) {
	p.clusterDepth.DeleteLabelValues(name, clusterName)
}
