package tokenrenewal

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetkube/fleet-manager/internal/metrics"
)

// renewalMetrics are the series of the members' credentials, kept while
// the registry accepts the member.
type renewalMetrics struct {
	expiry *prometheus.GaugeVec
}

// newRenewalMetrics registers the series with reg, or uses the ones
// already registered there.
func newRenewalMetrics(reg prometheus.Registerer) (*renewalMetrics, error) {
	m := &renewalMetrics{expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fleet_member_credential_expiry_timestamp_seconds",
		Help: "When the cluster's credential expires, in seconds since the Unix epoch; no series when it does not expire.",
	}, []string{"cluster"})}
	if err := metrics.Register(reg, &m.expiry); err != nil {
		return nil, err
	}
	return m, nil
}

// observe records when cluster name's credential expires: never, if zero.
func (m *renewalMetrics) observe(name string, expiry time.Time) {
	if expiry.IsZero() {
		m.expiry.DeleteLabelValues(name)
		return
	}
	m.expiry.WithLabelValues(name).Set(float64(expiry.Unix()))
}

// forget deletes cluster name's series.
func (m *renewalMetrics) forget(name string) { m.expiry.DeleteLabelValues(name) }
