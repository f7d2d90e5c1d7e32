package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// writeRolloutStatus writes status as obj's, a Propagation or a
// ClusterPropagation, as the manager would: of its current generation.
func writeRolloutStatus(t *testing.T, c client.Client, obj client.Object, status fleetv1alpha1.PropagationStatus) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	status.ObservedGeneration = obj.GetGeneration()
	for i := range status.Conditions {
		if status.Conditions[i].ObservedGeneration == 0 {
			status.Conditions[i].ObservedGeneration = obj.GetGeneration()
		}
	}
	switch o := obj.(type) {
	case *fleetv1alpha1.Propagation:
		o.Status = status
	case *fleetv1alpha1.ClusterPropagation:
		o.Status = status
	}
	if err := c.Status().Update(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
}

// createRevisions creates the revisions numbers of the kind kind's name,
// in namespace, and deletes them when the test ends.
func createRevisions(t *testing.T, c client.Client, namespace, kind, name string, numbers ...int64) {
	t.Helper()
	for _, n := range numbers {
		rev := &fleetv1alpha1.PropagationRevision{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:    namespace,
				GenerateName: name + "-",
				Labels:       map[string]string{fleetv1alpha1.PropagationLabel: name, fleetv1alpha1.RevisionOfLabel: kind},
			},
			Revision: n,
			Content:  runtime.RawExtension{Raw: []byte("{}")},
		}
		if err := c.Create(t.Context(), rev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(t.Context()), rev) })
	}
}

// rolledOut is the status of a rollout of revision complete in members,
// every entry of resources selecting a hub object.
func rolledOut(revision int64, members ...string) fleetv1alpha1.PropagationStatus {
	return fleetv1alpha1.PropagationStatus{
		Selected: int32(len(members)), Revision: revision,
		Conditions: []metav1.Condition{{Type: fleetv1alpha1.PropagationResourcesSelected, Status: metav1.ConditionTrue,
			Reason: fleetv1alpha1.ReasonResourcesSelected, Message: "every entry of resources selects a hub object", LastTransitionTime: metav1.Now()}},
		Rollout: &fleetv1alpha1.RolloutStatus{
			Revision: revision, Phase: fleetv1alpha1.RolloutComplete, Updated: int32(len(members)),
			Members: []fleetv1alpha1.RevisionMembers{{Revision: revision, Names: members}},
		},
	}
}

// progressing is the status of a rollout of revision to 3 members, in
// phase, with updated of them done.
func progressing(revision int64, phase fleetv1alpha1.RolloutPhase, updated int32, message string) fleetv1alpha1.PropagationStatus {
	return fleetv1alpha1.PropagationStatus{
		Selected: 3, Revision: revision,
		Rollout: &fleetv1alpha1.RolloutStatus{Revision: revision, Phase: phase, Updated: updated, Message: message},
	}
}

// TestRolloutStatus: rollout status exits 0 once the wanted revision is
// Complete, 1 once it is Stopped, and waits, a line per change, while it
// is Progressing, Paused, or not of the Propagation's generation.
func TestRolloutStatus(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	createNamespace(t, c, "rollout-status")
	web := newPropagation("rollout-status", "web", fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}})
	createPropagation(t, c, web)
	clk := clock.RealClock{}
	status := func(args ...string) cliResult {
		return runCLI(t, nil, clk, append(append([]string{"rollout", "status"}, args...), "-n", "rollout-status", hubFlag)...)
	}

	writeRolloutStatus(t, c, web, rolledOut(2, "a", "b", "c"))
	for _, args := range [][]string{{"propagation/web"}, {"prop", "web"}, {"propagation.fleet.fleetkube.io/web", "--watch=false"}} {
		if res, want := status(args...), (cliResult{stdout: "revision 2 rolled out to 3 members\n"}); res != want {
			t.Errorf("%q on a Complete rollout: got %+v, want %+v", args, res, want)
		}
	}

	writeRolloutStatus(t, c, web, progressing(3, fleetv1alpha1.RolloutStopped, 1, "stopped after 1 failed member (maxFailures 1): b: Forbidden"))
	want := cliResult{stderr: "fleet-manager rollout status: rollout of revision 3 stopped: stopped after 1 failed member (maxFailures 1): b: Forbidden\n", code: exitRolloutFailed}
	if res := status("prop/web"); res != want {
		t.Errorf("a Stopped rollout: got %+v, want %+v", res, want)
	}

	// The gate's cases: each ends the wait at once, non-zero, naming why.
	allFailed := progressing(3, fleetv1alpha1.RolloutFailed, 2, "revision 3 failed in 1 of 3 members: member b: Deployment web: 0 of 1 replicas available (ProgressDeadlineExceeded)")
	noMember := rolledOut(3)
	noMember.Rollout.Phase, noMember.Rollout.Reason, noMember.Rollout.Message = fleetv1alpha1.RolloutProgressing, fleetv1alpha1.ReasonNoMembersSelected, "no member takes revision 3: none is selected, or every one selected is cordoned or drained"
	noMember.Rollout.Members = nil
	noMemberOld := rolledOut(3) // as a manager before the gate wrote it
	noMemberOld.Rollout.Members = nil
	missing := rolledOut(3, "a", "b")
	missing.Conditions = []metav1.Condition{{Type: fleetv1alpha1.PropagationResourcesSelected, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonResourceNotFound,
		Message: "resources[0]: v1 ConfigMap setings is not on the hub; the other entries' objects are copied", LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
	for _, tc := range []struct {
		name   string
		status fleetv1alpha1.PropagationStatus
		want   cliResult
	}{
		{"All with failed members", allFailed, cliResult{code: exitRolloutFailed,
			stderr: "fleet-manager rollout status: rollout of revision 3 failed: revision 3 failed in 1 of 3 members: member b: Deployment web: 0 of 1 replicas available (ProgressDeadlineExceeded)\n"}},
		{"no member", noMember, cliResult{code: exitRolloutFailed,
			stderr: "fleet-manager rollout status: revision 3 is rolled out to no member: no member takes revision 3: none is selected, or every one selected is cordoned or drained\n"}},
		{"no member, Complete as an older manager says", noMemberOld, cliResult{code: exitRolloutFailed,
			stderr: "fleet-manager rollout status: revision 3 is rolled out to no member: 0 members run revision 3\n"}},
		{"a missing hub object", missing, cliResult{code: exitRolloutFailed, stdout: "revision 3 rolled out to 2 members\n",
			stderr: "fleet-manager rollout status: revision 3 selects less than spec.resources names: resources[0]: v1 ConfigMap setings is not on the hub; the other entries' objects are copied (ResourceNotFound)\n"}},
	} {
		if tc.name == "no member, Complete as an older manager says" {
			tc.status.Rollout.Message = "0 members run revision 3"
		}
		writeRolloutStatus(t, c, web, tc.status)
		if res := status("prop/web"); res != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, res, tc.want)
		}
	}

	writeRolloutStatus(t, c, web, progressing(3, fleetv1alpha1.RolloutProgressing, 1, "in flight: b"))
	want = cliResult{stdout: "Waiting for rollout of revision 3: 1 of 3 members updated (in flight: b)\n", code: exitRolloutTimedOut}
	if res := status("prop/web", "--watch=false"); res != want {
		t.Errorf("--watch=false on a Progressing rollout: got %+v, want %+v", res, want)
	}
	held := progressing(3, fleetv1alpha1.RolloutProgressing, 1, "1 of 3 members run revision 3; in flight: b, c")
	held.Members = []fleetv1alpha1.MemberPropagationStatus{
		{Name: "b", Result: fleetv1alpha1.ResultPending, Reason: fleetv1alpha1.ReasonMemberUnhealthy},
		{Name: "c", Result: fleetv1alpha1.ResultApplied, Reason: fleetv1alpha1.ReasonNotAvailable},
	}
	writeRolloutStatus(t, c, web, held)
	res := status("prop/web", "--timeout=1500ms")
	if want := "fleet-manager rollout status: timed out after 1.5s waiting for the rollout of propagation.fleet.fleetkube.io/web; held by b: MemberUnhealthy, c: NotAvailable\n"; res.code != exitRolloutTimedOut || res.stderr != want {
		t.Errorf("--timeout on a Progressing rollout: got %+v, want exit %d and %q", res, exitRolloutTimedOut, want)
	}
	writeRolloutStatus(t, c, web, progressing(3, fleetv1alpha1.RolloutPaused, 1, "paused: 1 of 3 members run revision 3"))
	res = status("prop/web", "--timeout=1500ms")
	if want := "fleet-manager rollout status: timed out after 1.5s waiting for the rollout of propagation.fleet.fleetkube.io/web: the rollout is paused (fleet-manager rollout resume)\n"; res.code != exitRolloutHeld || res.stderr != want {
		t.Errorf("--timeout on a Paused rollout: got %+v, want exit %d and %q", res, exitRolloutHeld, want)
	}
	writeRolloutStatus(t, c, web, progressing(3, fleetv1alpha1.RolloutProgressing, 1, "in flight: b"))

	t.Run("waits until complete", func(t *testing.T) {
		var stdout, stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- runCLIContext(t.Context(), nil, clk, &stdout, &stderr, "rollout", "status", "prop/web", "-n", "rollout-status", hubFlag)
		}()
		lines := func(n int) func() bool {
			return func() bool { return strings.Count(stdout.String(), "\n") >= n }
		}
		poll.Until(t, "the rollout Progressing", lines(1))
		writeRolloutStatus(t, c, web, progressing(3, fleetv1alpha1.RolloutPaused, 2, "paused: 2 of 3 members run revision 3"))
		poll.Until(t, "the rollout Paused", lines(2))
		// The pause is written to the spec: a status of the generation
		// before is not of the rollout asked for.
		if err := c.Patch(t.Context(), web, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "the generation not observed", lines(3))
		writeRolloutStatus(t, c, web, rolledOut(3, "a", "b", "c"))
		select {
		case code := <-done:
			if code != 0 || stderr.String() != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
		case <-time.After(poll.Timeout):
			t.Fatal("rollout status did not return once the rollout was Complete")
		}
		want := `Waiting for rollout of revision 3: 1 of 3 members updated (in flight: b)
Waiting for rollout of revision 3: 2 of 3 members updated; the rollout is paused
Waiting for the manager to observe generation 2
revision 3 rolled out to 3 members
`
		if got := stdout.String(); got != want {
			t.Errorf("got:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("a pinned revision", func(t *testing.T) {
		if err := c.Patch(t.Context(), web, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"revision":2}}`))); err != nil {
			t.Fatal(err)
		}
		// Revision 3, the newest, is Complete; revision 2 is wanted.
		writeRolloutStatus(t, c, web, rolledOut(3, "a", "b", "c"))
		want := cliResult{stdout: "Waiting for rollout of revision 2 to start\n", code: exitRolloutTimedOut}
		if res := status("prop/web", "--watch=false"); res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
		writeRolloutStatus(t, c, web, rolledOut(2, "a", "b", "c"))
		if res, want := status("prop/web", "--watch=false"), (cliResult{stdout: "revision 2 rolled out to 3 members\n"}); res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
		// A newer revision the pin holds back: held, naming the way out,
		// with the manager's Pinned phase or an older manager's Complete.
		for _, phase := range []fleetv1alpha1.RolloutPhase{fleetv1alpha1.RolloutPinned, fleetv1alpha1.RolloutComplete} {
			pinned := rolledOut(2, "a", "b", "c")
			pinned.Revision, pinned.Rollout.Phase = 4, phase
			writeRolloutStatus(t, c, web, pinned)
			want := cliResult{code: exitRolloutHeld, stdout: "revision 2 rolled out to 3 members\n",
				stderr: "fleet-manager rollout status: spec.revision pins revision 2: the newest, revision 4, is not rolled out (fleet-manager rollout unpin propagation/web -n rollout-status)\n"}
			if res := status("prop/web"); res != want {
				t.Errorf("pinned behind a newer revision, %s: got %+v, want %+v", phase, res, want)
			}
		}
		unpin := runCLI(t, nil, clk, "rollout", "unpin", "prop/web", "-n", "rollout-status", hubFlag)
		if want := (cliResult{stdout: "propagation.fleet.fleetkube.io/web unpinned from revision 2: the newest rolls out\n"}); unpin != want {
			t.Errorf("unpin: got %+v, want %+v", unpin, want)
		}
		var p fleetv1alpha1.Propagation
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(web), &p); err != nil {
			t.Fatal(err)
		}
		if p.Spec.Revision != nil {
			t.Errorf("spec.revision %d after unpin", *p.Spec.Revision)
		}
		unpin = runCLI(t, nil, clk, "rollout", "unpin", "prop/web", "-n", "rollout-status", hubFlag)
		if want := (cliResult{stdout: "propagation.fleet.fleetkube.io/web not pinned\n"}); unpin != want {
			t.Errorf("unpin again: got %+v, want %+v", unpin, want)
		}
	})

	t.Run("errors", func(t *testing.T) {
		res := status("prop/nope")
		if res.code != exitRolloutNotFound || !strings.HasSuffix(res.stderr, `: propagations.fleet.fleetkube.io "nope" not found`+"\n") {
			t.Errorf("an unknown Propagation: got %+v", res)
		}
		for _, args := range [][]string{
			{"rollout", "status"},
			{"rollout", "status", "web"},
			{"rollout", "status", "prop", "web", "extra"},
			{"rollout", "status", "prop/web", "web"},
			{"rollout", "status", "deployment/web"},
			{"rollout", "status", "prop/"},
			{"rollout", "status", "prop/web", "--timeout=-1s"},
			{"rollout", "undo", "prop/web", "--to-revision=-1"},
			{"rollout", "unpin"},
			{"rollout", "history"},
			{"rollout", "bogus"},
			{"rollout"},
		} {
			if res := runCLI(t, nil, clk, append(args, hubFlag)...); res.code != 2 {
				t.Errorf("%q: got %+v, want exit 2", args, res)
			}
		}
	})
}

// TestWaitUntilTimesOutInItsOwnWords: a check that waits on a client's
// rate limiter is never told the wait's deadline, which the limiter would
// report at once in its own words ("rate: Wait(n=1) would exceed context
// deadline"): the wait ends on its timeout, saying so.
func TestWaitUntilTimesOutInItsOwnWords(t *testing.T) {
	t.Parallel()
	limiter := flowcontrol.NewTokenBucketRateLimiter(0.1, 1) // one request per 10s
	defer limiter.Stop()
	start := time.Now()
	err := waitUntil(t.Context(), io.Discard, 1500*time.Millisecond, "the rollout", func(ctx context.Context) (string, bool, error) {
		if err := limiter.Wait(ctx); err != nil {
			return "", false, fmt.Errorf("client rate limiter Wait returned an error: %w", err)
		}
		return "waiting", false, nil
	})
	var timedOut *timeoutError
	if !errors.As(err, &timedOut) || err.Error() != "timed out after 1.5s waiting for the rollout" {
		t.Errorf("got %v, want the timeout in its own words", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the wait took %s: a check outlived the timeout", took)
	}
}

// TestRolloutPauseUndoHistory: pause and resume set and remove
// spec.paused; undo pins the revision before the one rolled out, or the
// one named if it is kept; history lists the revisions kept.
func TestRolloutPauseUndoHistory(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	createNamespace(t, c, "rollout-undo")
	web := newPropagation("rollout-undo", "web", fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}})
	createPropagation(t, c, web)
	// Revision 1 and 4 were pruned; another Propagation's revisions, and a
	// ClusterPropagation's of the same name, are not web's.
	createRevisions(t, c, "rollout-undo", propagationKind, "web", 2, 3, 5)
	createRevisions(t, c, "rollout-undo", propagationKind, "api", 4)
	createRevisions(t, c, "rollout-undo", clusterPropagationKind, "web", 4)
	status := rolledOut(5, "a", "b")
	status.Rollout.Members = append(status.Rollout.Members, fleetv1alpha1.RevisionMembers{Revision: 3, Names: []string{"c"}})
	writeRolloutStatus(t, c, web, status)
	// Every revision is 3 days old at now, whenever the test runs.
	clk := clocktesting.NewFakeClock(time.Now().Add(3 * 24 * time.Hour))
	rollout := func(args ...string) cliResult {
		return runCLI(t, nil, clk, append(append([]string{"rollout"}, args...), "-n", "rollout-undo", hubFlag)...)
	}
	got := func() fleetv1alpha1.PropagationSpec {
		t.Helper()
		var p fleetv1alpha1.Propagation
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(web), &p); err != nil {
			t.Fatal(err)
		}
		return p.Spec
	}

	for _, step := range []struct {
		args   string
		stdout string
		paused bool
	}{
		{"pause prop/web", "propagation.fleet.fleetkube.io/web paused\n", true},
		{"pause propagation web", "propagation.fleet.fleetkube.io/web already paused\n", true},
		{"resume prop/web", "propagation.fleet.fleetkube.io/web resumed\n", false},
		{"resume prop/web", "propagation.fleet.fleetkube.io/web already resumed\n", false},
	} {
		if res, want := rollout(strings.Fields(step.args)...), (cliResult{stdout: step.stdout}); res != want {
			t.Errorf("%s: got %+v, want %+v", step.args, res, want)
		}
		if s := got(); s.Paused != step.paused {
			t.Errorf("after %s: spec.paused is %t", step.args, s.Paused)
		}
	}

	res := rollout("history", "prop/web")
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("history: %+v", res)
	}
	checkGolden(t, "rollout-history.golden", res.stdout)

	// Revision 4 is not kept: 3 is the one before 5.
	for _, step := range []struct {
		args     string
		res      cliResult
		revision int64
	}{
		{"undo prop/web", cliResult{stdout: "propagation.fleet.fleetkube.io/web rolled back to revision 3\n"}, 3},
		{"undo prop/web --to-revision=4", cliResult{stderr: "fleet-manager rollout undo: propagation.fleet.fleetkube.io/web has no revision 4 (revisions kept: 2, 3, 5)\n", code: 1}, 3},
		{"undo prop/web --to-revision=5", cliResult{stdout: "propagation.fleet.fleetkube.io/web rolled back to revision 5\n"}, 5},
	} {
		if res := rollout(strings.Fields(step.args)...); res != step.res {
			t.Errorf("%s: got %+v, want %+v", step.args, res, step.res)
		}
		if s := got(); ptr.Deref(s.Revision, 0) != step.revision {
			t.Errorf("after %s: spec.revision is %d, want %d", step.args, ptr.Deref(s.Revision, 0), step.revision)
		}
	}
	writeRolloutStatus(t, c, web, rolledOut(2, "a", "b", "c"))
	want := cliResult{stderr: "fleet-manager rollout undo: propagation.fleet.fleetkube.io/web has no revision before 2 to roll back to (revisions kept: 2, 3, 5)\n", code: 1}
	if res := rollout("undo", "prop/web"); res != want {
		t.Errorf("undo with no revision before: got %+v, want %+v", res, want)
	}

	t.Run("clusterpropagation", func(t *testing.T) {
		createNamespace(t, c, "rollout-fleet")
		baseline := &fleetv1alpha1.ClusterPropagation{
			ObjectMeta: metav1.ObjectMeta{Name: "rollout-baseline"},
			Spec:       fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "reader"}}},
		}
		if err := c.Create(t.Context(), baseline); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(t.Context()), baseline) })
		createRevisions(t, c, "rollout-fleet", clusterPropagationKind, "rollout-baseline", 1, 2)
		clk.SetTime(time.Now().Add(3 * 24 * time.Hour))
		writeRolloutStatus(t, c, baseline, rolledOut(2, "a"))
		fleet := "--fleet-namespace=rollout-fleet"
		for _, tc := range []struct {
			args string
			want cliResult
		}{
			{"rollout pause clusterprop/rollout-baseline", cliResult{stdout: "clusterpropagation.fleet.fleetkube.io/rollout-baseline paused\n"}},
			{"rollout undo clusterprop/rollout-baseline " + fleet, cliResult{stdout: "clusterpropagation.fleet.fleetkube.io/rollout-baseline rolled back to revision 1\n"}},
			{"rollout status clusterprop/rollout-baseline --watch=false", cliResult{stdout: "Waiting for the manager to observe generation 3\n", code: exitRolloutTimedOut}},
			// Revisions are looked for in the fleet namespace only.
			{"rollout undo clusterprop/rollout-baseline --to-revision=2", cliResult{stderr: "fleet-manager rollout undo: clusterpropagation.fleet.fleetkube.io/rollout-baseline has no revision 2 (revisions kept: <none>)\n", code: 1}},
			{"rollout history clusterprop/rollout-baseline", cliResult{stderr: "No revisions of clusterpropagation.fleet.fleetkube.io/rollout-baseline found.\n"}},
		} {
			if res := runCLI(t, nil, clk, append(strings.Fields(tc.args), hubFlag)...); res != tc.want {
				t.Errorf("%s: got %+v, want %+v", tc.args, res, tc.want)
			}
		}
		var cp fleetv1alpha1.ClusterPropagation
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(baseline), &cp); err != nil {
			t.Fatal(err)
		}
		if !cp.Spec.Paused || ptr.Deref(cp.Spec.Revision, 0) != 1 {
			t.Errorf("spec.paused %t, spec.revision %d; want paused, pinned to 1", cp.Spec.Paused, ptr.Deref(cp.Spec.Revision, 0))
		}
		res := runCLI(t, nil, clk, "rollout", "history", "clusterpropagation", "rollout-baseline", fleet, hubFlag)
		if res.code != 0 || res.stderr != "" {
			t.Fatalf("history: %+v", res)
		}
		checkGolden(t, "rollout-history-clusterpropagation.golden", res.stdout)
	})
}
