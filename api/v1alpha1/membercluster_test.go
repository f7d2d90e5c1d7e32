package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func TestSetStateKeepsRecentTransitions(t *testing.T) {
	var s fleetv1alpha1.MemberClusterStatus
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	states := []fleetv1alpha1.MemberState{fleetv1alpha1.MemberStateReady, fleetv1alpha1.MemberStateUnhealthy}
	for i := range 25 {
		now := metav1.NewTime(start.Add(time.Duration(i) * time.Second))
		state := states[i%2]
		if !s.SetState(state, fmt.Sprint("R", i), now) {
			t.Fatalf("SetState(%s) number %d changed nothing", state, i)
		}
		if s.SetState(state, fmt.Sprint("R", i), metav1.NewTime(now.Add(time.Hour))) {
			t.Fatalf("SetState(%s) to the current state and reason reported a change", state)
		}
		if s.State != state || !s.StateSince.Equal(&now) {
			t.Fatalf("after SetState(%s, %s): State %s since %s", state, now, s.State, s.StateSince)
		}
	}
	if got := len(s.RecentTransitions); got != fleetv1alpha1.MaxRecentTransitions {
		t.Fatalf("%d recent transitions, want %d", got, fleetv1alpha1.MaxRecentTransitions)
	}
	for i, tr := range s.RecentTransitions {
		n := 25 - fleetv1alpha1.MaxRecentTransitions + i
		want := fleetv1alpha1.StateTransition{State: states[n%2], Time: metav1.NewTime(start.Add(time.Duration(n) * time.Second)), Reason: fmt.Sprint("R", n)}
		if tr.State != want.State || !tr.Time.Equal(&want.Time) || tr.Reason != want.Reason {
			t.Errorf("transition %d = %+v, want %+v", i, tr, want)
		}
	}
}

func TestSetStateForAnotherReasonIsATransition(t *testing.T) {
	var s fleetv1alpha1.MemberClusterStatus
	now := metav1.Now()
	s.SetState(fleetv1alpha1.MemberStatePending, fleetv1alpha1.ReasonCredentialsRefused, now)
	if !s.SetState(fleetv1alpha1.MemberStatePending, "ClusterNameConflict", now) || len(s.RecentTransitions) != 2 {
		t.Fatalf("SetState to the current state for another reason: transitions %+v, want 2", s.RecentTransitions)
	}
}

// TestMemberClusterAPI installs the generated CRD into a real API server
// and checks what the markers promise: cluster scope, the status
// subresource, validation, and the printer columns of `kubectl get`.
func TestMemberClusterAPI(t *testing.T) {
	cfg := apiServer(t, "fleet.fleetkube.io_memberclusters.yaml")
	cl := newClient(t, cfg)
	ctx := t.Context()

	mc := &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "east-1.example", Labels: map[string]string{"region": "east"}},
		Spec: fleetv1alpha1.MemberClusterSpec{SecretRef: fleetv1alpha1.SecretReference{
			Namespace: "capi-east", Name: "east-1-kubeconfig", Format: fleetv1alpha1.FormatClusterAPI,
		}},
	}
	if err := cl.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if mc.Namespace != "" {
		t.Errorf("created in namespace %q, want cluster scope", mc.Namespace)
	}

	// The status subresource: a status update reaches the status only.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	mc.Spec.SecretRef.Name = "ignored-by-status-update"
	mc.Status = fleetv1alpha1.MemberClusterStatus{
		ObservedGeneration: mc.Generation,
		Conditions: []metav1.Condition{
			{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonUnhealthy, Message: "probes fail", LastTransitionTime: now},
			{Type: fleetv1alpha1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonProbeFailed, Message: "probe timed out", LastTransitionTime: now},
			{Type: fleetv1alpha1.ConditionCredentialsAccepted, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonAccepted, LastTransitionTime: now},
		},
		ServerVersion:       "v1.37.1",
		LastProbeTime:       &now,
		LastProbeResult:     fleetv1alpha1.ProbeResultFailure,
		ConsecutiveFailures: 3,
		EngagedControllers:  []string{"configmap-sync", "propagation"},
		ControllerConditions: []fleetv1alpha1.ControllerCondition{{
			Name: "propagation", Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonKindNotFound,
			Message: "example.com/v1, Kind=Widget is not served", LastTransitionTime: now,
		}},
		LastError: "probe: context deadline exceeded",
	}
	mc.Status.SetState(fleetv1alpha1.MemberStateReady, fleetv1alpha1.ReasonEngaged, metav1.NewTime(now.Add(-time.Minute)))
	mc.Status.SetState(fleetv1alpha1.MemberStateUnhealthy, fleetv1alpha1.ReasonProbeFailed, now)
	want := mc.Status.DeepCopy()
	if err := cl.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}

	var got fleetv1alpha1.MemberCluster
	if err := cl.Get(ctx, client.ObjectKey{Name: mc.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.SecretRef.Name != "east-1-kubeconfig" {
		t.Errorf("status update changed the spec: secretRef.name %q", got.Spec.SecretRef.Name)
	}
	if gotJSON, wantJSON := mustJSON(t, got.Status), mustJSON(t, want); gotJSON != wantJSON {
		t.Errorf("status read back\n  %s\nwant\n  %s", gotJSON, wantJSON)
	}

	// Validation markers: each bad status is refused for its own field.
	type M = fleetv1alpha1.MemberCluster
	for field, mutate := range map[string]func(*M){
		"status.state":                          func(m *M) { m.Status.State = "Sleeping" },
		"status.consecutiveFailures":            func(m *M) { m.Status.ConsecutiveFailures = -1 },
		"status.lastProbeResult":                func(m *M) { m.Status.LastProbeResult = "Maybe" },
		"status.recentTransitions":              func(m *M) { m.Status.RecentTransitions = slices.Repeat(m.Status.RecentTransitions[:1], 11) },
		"status.lastError":                      func(m *M) { m.Status.LastError = strings.Repeat("x", 1025) },
		"status.controllerConditions[0].reason": func(m *M) { m.Status.ControllerConditions[0].Reason = "not a word" },
	} {
		m := got.DeepCopy()
		mutate(m)
		err := cl.Status().Update(ctx, m)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) {
			t.Errorf("status update with a bad %s: got %v, want Invalid for that field", field, err)
		}
	}
	bad := mc.DeepCopy()
	bad.ResourceVersion = ""
	bad.Name = "bad-format"
	bad.Spec.SecretRef.Format = "kubeconfig"
	if err := cl.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.secretRef.format") {
		t.Errorf("create with format %q: got %v, want Invalid", bad.Spec.SecretRef.Format, err)
	}

	// Printer columns, as `kubectl get memberclusters` asks for them.
	columns, cells := printed(t, cfg, "memberclusters")
	if want := []string{"Name", "State", "Ready", "Healthy", "Last Probe", "Version", "Failures", "Maintenance", "Age"}; !slices.Equal(columns, want) {
		t.Errorf("default columns %q, want %q", columns, want)
	}
	for name, want := range map[string]any{
		"Name": "east-1.example", "State": "Unhealthy", "Ready": "False", "Healthy": "False",
		"Version": "v1.37.1", "Failures": float64(3), "Format": "cluster-api",
	} {
		if cells[name] != want {
			t.Errorf("column %s = %#v, want %#v", name, cells[name], want)
		}
	}
	if cells["Last Probe"] == nil || cells["Last Probe"] == "" {
		t.Errorf("column Last Probe is empty")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
