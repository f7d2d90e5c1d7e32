package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestCordonUncordon: cordon and uncordon set and remove
// spec.maintenance, and say when it was so already.
func TestCordonUncordon(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	a := newMember("cordon-a", "cordon", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "cordon-a", Format: fleetv1alpha1.FormatNative})
	b := newMember("cordon-b", "cordon", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "cordon-b", Format: fleetv1alpha1.FormatNative})
	createMember(t, c, a)
	createMember(t, c, b)
	clk := clock.RealClock{}
	maintenance := func(mc *fleetv1alpha1.MemberCluster) fleetv1alpha1.MaintenanceMode {
		t.Helper()
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(mc), mc); err != nil {
			t.Fatal(err)
		}
		return mc.Spec.Maintenance
	}

	for _, step := range []struct {
		args string
		want cliResult
		a, b fleetv1alpha1.MaintenanceMode
	}{
		{"cordon cordon-a", cliResult{stdout: "membercluster/cordon-a cordoned\n"}, fleetv1alpha1.MaintenanceCordon, ""},
		{"cordon cordon-a cordon-b", cliResult{stdout: "membercluster/cordon-a already cordoned\nmembercluster/cordon-b cordoned\n"}, fleetv1alpha1.MaintenanceCordon, fleetv1alpha1.MaintenanceCordon},
		{"uncordon cordon-a", cliResult{stdout: "membercluster/cordon-a uncordoned\n"}, "", fleetv1alpha1.MaintenanceCordon},
		{"uncordon cordon-a", cliResult{stdout: "membercluster/cordon-a already uncordoned\n"}, "", fleetv1alpha1.MaintenanceCordon},
		{"drain cordon-a --wait=false", cliResult{stdout: "membercluster/cordon-a draining\n"}, fleetv1alpha1.MaintenanceDrain, fleetv1alpha1.MaintenanceCordon},
		{"uncordon nope cordon-b", cliResult{stdout: "membercluster/cordon-b uncordoned\n", stderr: "fleet-manager uncordon: memberclusters.fleet.fleetkube.io \"nope\" not found\n", code: 1}, fleetv1alpha1.MaintenanceDrain, ""},
	} {
		if res := runCLI(t, nil, clk, append(strings.Fields(step.args), hubFlag)...); res != step.want {
			t.Errorf("%s: got %+v, want %+v", step.args, res, step.want)
		}
		if gotA, gotB := maintenance(a), maintenance(b); gotA != step.a || gotB != step.b {
			t.Errorf("after %s: maintenance %q and %q, want %q and %q", step.args, gotA, gotB, step.a, step.b)
		}
	}
	for _, args := range [][]string{{"cordon"}, {"uncordon"}, {"drain"}, {"drain", "cordon-a", "--timeout=-1s"}} {
		if res := runCLI(t, nil, clk, args...); res.code != 2 {
			t.Errorf("%q: got %+v, want exit 2", args, res)
		}
	}
}

// TestDrain: drain sets spec.maintenance to Drain, then waits, a line per
// change of the drain's status, until no copies are left and the member
// is Drained; it gives up after --timeout, or once the member is
// uncordoned.
func TestDrain(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	mc := newMember("drain-a", "drain", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "drain-a", Format: fleetv1alpha1.FormatNative})
	createMember(t, c, mc)
	clk := clock.RealClock{}
	writeDrain := func(drain *fleetv1alpha1.DrainStatus, conditions ...metav1.Condition) {
		t.Helper()
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(mc), mc); err != nil {
			t.Fatal(err)
		}
		setStatus(t, c, mc, fleetv1alpha1.MemberClusterStatus{Drain: drain, Conditions: conditions})
	}

	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runCLIContext(t.Context(), nil, clk, &stdout, &stderr, "drain", "drain-a", hubFlag)
	}()
	lines := func(b *syncBuffer, n int) func() bool {
		return func() bool { return strings.Count(b.String(), "\n") >= n }
	}
	poll.Until(t, "the member draining", lines(&stdout, 2))
	writeDrain(&fleetv1alpha1.DrainStatus{Remaining: 2, Message: "waiting for team-a/web's disruption budget"},
		condition(fleetv1alpha1.ConditionDrained, metav1.ConditionFalse, fleetv1alpha1.ReasonWaitingForDisruptionBudget, "", time.Now()))
	poll.Until(t, "the drain's first message", lines(&stdout, 3))
	writeDrain(&fleetv1alpha1.DrainStatus{Remaining: 1, Message: "removing team-b/api's copies"},
		condition(fleetv1alpha1.ConditionDrained, metav1.ConditionFalse, fleetv1alpha1.ReasonDraining, "", time.Now()))
	poll.Until(t, "the drain's second message", lines(&stdout, 4))
	// No copies left, but not Drained yet: it waits on.
	writeDrain(&fleetv1alpha1.DrainStatus{},
		condition(fleetv1alpha1.ConditionDrained, metav1.ConditionFalse, fleetv1alpha1.ReasonDraining, "", time.Now()))
	poll.Until(t, "no copies left", lines(&stdout, 5))
	writeDrain(&fleetv1alpha1.DrainStatus{},
		condition(fleetv1alpha1.ConditionDrained, metav1.ConditionTrue, fleetv1alpha1.ReasonDraining, "", time.Now()))
	select {
	case code := <-done:
		if code != 0 || stderr.String() != "" {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(poll.Timeout):
		t.Fatal("drain did not return once the member was Drained")
	}
	want := `membercluster/drain-a draining
Waiting for membercluster/drain-a to drain
Waiting for membercluster/drain-a to drain: 2 Propagations left (waiting for team-a/web's disruption budget)
Waiting for membercluster/drain-a to drain: 1 Propagation left (removing team-b/api's copies)
Waiting for membercluster/drain-a to drain: 0 Propagations left
membercluster/drain-a drained
`
	if got := stdout.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if mc.Spec.Maintenance != fleetv1alpha1.MaintenanceDrain {
		t.Errorf("spec.maintenance is %q, want Drain", mc.Spec.Maintenance)
	}

	writeDrain(&fleetv1alpha1.DrainStatus{Remaining: 1, Message: "removing team-b/api's copies"})
	res := runCLI(t, nil, clk, "drain", "drain-a", "--timeout=1500ms", hubFlag)
	want = "membercluster/drain-a already draining\nWaiting for membercluster/drain-a to drain: 1 Propagation left (removing team-b/api's copies)\n"
	if res.code != 1 || res.stdout != want || res.stderr != "fleet-manager drain: timed out after 1.5s waiting for membercluster/drain-a to drain\n" {
		t.Errorf("--timeout: got %+v", res)
	}

	var undone, undoneErr syncBuffer
	go func() {
		done <- runCLIContext(t.Context(), nil, clk, &undone, &undoneErr, "drain", "drain-a", hubFlag)
	}()
	poll.Until(t, "the drain waiting", lines(&undone, 2))
	if res := runCLI(t, nil, clk, "uncordon", "drain-a", hubFlag); res.code != 0 {
		t.Fatalf("uncordon: %+v", res)
	}
	if code := <-done; code != 1 || undoneErr.String() != "fleet-manager drain: membercluster/drain-a is no longer drained: its maintenance is <none> now\n" {
		t.Errorf("uncordoned while draining: exit %d, stderr %q", code, undoneErr.String())
	}
}
