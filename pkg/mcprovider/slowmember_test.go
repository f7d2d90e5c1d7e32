package mcprovider_test

import (
	"slices"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestHungMemberDoesNotHoldUpAnotherMembersMCRController: a member whose
// server accepts connections and never answers delays only itself; a
// member registered after it is reconciled by an MCR controller within
// seconds, as by a fleet controller. (multicluster-runtime v0.24.1's
// controller engages a cluster under its lock and waits there, in the
// Kind source, for the cluster's cache to sync: the hung member's
// engagement holds every later one until it ends, at --disconnect-after.)
func TestHungMemberDoesNotHoldUpAnotherMembersMCRController(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-hol")
	namespaces(t, watched)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	proxy.Hang(true)
	// Never Disconnected within the test.
	health := func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{Interval: 200 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
	}
	f, _, mgr, rec := reviewMCR(t, fleettest.FleetOptions{Configure: health}, "r", watched, 0, "")
	hung, healthy := suite.Name("rv-hung"), suite.Name("rv-healthy")
	f.Register(t, hung, kc)
	start(t, mgr)
	poll.Until(t, "the hung member's engagement with MCR under way", func() bool {
		return slices.ContainsFunc(f.Manager.Engagements(hung), func(e engage.Engagement) bool { return e.Aware == "multicluster-runtime" })
	})
	f.Register(t, healthy, suite.Kubeconfigs[0])
	createCM(t, suite.MemberClients[0], watched, "cm")
	const bound = 20 * time.Second
	for deadline := time.Now().Add(bound); !rec.has(healthy, "cm"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a healthy member's object not reconciled within %v of its registration while another member hangs", bound)
		}
	}
	if s, _ := f.Manager.MemberState(hung); s == fleetv1alpha1.MemberStateDisconnected {
		t.Errorf("the hung member is %s: the test needs it connected", s)
	}
}
