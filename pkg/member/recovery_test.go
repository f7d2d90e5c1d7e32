package member_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestThawedMemberIsReadyAsSoonAsItAnswers freezes a member's API server
// (SIGSTOP) until the member is Unhealthy, thaws it and creates an object
// there: the watch event it sends makes the member Ready, and its work
// flow, long before the next scheduled probe (a 30 s retry interval).
func TestThawedMemberIsReadyAsSoonAsItAnswers(t *testing.T) {
	needEnvtest(t)
	pid, err := controlplane.APIServerPID(members[1])
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage: w.engage,
		Health: member.HealthOptions{Interval: 500 * time.Millisecond, RetryInterval: 30 * time.Second, Timeout: time.Second, FailureThreshold: 1, DisconnectAfter: time.Hour},
	})
	if err := pool.Set(registry.Registration{ClusterName: "frozen", Kubeconfig: kubeconfig(t, members[1])}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	state := func() fleetv1alpha1.MemberState { s, _ := pool.State("frozen"); return s }
	poll.Until(t, "frozen Ready", func() bool { return state() == fleetv1alpha1.MemberStateReady })

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	poll.Until(t, "frozen Unhealthy", func() bool { return state() == fleetv1alpha1.MemberStateUnhealthy })

	thaw()
	start := time.Now()
	name := fmt.Sprintf("after-thaw-%d", start.UnixNano())
	createConfigMap(t, memberClients[1], "thawed", name, nil)
	created := time.Since(start)
	for r := w.next(t); r.Name != name; r = w.next(t) {
	}
	t.Logf("created %s, its event %s after the thaw", created, time.Since(start))
	poll.Until(t, "frozen Ready again", func() bool { return state() == fleetv1alpha1.MemberStateReady })
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Ready %s after the thaw and the member's first answer, want well before the next scheduled probe", took)
	}
	t.Logf("Ready %s after the thaw", time.Since(start))
}
