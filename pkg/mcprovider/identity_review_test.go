package mcprovider_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// stateAware records, at each engagement, the member's state as the
// fleet reports it then.
type stateAware struct {
	*awareRec
	f *fleettest.Fleet

	mu     sync.Mutex
	states []fleetv1alpha1.MemberState
}

func (a *stateAware) Engage(ctx context.Context, name mcluster.ClusterName, cl cluster.Cluster) error {
	s, _ := a.f.Manager.MemberState(string(name))
	a.mu.Lock()
	a.states = append(a.states, s)
	a.mu.Unlock()
	return a.awareRec.Engage(ctx, name, cl)
}

func (a *stateAware) seen() []fleetv1alpha1.MemberState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.states)
}

// TestAddressIdentifiedMemberReconnectedAtItsReturnIsHandedOverOnlyOnceReady:
// a member whose credentials cannot read kube-system (a service account
// token: identified by its address's hash), Ready and handed over, loses
// its connections while Unhealthy; at its return it is reconnected (a
// new cluster), and the new cluster is handed to MCR only while the
// member is Ready on it, once; the old engagement ends.
func TestAddressIdentifiedMemberReconnectedAtItsReturnIsHandedOverOnlyOnceReady(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", "", 0, "")
	f.Start(t)
	saNS := suite.Name("rv-addr-sa")
	kc, proxy := fleettest.ViaProxy(t, suite.ServiceAccountMember(t, 1, saNS, 3600))
	name := suite.Name("rv-addr")
	f.Register(t, name, kc)
	a := &stateAware{awareRec: &awareRec{}, f: f}
	runProvider(t, p, a)
	poll.Until(t, "handed over", func() bool { return len(a.of(name)) == 1 })
	first := a.of(name)[0]
	hangConnected(t, proxy)
	f.WaitState(t, name, fleetv1alpha1.MemberStateUnhealthy)
	awaitProbes(t, name, 3)
	proxy.Hang(false)
	poll.Until(t, "reconnected at its return: a new cluster handed over, the old engagement ended", func() bool {
		live := liveOf(a.of(name))
		return first.ctx.Err() != nil && len(live) == 1 && live[0].cl != first.cl
	})
	awaitProbes(t, name, 3)
	es := a.of(name)
	cl, err := p.Get(t.Context(), mcluster.ClusterName(name))
	if len(es) != 2 || len(liveOf(es)) != 1 || err != nil || liveOf(es)[0].cl != cl {
		t.Fatalf("after its return: %d engagements, %d live (want 2, 1 live, with the cluster Get returns; Get err %v)", len(es), len(liveOf(es)), err)
	}
	for i, s := range a.seen() {
		if s != fleetv1alpha1.MemberStateReady {
			t.Errorf("engagement %d handed over while the member was %s, want Ready", i, s)
		}
	}
}
