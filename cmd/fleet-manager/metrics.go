package main

import (
	"crypto/tls"

	"github.com/spf13/pflag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsFlags configure the metrics endpoint, as kubebuilder scaffolds
// it: HTTPS, and only for callers the hub authenticates and authorizes.
type metricsFlags struct {
	bindAddress string
	secure      bool
	certDir     string
}

func (m *metricsFlags) bindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&m.bindAddress, "metrics-bind-address", ":8443", `Address the metrics endpoint binds to; "0" disables it.`)
	fs.BoolVar(&m.secure, "metrics-secure", true, "Serve metrics over HTTPS, only to callers whose token the hub accepts (a TokenReview) and who may get the non-resource URL /metrics (a SubjectAccessReview). With false, plain HTTP to anyone: bind it to a loopback address.")
	fs.StringVar(&m.certDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key for the metrics endpoint, reloaded when they change, such as a mounted kubernetes.io/tls Secret. Default: a self-signed certificate, generated at start.")
}

// options returns the metrics server's options.
func (m *metricsFlags) options() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: m.bindAddress}
	if !m.secure {
		return opts
	}
	opts.SecureServing = true
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	opts.CertDir = m.certDir
	// HTTP/1.1 only, as kubebuilder does: HTTP/2 brings the rapid reset
	// and stream cancellation attacks and nothing a scraper needs.
	opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return opts
}
