package propagation_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestMemberThatGoesDownLogsNoReconcilerError: an engaged member cut off
// while its copies change is, until the probes make it not Ready, logged
// once at Info as unreachable, not as a "Reconciler error" at every
// retry of controller-runtime's back-off from 5ms.
func TestMemberThatGoesDownLogsNoReconcilerError(t *testing.T) {
	t.Parallel()
	// Probes slow enough that runs fail for a few seconds before the
	// member is Unhealthy.
	f := newFleetWith(t, &member.HealthOptions{Interval: time.Second, RetryInterval: 500 * time.Millisecond, Timeout: time.Second, FailureThreshold: 3, DisconnectAfter: time.Hour})
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.registerKubeconfig("east", proxied, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in east", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })

	before := len(f.fleet.Logs.Lines())
	proxy.Down()
	f.setData("web", "2") // east's run applies, and fails
	// The manager's verdict, which its MemberCluster's Ready condition
	// shows (no MemberCluster controller runs in this package's tests).
	poll.Until(t, "east Unhealthy", func() bool { s, _ := f.mgr.MemberState("east"); return s == fleetv1alpha1.MemberStateUnhealthy })
	window := f.fleet.Logs.Lines()[before:]
	east := slices.DeleteFunc(slices.Clone(window), func(line string) bool { return !strings.Contains(line, `"cluster"="east"`) })
	var errorLines []string
	for _, line := range east {
		if !strings.Contains(line, `"level"=`) { // funcr writes a level on Info lines only
			errorLines = append(errorLines, line)
		}
	}
	unreachable := slices.DeleteFunc(slices.Clone(east), func(line string) bool { return !strings.Contains(line, "Member unreachable") })
	// One line: a run did fail on the dead member, and said so once.
	if len(errorLines) > 0 || len(unreachable) != 1 {
		t.Errorf("east logged %d error lines and %d unreachable lines while it went down, want none and one:\n%s",
			len(errorLines), len(unreachable), strings.Join(append(errorLines, unreachable...), "\n"))
	}
	p := f.waitStatus("web", "east pending as MemberUnhealthy", listedAs("east", fleetv1alpha1.ResultPending, fleetv1alpha1.ReasonMemberUnhealthy))
	if ready(p) {
		t.Error("Ready with east down")
	}
}
