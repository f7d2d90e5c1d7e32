package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestRolloutStatusPassesOnlyOnEvidence: on statuses written by hand, the
// gate exits 0 only on a ResourcesSelected True of the observed
// generation; it fails a refused revision, gives an entry that selects
// nothing a grace period (a Propagation created before its objects), and
// reads once before it judges a timeout.
func TestRolloutStatusPassesOnlyOnEvidence(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	const ns = "rollout-gate"
	createNamespace(t, c, ns)
	web := newPropagation(ns, "web", fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}})
	createPropagation(t, c, web)
	clk := clock.RealClock{}
	status := func(args ...string) cliResult {
		return runCLI(t, nil, clk, append(append([]string{"rollout", "status"}, args...), "-n", ns, hubFlag)...)
	}
	selected := func(st fleetv1alpha1.PropagationStatus, cond metav1.ConditionStatus, reason string, since time.Time) fleetv1alpha1.PropagationStatus {
		st.Conditions = []metav1.Condition{{Type: fleetv1alpha1.PropagationResourcesSelected, Status: cond, Reason: reason,
			Message: "resources[0]: v1 ConfigMap settings is not on the hub", LastTransitionTime: metav1.NewTime(since)}}
		return st
	}

	t.Run("no ResourcesSelected, as an older manager writes", func(t *testing.T) {
		st := rolledOut(1, "a", "b")
		st.Conditions = nil
		writeRolloutStatus(t, c, web, st)
		if res := status("prop/web", "--watch=false"); res.code != exitRolloutTimedOut {
			t.Errorf("--watch=false: got %+v, want exit 4", res)
		}
		res := status("prop/web", "--timeout=1s")
		if res.code != exitRolloutTimedOut || !strings.Contains(res.stderr, "reports no selection (ResourcesSelected) for generation") || !strings.Contains(res.stderr, "upgrade") {
			t.Errorf("--timeout: got %+v, want exit 4 saying the manager reports no selection", res)
		}
	})

	t.Run("ResourcesSelected of an older generation", func(t *testing.T) {
		if err := c.Patch(t.Context(), web, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"resources":[{"apiVersion":"v1","kind":"ConfigMap","name":"other"}]}}`))); err != nil {
			t.Fatal(err)
		}
		st := rolledOut(1, "a", "b")
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.PropagationResourcesSelected, Status: metav1.ConditionTrue,
			Reason: fleetv1alpha1.ReasonResourcesSelected, Message: "1 hub object selected by 1 resources", ObservedGeneration: 1})
		writeRolloutStatus(t, c, web, st)
		if res := status("prop/web", "--watch=false"); res.code != exitRolloutTimedOut {
			t.Errorf("judging generation 2 by a condition of generation 1: got %+v, want exit 4", res)
		}
		// A False of the generation before is no failure of this one.
		writeRolloutStatus(t, c, web, func() fleetv1alpha1.PropagationStatus {
			st := selected(rolledOut(1, "a", "b"), metav1.ConditionFalse, fleetv1alpha1.ReasonResourceNotFound, time.Now().Add(-time.Hour))
			st.Conditions[0].ObservedGeneration = 1
			return st
		}())
		if res := status("prop/web", "--watch=false"); res.code != exitRolloutTimedOut {
			t.Errorf("a False of generation 1: got %+v, want exit 4", res)
		}
	})

	t.Run("a refused revision", func(t *testing.T) {
		st := progressing(1, fleetv1alpha1.RolloutFailed, 3, "the hub refused a new revision (1800774 bytes): etcdserver: request is too large")
		st.Rollout.Reason = fleetv1alpha1.ReasonRevisionRefused
		writeRolloutStatus(t, c, web, selected(st, metav1.ConditionTrue, fleetv1alpha1.ReasonResourcesSelected, time.Now()))
		if res := status("prop/web"); res.code != exitRolloutFailed || !strings.Contains(res.stderr, "the hub refused a new revision") {
			t.Errorf("got %+v, want exit 3 naming the refusal", res)
		}
	})

	t.Run("an entry selecting nothing, within the grace period", func(t *testing.T) {
		writeRolloutStatus(t, c, web, selected(rolledOut(1, "a", "b"), metav1.ConditionFalse, fleetv1alpha1.ReasonResourceNotFound, time.Now()))
		res := status("prop/web", "--watch=false")
		if res.code != exitRolloutTimedOut || !strings.Contains(res.stdout, "ResourceNotFound") {
			t.Errorf("--watch=false: got %+v, want exit 4 naming what it waits for", res)
		}
		// The timeout ends the grace period: a failure, not a timeout.
		res = status("prop/web", "--timeout=1500ms")
		if res.code != exitRolloutFailed || !strings.Contains(res.stderr, "ResourceNotFound") {
			t.Errorf("--timeout=1500ms: got %+v, want exit 3 naming ResourceNotFound", res)
		}
		// The object created meanwhile: rolled out.
		var stdout, stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- runCLIContext(t.Context(), nil, clk, &stdout, &stderr, "rollout", "status", "prop/web", "-n", ns, hubFlag)
		}()
		poll.Until(t, "the gate waiting on ResourceNotFound", func() bool { return strings.Contains(stdout.String(), "ResourceNotFound") })
		writeRolloutStatus(t, c, web, rolledOut(1, "a", "b"))
		if code := <-done; code != 0 {
			t.Errorf("the object created within the grace period: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
	})

	t.Run("not found, however short the timeout", func(t *testing.T) {
		for _, args := range [][]string{{"prop/nope"}, {"clusterprop/nope"}, {"prop/nope", "--timeout=1ns"}} {
			if res := status(args...); res.code != exitRolloutNotFound {
				t.Errorf("%q: got %+v, want exit 6", args, res)
			}
		}
	})
}
