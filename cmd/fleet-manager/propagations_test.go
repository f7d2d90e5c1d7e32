package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// createPropagation creates p on the hub with its status, and deletes it
// when the test ends.
func createPropagation(t *testing.T, c client.Client, p *fleetv1alpha1.Propagation) {
	t.Helper()
	status := p.Status
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.WithoutCancel(t.Context()), p); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	p.Status = status
	if err := c.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// createNamespace creates the namespace name on the hub.
func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

func newPropagation(ns, name string, spec fleetv1alpha1.PropagationSpec) *fleetv1alpha1.Propagation {
	return &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{getTestLabel: "prop"}},
		Spec:       spec,
	}
}

func TestGetPropagations(t *testing.T) {
	needAPIServers(t)
	noCRDFlag := hubFlag(t, testMember)
	c, hubFlag := hubClient(t)
	createNamespace(t, c, "prop-team-a")
	createNamespace(t, c, "prop-team-b")
	configMap := []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}

	web := newPropagation("prop-team-a", "web", fleetv1alpha1.PropagationSpec{
		Resources: []fleetv1alpha1.ResourceSelector{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})},
		},
		Members: fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod"}), Names: []string{"east", "north", "south", "west", "up"}},
		Drift:   fleetv1alpha1.DriftReport,
		Overrides: []fleetv1alpha1.Override{{
			Name:      "eu-replicas",
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"region": "eu"})},
			Target:    fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			JSONPatch: []fleetv1alpha1.JSONPatchOperation{{Op: "replace", Path: "/spec/replicas", Value: &apiextensionsv1.JSON{Raw: []byte("3")}}},
		}},
		ProgressDeadlineSeconds: ptr.To[int32](600),
		Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			GroupBy: "region", Groups: []string{"canary", "eu"}, MaxConcurrency: ptr.To(intstr.FromString("25%")), MinSuccessTime: &metav1.Duration{Duration: 5 * time.Minute},
		}},
		Revision:             ptr.To[int64](2),
		RevisionHistoryLimit: ptr.To[int32](5),
		DisruptionBudget:     fleetv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To[int32](2)},
	})
	web.Spec.Resources[1].Wave = 1
	web.Spec.Resources[1].AvailableWhen = "true"
	api := newPropagation("prop-team-a", "api", fleetv1alpha1.PropagationSpec{Resources: configMap})
	db := newPropagation("prop-team-b", "db", fleetv1alpha1.PropagationSpec{Resources: configMap})
	for _, p := range []*fleetv1alpha1.Propagation{web, api, db} {
		createPropagation(t, c, p)
	}
	baseline := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: "prop-baseline", Labels: map[string]string{getTestLabel: "prop"}},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "reader"}},
			Members:   fleetv1alpha1.MemberSelector{Names: []string{"up"}},
		},
	}
	if err := c.Create(t.Context(), baseline); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(t.Context()), baseline) })
	up := newMember("up", "prop", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "up", Format: fleetv1alpha1.FormatNative})
	up.Labels["env"] = "prod"
	createMember(t, c, up)
	// Every Propagation is 3 days old at now, whenever the test runs.
	now := baseline.CreationTimestamp.Add(3 * 24 * time.Hour)
	clk := clocktesting.NewFakeClock(now)
	web.Status = fleetv1alpha1.PropagationStatus{
		ObservedGeneration: web.Generation,
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.PropagationReady, metav1.ConditionFalse, fleetv1alpha1.ReasonMembersFailed, "2 members failed", now.Add(-3*time.Minute)),
			condition(fleetv1alpha1.PropagationDrifted, metav1.ConditionTrue, fleetv1alpha1.ReasonDrifted, "1 member drifted", now.Add(-time.Minute)),
		},
		Selected: 5, Applied: 1, Available: 0, Drifted: 1, Failed: 2, PendingDeletions: 1,
		Kinds:                 []fleetv1alpha1.KindReference{{APIVersion: "apps/v1", Kind: "Deployment"}, {APIVersion: "v1", Kind: "ConfigMap"}},
		SelectedResourceCount: 5,
		SelectedResources: []fleetv1alpha1.ResourceIdentifier{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, {APIVersion: "v1", Kind: "ConfigMap", Name: "web-1"},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "web-2", Envelope: "extras"}, {APIVersion: "v1", Kind: "ConfigMap", Name: "web-3"},
		},
		Revision: 3,
		Rollout: &fleetv1alpha1.RolloutStatus{
			Revision: 2, Phase: fleetv1alpha1.RolloutProgressing, Reason: "Progressing", Message: "1 of 5 members run revision 2; in flight: east, north", Updated: 1, Failed: 2,
			Members: []fleetv1alpha1.RevisionMembers{
				{Revision: 3, Names: []string{"south", "west", "up", "down", "left"}},
				{Revision: 2, Names: []string{"east", "north"}},
			},
			Draining: []string{"south"},
		},
		Members: []fleetv1alpha1.MemberPropagationStatus{
			{Name: "east", Result: fleetv1alpha1.ResultFailed, Available: metav1.ConditionFalse, Revision: 2, Reason: fleetv1alpha1.ReasonForbidden, Message: "the member forbids the manager to create namespaces", LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Minute)), LastConfirmedTime: ptrTime(now.Add(-10 * time.Second))},
			{Name: "north", Result: fleetv1alpha1.ResultFailed, Reason: fleetv1alpha1.ReasonKindNotFound, Message: "apps/v1 Deployment is not served", LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Minute))},
			{Name: "west", Result: fleetv1alpha1.ResultDrifted, Reason: fleetv1alpha1.ReasonDrifted, DriftedFields: []string{"Deployment web: .spec.replicas", "ConfigMap web-env: .data.color"}, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
			{Name: "south", Result: fleetv1alpha1.ResultDeletionOwed, Reason: fleetv1alpha1.ReasonMemberUnhealthy, Message: "the member is Unhealthy", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
			{Name: "up", Result: fleetv1alpha1.ResultApplied, Available: metav1.ConditionFalse, Revision: 3, Reason: fleetv1alpha1.ReasonNotAvailable, Message: "Deployment web: 1 of 3 replicas available", LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Minute)), LastConfirmedTime: ptrTime(now.Add(-5 * time.Second))},
		},
	}
	api.Status = fleetv1alpha1.PropagationStatus{
		ObservedGeneration: api.Generation, Selected: 2, Applied: 2, Available: 2,
		Revision: 1, Rollout: &fleetv1alpha1.RolloutStatus{Revision: 1, Phase: fleetv1alpha1.RolloutComplete, Updated: 2},
		Conditions: []metav1.Condition{condition(fleetv1alpha1.PropagationReady, metav1.ConditionTrue, fleetv1alpha1.ReasonApplied, "", now.Add(-time.Hour))},
	}
	for _, p := range []*fleetv1alpha1.Propagation{web, api} {
		if err := c.Status().Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct{ golden, args string }{
		{"propagations.golden", "get propagations -n prop-team-a"},
		{"propagations-all-wide.golden", "get prop -A -o wide -l " + getTestLabel + "=prop"},
		{"propagations-name.golden", "get propagations -A -o name -l " + getTestLabel + "=prop"},
		{"propagations-named.golden", "get propagation web api -n prop-team-a --no-headers"},
		{"status-propagation-web.golden", "status propagation web -n prop-team-a"},
		{"status-propagation-db.golden", "status prop db -n prop-team-b"},
		{"status-up.golden", "status up"},
		{"clusterpropagations.golden", "get clusterpropagations -l " + getTestLabel + "=prop"},
		{"status-clusterpropagation.golden", "status clusterpropagation prop-baseline"},
	} {
		res := runCLI(t, nil, clk, append(strings.Fields(tc.args), hubFlag)...)
		if res.code != 0 || res.stderr != "" {
			t.Fatalf("%s: exit %d, stderr %q", tc.args, res.code, res.stderr)
		}
		checkGolden(t, tc.golden, res.stdout)
	}

	t.Run("yaml parses back", func(t *testing.T) {
		res := runCLI(t, nil, clk, "get", "propagation", "web", "-n", "prop-team-a", "-o", "yaml", hubFlag)
		var got fleetv1alpha1.Propagation
		if err := yaml.Unmarshal([]byte(res.stdout), &got); err != nil || got.Kind != "Propagation" || got.Name != "web" || got.Status.Failed != 2 {
			t.Errorf("-o yaml: want the Propagation web, got (%v):\n%s", err, res.stdout)
		}
	})

	t.Run("none", func(t *testing.T) {
		res := runCLI(t, nil, clk, "get", "propagations", hubFlag)
		if want := (cliResult{stderr: "No Propagations found in namespace default.\n"}); res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
	})

	t.Run("unknown name", func(t *testing.T) {
		for _, args := range [][]string{{"get", "propagation", "nope", "-n", "prop-team-a"}, {"status", "propagation", "nope", "-n", "prop-team-a"}} {
			res := runCLI(t, nil, clk, append(args, hubFlag)...)
			if res.code != 1 || res.stdout != "" || !strings.HasSuffix(res.stderr, ": propagations.fleet.fleetkube.io \"nope\" not found\n") {
				t.Errorf("%q: got %+v", args, res)
			}
		}
	})

	t.Run("hub without CRD", func(t *testing.T) {
		res := runCLI(t, nil, clk, "get", "propagations", "-A", noCRDFlag)
		if res.code != 1 || !strings.HasSuffix(res.stderr, ": the hub has no Propagation CRD: apply deploy/crd (kubectl apply -k deploy/)\n") {
			t.Errorf("got %+v", res)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"get", "propagations", "web", "-A"},
			{"get", "propagations", "web", "-l", "a=b"},
			{"get", "propagations", "-o", "table"},
			{"status", "propagation"},
			{"status", "propagation", "a", "b"},
			{"status", "propagation", "a", "-A"},
		} {
			if res := runCLI(t, nil, clk, args...); res.code != 2 {
				t.Errorf("%q: got %+v, want exit 2", args, res)
			}
		}
	})
}
