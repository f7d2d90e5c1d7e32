package member

import (
	"crypto/sha256"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// BenchmarkNewMember measures what the pool does for a new member between
// the parse of its kubeconfig and its start: newMember (dialer, transport,
// clients, probes) and its first metric series; and newCluster, which
// its start calls once it is admitted. The kubeconfig has a real
// CA and client certificate, as most members' do.
func BenchmarkNewMember(b *testing.B) {
	cert, key, err := certutil.GenerateSelfSignedCertKey("member.example.com", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	data := kubeconfigtest.Build(b, func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		cl.CertificateAuthorityData = cert
		u.Token, u.ClientCertificateData, u.ClientKeyData = "", cert, key
	})
	pool, err := NewPool(Options{Registry: NewObservedRegistry(nil), Engage: engageNothing, Metrics: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	creds, err := pool.parse(sha256.Sum256(data), data)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("newMember", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := newMember("member-1", creds, pool)
			if err != nil {
				b.Fatal(err)
			}
			pool.metrics.add(m.name, fleetv1alpha1.MemberStatePending)
			pool.metrics.forget(m.name)
		}
	})
	b.Run("newCluster", func(b *testing.B) {
		m, err := newMember("member-1", creds, pool)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.newCluster(pool.initialSyncs.forMember(m.awaitFirstDial, m.away)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
