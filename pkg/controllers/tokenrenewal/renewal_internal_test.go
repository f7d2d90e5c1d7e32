package tokenrenewal

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// RenewOnce evaluates cluster name's credential once, with opts, as the
// renewal does when it wakes. It reaches members through running, which
// stands for the manager's GetRunningCluster.
func RenewOnce(ctx context.Context, t *testing.T, m *fleet.Manager, opts Options, name string, running func(clusterName string, kubeconfig []byte) (cluster.Cluster, error)) {
	t.Helper()
	queue := workqueue.NewTypedDelayingQueue[string]()
	defer queue.ShutDown()
	opts.Credentials = NewCredentials()
	r, err := newCredentialRenewal(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.running = running
	r.evaluate(ctx, queue, name)
}

func TestPlanRenewal(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	issued := clock.Now()
	token := kubeconfig.Credential{Type: kubeconfig.CredentialToken, IssuedAt: issued, Expiry: issued.Add(24 * time.Hour),
		ServiceAccount: types.NamespacedName{Namespace: "fleet-system", Name: "fleet-manager"}}
	at := func(hours float64) time.Time { return issued.Add(time.Duration(hours * float64(time.Hour))) }

	for _, tc := range []struct {
		jitter        float64
		renew, warnAt time.Time
	}{
		{jitter: 0, renew: at(19.2), warnAt: at(21.6)},
		{jitter: -1, renew: at(18), warnAt: at(21.6)},
		{jitter: 1, renew: at(20.4), warnAt: at(21.6)},
	} {
		p := planRenewal(token, true, DefaultRenewAfter, DefaultWarnAfter, tc.jitter)
		if !p.renewAt.Equal(tc.renew) || !p.warnAt.Equal(tc.warnAt) {
			t.Errorf("jitter %g: plan = renew %s, warn %s; want renew %s, warn %s", tc.jitter, p.renewAt, p.warnAt, tc.renew, tc.warnAt)
		}
	}
	if p := planRenewal(token, false, DefaultRenewAfter, DefaultWarnAfter, 0); !p.renewAt.IsZero() || !p.warnAt.Equal(at(21.6)) {
		t.Errorf("not renewable: plan = %+v, want only a warning at 21.6h", p)
	}
	if p := planRenewal(kubeconfig.Credential{Type: kubeconfig.CredentialToken}, true, DefaultRenewAfter, DefaultWarnAfter, 0); p != (renewalPlan{}) {
		t.Errorf("no expiry: plan = %+v, want none", p)
	}
	if p := planRenewal(token, true, 0.95, 0.9, 1); !p.renewAt.Equal(p.warnAt) {
		t.Errorf("renewal after the warning: plan = %+v, want the renewal moved to the warning", p)
	}

	// The wakes a renewal queues as the fake clock moves through a
	// token's life: renewal, warning, expiry, then nothing.
	p := planRenewal(token, true, DefaultRenewAfter, DefaultWarnAfter, 0)
	var wakes []time.Time
	for {
		d, ok := nextWake(clock.Now(), p.renewAt, p.warnAt, token.Expiry)
		if !ok {
			break
		}
		clock.Step(d)
		wakes = append(wakes, clock.Now())
	}
	if len(wakes) != 3 || !wakes[0].Equal(at(19.2)) || !wakes[1].Equal(at(21.6)) || !wakes[2].Equal(at(24)) {
		t.Errorf("wakes = %v, want 19.2h, 21.6h and 24h after issue", wakes)
	}
}
