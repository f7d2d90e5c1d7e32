package metrics

import "github.com/prometheus/client_golang/prometheus"

// CountResult increments the counter of ok's result in v and creates the
// other result's series at 0, so both exist from the first observation
// and rates of either are defined. labels are v's labels before result.
func CountResult(v *prometheus.CounterVec, ok bool, success, failure string, labels ...string) {
	hit, miss := success, failure
	if !ok {
		hit, miss = failure, success
	}
	v.WithLabelValues(append(labels, hit)...).Inc()
	v.WithLabelValues(append(labels, miss)...).Add(0)
}
