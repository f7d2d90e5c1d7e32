package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/get")

// getTestLabel marks the MemberClusters the get tests create, so that they
// list only their own on the shared hub.
const getTestLabel = "fleet-manager-test"

// cliResult is what a command printed and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs args as execute does, under a root like fleet-manager's that
// holds the get, status, rollout, cordon, uncordon, drain and
// check-kubeconfig commands with clk as their clock and stdin as its input, and returns what it printed and its exit
// code.
func runCLI(t *testing.T, stdin io.Reader, clk clock.WithTicker, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runCLIContext(t.Context(), stdin, clk, &stdout, &stderr, args...)
	return cliResult{stdout.String(), stderr.String(), code}
}

// runCLIContext is runCLI under ctx, writing to stdout and stderr.
func runCLIContext(ctx context.Context, stdin io.Reader, clk clock.WithTicker, stdout, stderr io.Writer, args ...string) int {
	var hub hubFlags
	root := &cobra.Command{Use: "fleet-manager", SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	hub.bindFlags(root.PersistentFlags())
	root.AddCommand(getCommand(&hub, clk), statusCommand(&hub, clk), rolloutCommand(&hub, clk),
		newCordonCommand(&hub), newUncordonCommand(&hub), newDrainCommand(&hub), newCheckKubeconfigCommand(), newTenancyCommand(&hub))
	root.SetIn(stdin)
	root.SetContext(ctx)
	return executeRoot(root, args, stdout, stderr)
}

// checkGolden compares got with testdata/get/name, or rewrites it with
// -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "get", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want := string(readFile(t, path)); got != want {
		t.Errorf("output differs from %s (rewrite it with -update); got:\n%s\nwant:\n%s", path, got, want)
	}
}

// createMember creates mc on the hub, then writes its status, and
// deletes it when the test ends.
func createMember(t *testing.T, c client.Client, mc *fleetv1alpha1.MemberCluster) {
	t.Helper()
	status := mc.Status
	if err := c.Create(t.Context(), mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.WithoutCancel(t.Context()), mc); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	setStatus(t, c, mc, status)
}

// setStatus writes status as mc's.
func setStatus(t *testing.T, c client.Client, mc *fleetv1alpha1.MemberCluster, status fleetv1alpha1.MemberClusterStatus) {
	t.Helper()
	mc.Status = status
	if err := c.Status().Update(t.Context(), mc); err != nil {
		t.Fatal(err)
	}
	mc.Status = status
}

func newMember(name, label string, ref fleetv1alpha1.SecretReference) *fleetv1alpha1.MemberCluster {
	return &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{getTestLabel: label}},
		Spec:       fleetv1alpha1.MemberClusterSpec{SecretRef: ref},
	}
}

func condition(typ string, status metav1.ConditionStatus, reason, message string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(at)}
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// hubFlag writes an admin kubeconfig of env and returns the
// --hub-kubeconfig flag that names it.
func hubFlag(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	data, err := controlplane.AdminKubeconfig(env, "get-test")
	if err != nil {
		t.Fatal(err)
	}
	return "--hub-kubeconfig=" + writeTemp(t, "hub.kubeconfig", data)
}

// hubClient returns an admin client of testHub, and the flag for the
// commands to reach it.
func hubClient(t *testing.T) (client.Client, string) {
	t.Helper()
	c, err := client.New(testHub.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, hubFlag(t, testHub)
}

func TestGetMembers(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)

	members := []*fleetv1alpha1.MemberCluster{
		newMember("get-east", "get", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "get-east", Format: fleetv1alpha1.FormatNative}),
		newMember("get-west", "get", fleetv1alpha1.SecretReference{Namespace: "default", Name: "get-west-kubeconfig", Format: fleetv1alpha1.FormatClusterAPI}),
		newMember("get-new", "get", fleetv1alpha1.SecretReference{Namespace: "argocd", Name: "cluster-get-new", Format: fleetv1alpha1.FormatArgoCD}),
		newMember("get-stale", "get", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "get-stale", Format: fleetv1alpha1.FormatNative}),
	}
	members[1].Spec.Maintenance = fleetv1alpha1.MaintenanceCordon
	for _, mc := range members {
		createMember(t, c, mc)
	}
	// Every member is 30 days old at now, whenever the test runs.
	now := members[len(members)-1].CreationTimestamp.Add(30*24*time.Hour + time.Hour)
	clk := clocktesting.NewFakeClock(now)

	setStatus(t, c, members[0], fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-2 * time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-2*time.Hour)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-2*time.Hour)),
		},
		ServerVersion:      "v1.37.1",
		LastProbeTime:      ptrTime(now.Add(-7 * time.Second)),
		LastProbeResult:    fleetv1alpha1.ProbeResultSuccess,
		EngagedControllers: []string{"configmaps", "deployments"},
		ControllerConditions: []fleetv1alpha1.ControllerCondition{
			{Name: "configmaps", Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonEngaged, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
			{Name: "deployments", Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonEngaged, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
			{Name: "widgets", Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonKindNotFound, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
		},
		Credentials: &fleetv1alpha1.CredentialStatus{
			Type: fleetv1alpha1.CredentialTypeToken, ExpirationTime: ptrTime(now.Add(23*time.Hour + 10*time.Minute)), Renewable: true,
		},
	})
	setStatus(t, c, members[1], fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateUnhealthy,
		StateSince: ptrTime(now.Add(-3 * time.Minute)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionFalse, fleetv1alpha1.ReasonUnhealthy, "probes fail", now.Add(-3*time.Minute)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionFalse, fleetv1alpha1.ReasonProbeFailed, "probes fail", now.Add(-3*time.Minute)),
		},
		ServerVersion:       "v1.36.4",
		LastProbeTime:       ptrTime(now.Add(-15 * time.Second)),
		LastProbeResult:     fleetv1alpha1.ProbeResultFailure,
		ConsecutiveFailures: 5,
		Credentials: &fleetv1alpha1.CredentialStatus{
			Type: fleetv1alpha1.CredentialTypeClientCertificate, ExpirationTime: ptrTime(now.Add(-time.Hour)),
		},
	})
	// Recorded Ready, and probed by no manager for 80 s: Unknown.
	setStatus(t, c, members[3], fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Hour)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-time.Hour)),
		},
		ServerVersion:   "v1.37.1",
		LastProbeTime:   ptrTime(now.Add(-80 * time.Second)),
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	})
	// An object the get tests did not create, which -l leaves out.
	createMember(t, c, newMember("get-other", "other", fleetv1alpha1.SecretReference{Namespace: "x", Name: "y", Format: fleetv1alpha1.FormatNative}))

	for _, tc := range []struct{ golden, args string }{
		{"members.golden", "get members -l " + getTestLabel + "=get"},
		{"members-wide.golden", "get mc -o wide -l " + getTestLabel + "=get"},
		{"members-named.golden", "get member get-west get-east"},
		{"members-name.golden", "get members -o name -l " + getTestLabel + "=get"},
		{"members-no-headers.golden", "get members -o wide --no-headers -l " + getTestLabel + "=get"},
		{"members-custom-columns.golden", "get members -o custom-columns=NAME:.metadata.name,SECRET:.spec.secretRef.name,RECORDED:.status.state,CONTROLLERS:.status.engagedControllers[*] -l " + getTestLabel + "=get"},
		{"members-jsonpath.golden", "get members -o jsonpath={.items[*].metadata.name} -l " + getTestLabel + "=get"},
		{"members-label-columns.golden", "get members get-east get-west -L " + getTestLabel + " --show-labels"},
	} {
		res := runCLI(t, nil, clk, append(strings.Fields(tc.args), hubFlag)...)
		if res.code != 0 || res.stderr != "" {
			t.Fatalf("%s: exit %d, stderr %q", tc.args, res.code, res.stderr)
		}
		checkGolden(t, tc.golden, res.stdout)
	}

	t.Run("yaml and json parse back", func(t *testing.T) {
		for _, output := range []string{"yaml", "json"} {
			res := runCLI(t, nil, clk, "get", "members", "-o", output, "-l", getTestLabel+"=get", hubFlag)
			if res.code != 0 {
				t.Fatalf("-o %s: exit %d, stderr %q", output, res.code, res.stderr)
			}
			if output == "json" && !json.Valid([]byte(res.stdout)) {
				t.Fatalf("-o json is not JSON:\n%s", res.stdout)
			}
			var list struct {
				APIVersion string                        `json:"apiVersion"`
				Kind       string                        `json:"kind"`
				Items      []fleetv1alpha1.MemberCluster `json:"items"`
			}
			if err := yaml.Unmarshal([]byte(res.stdout), &list); err != nil {
				t.Fatalf("-o %s: %v", output, err)
			}
			if list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != len(members) {
				t.Fatalf("-o %s: got %s %s with %d items, want a v1 List of %d", output, list.APIVersion, list.Kind, len(list.Items), len(members))
			}
			for i, want := range []*fleetv1alpha1.MemberCluster{members[0], members[2], members[3], members[1]} {
				got := list.Items[i]
				if got.APIVersion != "fleet.fleetkube.io/v1alpha1" || got.Kind != "MemberCluster" {
					t.Errorf("-o %s: item %d is %s %s", output, i, got.APIVersion, got.Kind)
				}
				if got.Name != want.Name || !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) || !apiequality.Semantic.DeepEqual(got.Status, want.Status) {
					t.Errorf("-o %s: item %d is %+v, want %+v", output, i, got, want)
				}
				if len(got.ManagedFields) > 0 {
					t.Errorf("-o %s: item %d has managedFields", output, i)
				}
			}
		}
		res := runCLI(t, nil, clk, "get", "member", "get-east", "-o", "yaml", hubFlag)
		var one fleetv1alpha1.MemberCluster
		if err := yaml.Unmarshal([]byte(res.stdout), &one); err != nil || one.Kind != "MemberCluster" || one.Name != "get-east" {
			t.Errorf("-o yaml of one NAME: want the MemberCluster alone, got (%v):\n%s", err, res.stdout)
		}
	})

	t.Run("no members", func(t *testing.T) {
		res := runCLI(t, nil, clk, "get", "members", "-l", getTestLabel+"=none", hubFlag)
		if res != (cliResult{stderr: "No members registered.\n"}) {
			t.Errorf("got %+v", res)
		}
	})

	t.Run("unknown name", func(t *testing.T) {
		res := runCLI(t, nil, clk, "get", "members", "nope", hubFlag)
		want := cliResult{stderr: "fleet-manager get members: memberclusters.fleet.fleetkube.io \"nope\" not found\n", code: 1}
		if res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
		res = runCLI(t, nil, clk, "get", "members", "get-east", "nope", hubFlag)
		if res.code != 1 || !strings.HasPrefix(res.stdout, "NAME") || !strings.Contains(res.stdout, "get-east") || strings.Count(res.stderr, "\n") != 1 {
			t.Errorf("a known and an unknown name: got %+v", res)
		}
	})

	t.Run("forbidden", func(t *testing.T) {
		user, err := testHub.AddUser(envtest.User{Name: "get-nobody"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := user.KubeConfig()
		if err != nil {
			t.Fatal(err)
		}
		res := runCLI(t, nil, clk, "get", "members", "--hub-kubeconfig="+writeTemp(t, "nobody.kubeconfig", data))
		if res.code != 1 || res.stdout != "" || strings.Count(res.stderr, "\n") != 1 || !strings.Contains(res.stderr, "forbidden") {
			t.Errorf("got %+v, want exit 1 and one line saying it is forbidden", res)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"get", "members", "-o", "table"},
			{"get", "members", "-o", "custom-columns=NAME"},
			{"get", "members", "-o", "jsonpath={.items["},
			{"get", "members", "--stale-after=0"},
			{"get", "members", "a", "b", "--watch"},
			{"get", "members", "-l", "a in (", hubFlag},
			{"get", "members", "get-east", "-l", "a=b"},
			{"get", "members", "--no-such-flag"},
			{"get", "nodes"},
		} {
			if res := runCLI(t, nil, clk, args...); res.code != 2 {
				t.Errorf("%q: got %+v, want exit 2", args, res)
			}
		}
	})
}

func TestStatus(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)

	full := newMember("status-east", "status", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "status-east", Format: fleetv1alpha1.FormatNative})
	full.Labels["env"] = "prod"
	full.Spec.Maintenance = fleetv1alpha1.MaintenanceDrain
	full.Status = fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-5 * time.Minute)),
		RecentTransitions: []fleetv1alpha1.StateTransition{
			{State: fleetv1alpha1.MemberStatePending, Time: metav1.NewTime(now.Add(-50 * time.Hour)), Reason: fleetv1alpha1.ReasonPending},
			{State: fleetv1alpha1.MemberStateConnecting, Time: metav1.NewTime(now.Add(-50*time.Hour + time.Second)), Reason: fleetv1alpha1.ReasonConnecting},
			{State: fleetv1alpha1.MemberStateReady, Time: metav1.NewTime(now.Add(-50*time.Hour + 3*time.Second)), Reason: fleetv1alpha1.ReasonEngaged},
			{State: fleetv1alpha1.MemberStateUnhealthy, Time: metav1.NewTime(now.Add(-7 * time.Minute)), Reason: fleetv1alpha1.ReasonProbeFailed},
			{State: fleetv1alpha1.MemberStateReady, Time: metav1.NewTime(now.Add(-5 * time.Minute)), Reason: fleetv1alpha1.ReasonProbeSucceeded},
		},
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "engaged with 2 controllers", now.Add(-5*time.Minute)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-5*time.Minute)),
			condition(fleetv1alpha1.ConditionCredentialsAccepted, metav1.ConditionTrue, fleetv1alpha1.ReasonAccepted, "", now.Add(-50*time.Hour)),
			condition(fleetv1alpha1.ConditionDrained, metav1.ConditionFalse, fleetv1alpha1.ReasonWaitingForDisruptionBudget, "team-a/web: 1 of 1 members may be unavailable", now.Add(-time.Minute)),
			condition(fleetv1alpha1.ConditionCredentialsExpiring, metav1.ConditionTrue, fleetv1alpha1.ReasonExpiring,
				"token expires at 2030-01-02T05:04:05Z\nand renewals fail", now.Add(-20*time.Minute)),
		},
		ServerVersion:      "v1.37.1",
		LastProbeTime:      ptrTime(now.Add(-4 * time.Second)),
		LastProbeResult:    fleetv1alpha1.ProbeResultSuccess,
		EngagedControllers: []string{"configmaps", "widgets"},
		ControllerConditions: []fleetv1alpha1.ControllerCondition{
			{Name: "configmaps", Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonEngaged, LastTransitionTime: metav1.NewTime(now.Add(-5 * time.Minute))},
			{Name: "gadgets", Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonKindNotFound, Message: "example.com/v1 Gadget is not served", LastTransitionTime: metav1.NewTime(now.Add(-50 * time.Hour))},
		},
		LastError: "probe: Get \"https://east:6443/livez\": \x1b[31mcontext deadline exceeded",
		Credentials: &fleetv1alpha1.CredentialStatus{
			Type:             fleetv1alpha1.CredentialTypeToken,
			ExpirationTime:   ptrTime(now.Add(2 * time.Hour)),
			Renewable:        true,
			LastRenewalTime:  ptrTime(now.Add(-19*time.Hour - 10*time.Minute)),
			LastRenewalError: `serviceaccounts "fleet-manager" is forbidden: cannot create resource "serviceaccounts/token"`,
		},
		OwedRemovals: []fleetv1alpha1.OwedRemoval{
			{Propagation: "team-a/web", Reason: "the member is Unhealthy: its copies are removed when it is Ready", Since: metav1.NewTime(now.Add(-26 * time.Hour))},
			{Propagation: "team-b/api", Reason: "removing the copies failed: the member forbids the manager to delete configmaps", Since: metav1.NewTime(now.Add(-3 * time.Minute))},
		},
		OwedRemovalCount: 3,
		Drain:            &fleetv1alpha1.DrainStatus{Remaining: 2, Message: "waiting for team-a/web's disruption budget"},
	}
	createMember(t, c, full)
	createMember(t, c, newMember("status-new", "status", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "status-new", Format: fleetv1alpha1.FormatMulticlusterRuntime}))
	expired := newMember("status-expired", "status", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "status-expired", Format: fleetv1alpha1.FormatNative})
	expired.Status.Credentials = &fleetv1alpha1.CredentialStatus{Type: fleetv1alpha1.CredentialTypeClientCertificate, ExpirationTime: ptrTime(now.Add(-73 * time.Hour))}
	createMember(t, c, expired)
	stale := newMember("status-stale", "status", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "status-stale", Format: fleetv1alpha1.FormatNative})
	stale.Status = fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Hour)),
		},
		LastProbeTime:   ptrTime(now.Add(-80 * time.Second)),
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	}
	createMember(t, c, stale)

	for _, name := range []string{"status-east", "status-new", "status-expired", "status-stale"} {
		res := runCLI(t, nil, clk, "status", name, hubFlag)
		if res.code != 0 || res.stderr != "" {
			t.Fatalf("status %s: exit %d, stderr %q", name, res.code, res.stderr)
		}
		checkGolden(t, name+".golden", res.stdout)
	}

	// "status member NAME" is "status NAME", for a member named like a
	// subcommand.
	if res, want := runCLI(t, nil, clk, "status", "member", "status-east", hubFlag), runCLI(t, nil, clk, "status", "status-east", hubFlag); res != want {
		t.Errorf("status member status-east: got %+v, want %+v", res, want)
	}
	res := runCLI(t, nil, clk, "status", "status-east", "-o", "jsonpath={.status.state} {.spec.secretRef.format}", hubFlag)
	if want := (cliResult{stdout: "Ready native"}); res != want {
		t.Errorf("status -o jsonpath: got %+v, want %+v", res, want)
	}
	res = runCLI(t, nil, clk, "status", "nope", hubFlag)
	if want := (cliResult{stderr: "fleet-manager status: memberclusters.fleet.fleetkube.io \"nope\" not found\n", code: 1}); res != want {
		t.Errorf("unknown name: got %+v, want %+v", res, want)
	}
	for _, args := range [][]string{{"status"}, {"status", "a", "b"}, {"status", "a", "-o", "wide"}, {"status", "a", "--stale-after=-1s"}} {
		if res := runCLI(t, nil, clk, args...); res.code != 2 {
			t.Errorf("%q: got %+v, want exit 2", args, res)
		}
	}
}

// TestHubWithoutCRD reads members from an API server with no fleet CRDs.
func TestHubWithoutCRD(t *testing.T) {
	needAPIServers(t)
	hubFlag := hubFlag(t, testMember)
	clk := clock.RealClock{}
	want := "the hub has no MemberCluster CRD: apply deploy/crd (kubectl apply -k deploy/)\n"
	for _, args := range [][]string{
		{"get", "members"},
		{"get", "members", "east"},
		{"get", "members", "east", "-o", "yaml"},
		{"status", "east"},
	} {
		res := runCLI(t, nil, clk, append(args, hubFlag)...)
		if res.code != 1 || res.stdout != "" || !strings.HasSuffix(res.stderr, ": "+want) || strings.Count(res.stderr, "\n") != 1 {
			t.Errorf("%q: got %+v, want exit 1 and %q", args, res, want)
		}
	}
}

func TestCheckKubeconfig(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "plugin-ran")
	plugin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	good := kubeconfigtest.Build(t, nil)
	execKubeconfig := kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) {
		user.Token = ""
		user.Exec = &clientcmdapi.ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	})
	tokenFileKubeconfig := kubeconfigtest.Build(t, func(_ *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) {
		user.Token, user.TokenFile = "", tokenFile
	})
	certKubeconfig := kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) {
		cl.Server = "https://admin:" + kubeconfigtest.Password + "@member.example.com:6443"
		user.Token, user.ClientCertificateData, user.ClientKeyData = "", []byte(kubeconfigtest.CertData), []byte(kubeconfigtest.KeyData)
	})
	clk := clock.RealClock{}

	for _, tc := range []struct {
		name  string
		stdin io.Reader
		args  []string
		want  cliResult
	}{{
		name: "token",
		args: []string{writeTemp(t, "good", good)},
		want: cliResult{stdout: "accepted: server https://member.example.com:6443, credentials Token\n"},
	}, {
		name:  "stdin",
		stdin: bytes.NewReader(good),
		args:  []string{"-"},
		want:  cliResult{stdout: "accepted: server https://member.example.com:6443, credentials Token\n"},
	}, {
		name: "client certificate, password in the server URL",
		args: []string{writeTemp(t, "cert", certKubeconfig)},
		want: cliResult{stdout: "accepted: server https://member.example.com:6443, credentials ClientCertificate\n"},
	}, {
		name: "exec plugin",
		args: []string{writeTemp(t, "exec", execKubeconfig)},
		want: cliResult{stdout: "refused: ExecPluginRefused: exec plugin " + plugin + " is refused: it would run a program on the manager's host, so only commands allowed by name run (fleet-manager --allow-exec-plugin=" + plugin + " accepts it)\n", code: 1},
	}, {
		name: "exec plugin allowed",
		args: []string{"--allow-exec-plugin=" + plugin, writeTemp(t, "exec", execKubeconfig)},
		want: cliResult{stdout: "accepted: server https://member.example.com:6443, credentials ExecPlugin\n"},
	}, {
		name: "token file",
		args: []string{writeTemp(t, "token-file", tokenFileKubeconfig)},
		want: cliResult{stdout: "refused: FileReference: tokenFile names a file, which is never read; put the content in token instead\n", code: 1},
	}, {
		name:  "not YAML",
		stdin: strings.NewReader("{"),
		args:  []string{"-"},
		want:  cliResult{stdout: "refused: KubeconfigMalformed: kubeconfig is not a valid YAML or JSON Config\n", code: 1},
	}, {
		name: "missing file",
		args: []string{filepath.Join(dir, "missing")},
		want: cliResult{stderr: "fleet-manager check-kubeconfig: open " + filepath.Join(dir, "missing") + ": no such file or directory\n", code: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, tc.stdin, clk, append([]string{"check-kubeconfig"}, tc.args...)...)
			if res != tc.want {
				t.Errorf("got %+v, want %+v", res, tc.want)
			}
			for _, secret := range kubeconfigtest.Secrets {
				if strings.Contains(res.stdout+res.stderr, secret) {
					t.Errorf("output holds credential material %q", secret)
				}
			}
		})
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec plugin ran (%v)", err)
	}

	t.Run("huge stdin", func(t *testing.T) {
		huge := &countingReader{left: 10 << 20}
		res := runCLI(t, huge, clk, "check-kubeconfig", "-")
		want := cliResult{stdout: fmt.Sprintf("refused: KubeconfigTooLarge: kubeconfig is over the limit of %d bytes\n", kubeconfig.MaxKubeconfigBytes), code: 1}
		if res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
		if huge.read > kubeconfig.MaxKubeconfigBytes+1 {
			t.Errorf("read %d bytes of stdin, want at most the limit and one", huge.read)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"check-kubeconfig"},
			{"check-kubeconfig", "a", "b"},
			{"check-kubeconfig", "--allow-exec-plugin=", "-"},
			{"check-kubeconfig", "--allow-everything", "-"},
		} {
			if res := runCLI(t, strings.NewReader(string(good)), clk, args...); res.code != 2 {
				t.Errorf("%q: got %+v, want exit 2", args, res)
			}
		}
	})
}

// countingReader yields left bytes of kubeconfig-like lines and counts
// those read.
type countingReader struct{ left, read int }

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left)
	for i := range p[:n] {
		p[i] = 'a'
	}
	r.left -= n
	r.read += n
	return n, nil
}

// TestGetMembersShowsRefusals: a registration the manager refused shows
// STATE Refused and the reason, not Pending like one still connecting;
// a member's own 401 is no refusal.
func TestGetMembersShowsRefusals(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	now := time.Now()
	for name, conds := range map[string][]metav1.Condition{
		"refused-dup":   {condition(fleetv1alpha1.ConditionReady, metav1.ConditionFalse, "DuplicateCluster", "refused-x keeps the cluster", now)},
		"refused-file":  {condition(fleetv1alpha1.ConditionCredentialsAccepted, metav1.ConditionFalse, "FileReference", "a file", now)},
		"refused-no":    {condition(fleetv1alpha1.ConditionCredentialsAccepted, metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized, "401", now)},
		"refused-fresh": nil,
	} {
		mc := newMember(name, "refused", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: name, Format: fleetv1alpha1.FormatNative})
		mc.Status = fleetv1alpha1.MemberClusterStatus{State: fleetv1alpha1.MemberStatePending, Conditions: conds}
		createMember(t, c, mc)
	}
	res := runCLI(t, nil, clock.RealClock{}, "get", "members", hubFlag, "-l", getTestLabel+"=refused", "--no-headers")
	states := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		states[name] = strings.Join(strings.Fields(rest)[:2], " ")
	}
	want := map[string]string{
		"refused-dup":   "Refused (DuplicateCluster)",
		"refused-file":  "Refused (FileReference)",
		"refused-no":    "Pending <none>",
		"refused-fresh": "Pending <none>",
	}
	if res.code != 0 || !maps.Equal(states, want) {
		t.Errorf("get members: exit %d, states %v, want %v\n%s%s", res.code, states, want, res.stdout, res.stderr)
	}
}
