package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// enrollResult is what register or unregister printed, and its exit code.
type enrollResult struct {
	stdout, stderr string
	code           int
}

// runEnroll runs fleet-manager args under a root holding register and
// unregister, and returns what it printed and its exit code as execute
// would.
func runEnroll(t *testing.T, args ...string) enrollResult {
	t.Helper()
	var hub hubFlags
	root := &cobra.Command{Use: "fleet-manager", SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	hub.bindFlags(root.PersistentFlags())
	root.AddCommand(newRegisterCommand(&hub), newUnregisterCommand(&hub), newGrantsCommand(&hub))
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(t.Context())
	code := 0
	switch {
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(&stderr, "Error: %v\n", err)
		code = 2
	case err != nil:
		fmt.Fprintf(&stderr, "%s: %v\n", cmd.CommandPath(), err)
		code = 1
	}
	return enrollResult{stdout.String(), stderr.String(), code}
}

// enrollSetup returns admin clients of the test hub and member, a fresh
// fleet namespace on the hub, and the flags that reach both. What the
// test leaves in the member is removed when it ends.
func enrollSetup(t *testing.T) (hub, member client.Client, ns string, flags []string) {
	t.Helper()
	needAPIServers(t)
	var err error
	if hub, err = client.New(testHub.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if member, err = client.New(testMember.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	fleetNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "register-"}}
	if err := hub.Create(t.Context(), fleetNS); err != nil {
		t.Fatal(err)
	}
	memberKubeconfig, err := controlplane.AdminKubeconfig(testMember, "register-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resetTestMember(t) })
	return hub, member, fleetNS.Name, []string{
		hubFlag(t, testHub), "--member-kubeconfig=" + writeTemp(t, "member.kubeconfig", memberKubeconfig), "--namespace=" + fleetNS.Name,
	}
}

// resetTestMember removes what the register tests left in the member,
// whatever its fleet, and finalizes fleet-system, which envtest (no
// namespace controller) would keep terminating.
func resetTestMember(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(testMember.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}, &rbacv1.RoleList{}, &corev1.ServiceAccountList{}} {
		if err := c.List(ctx, list, client.HasLabels{enroll.ManagedByLabel}); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			return client.IgnoreNotFound(c.Delete(ctx, o.(client.Object)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := controlplane.RemoveNamespace(ctx, testMember.Config, enroll.MemberNamespace); err != nil {
		t.Fatal(err)
	}
}

// labelledInMember lists the member's objects labelled as fleet-manager's,
// terminating ones left out.
func labelledInMember(t *testing.T, member client.Client) []string {
	t.Helper()
	var names []string
	sel := client.MatchingLabels{enroll.ManagedByLabel: enroll.ManagedByValue}
	var nss corev1.NamespaceList
	var sas corev1.ServiceAccountList
	var roles rbacv1.RoleList
	var rbs rbacv1.RoleBindingList
	var crbs rbacv1.ClusterRoleBindingList
	for _, l := range []client.ObjectList{&nss, &sas, &roles, &rbs, &crbs} {
		if err := member.List(t.Context(), l, sel); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nss.Items {
		if n.DeletionTimestamp == nil {
			names = append(names, "Namespace "+n.Name)
		}
	}
	for _, o := range sas.Items {
		names = append(names, "ServiceAccount "+o.Namespace+"/"+o.Name)
	}
	for _, o := range roles.Items {
		names = append(names, "Role "+o.Namespace+"/"+o.Name)
	}
	for _, o := range rbs.Items {
		names = append(names, "RoleBinding "+o.Namespace+"/"+o.Name)
	}
	for _, o := range crbs.Items {
		names = append(names, "ClusterRoleBinding "+o.Name)
	}
	return names
}

func TestRegisterWaitsForReadyAndUnregisterCleansUp(t *testing.T) {
	hub, member, ns, flags := enrollSetup(t)
	startInProcess(t, flags[0], "--namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address=0")

	res := runEnroll(t, append([]string{"register", "reg-ready", "--permissions=view", "--labels=env=test", "--wait=1m"}, flags...)...)
	if res.code != 0 || !strings.Contains(res.stderr, "Waiting for MemberCluster reg-ready to be Ready: ") ||
		!strings.Contains(res.stdout, "MemberCluster reg-ready is Ready (Kubernetes v") {
		t.Fatalf("register: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for _, line := range []string{"member: Namespace fleet-system created", "member: ClusterRoleBinding fleet-manager:view created", "hub: Secret " + ns + "/reg-ready created"} {
		if !strings.Contains(res.stdout, line) {
			t.Errorf("register's output has no line %q:\n%s", line, res.stdout)
		}
	}
	var mc fleetv1alpha1.MemberCluster
	if err := hub.Get(t.Context(), client.ObjectKey{Name: "reg-ready"}, &mc); err != nil || mc.Labels["env"] != "test" {
		t.Errorf("MemberCluster: %v, labels %v", err, mc.Labels)
	}
	// The manager takes the registered token for one it renews.
	poll.Until(t, "the registered token described as renewable", func() bool {
		var mc fleetv1alpha1.MemberCluster
		if hub.Get(t.Context(), client.ObjectKey{Name: "reg-ready"}, &mc) != nil || mc.Status.Credentials == nil {
			return false
		}
		c := mc.Status.Credentials
		return c.Type == fleetv1alpha1.CredentialTypeToken && c.Renewable && c.ExpirationTime != nil && time.Until(c.ExpirationTime.Time) > 23*time.Hour
	})

	before := labelledInMember(t, member)
	res = runEnroll(t, append([]string{"unregister", "reg-ready", "--wait=1m"}, flags[0], flags[2])...)
	if res.code != 0 || !strings.Contains(res.stdout, "MemberCluster reg-ready is gone") {
		t.Fatalf("unregister: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	if after := labelledInMember(t, member); strings.Join(after, ",") != strings.Join(before, ",") || len(after) != 5 {
		t.Errorf("unregister without --cleanup changed the member: %v, was %v", after, before)
	}
	res = runEnroll(t, append([]string{"unregister", "reg-ready", "--cleanup"}, flags...)...)
	if res.code != 0 || !strings.Contains(res.stdout, "member: ClusterRoleBinding fleet-manager:view deleted") ||
		!strings.Contains(res.stdout, "member: Namespace fleet-system deleted") {
		t.Fatalf("unregister --cleanup: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	if left := labelledInMember(t, member); len(left) > 0 {
		t.Errorf("after unregister --cleanup the member has %v", left)
	}
}

// TestRegisterWaitsForAProbeNewerThanItsStart: with the manager stopped,
// the MemberCluster still records Ready, and register --wait does not
// take that for a member a manager probes.
func TestRegisterWaitsForAProbeNewerThanItsStart(t *testing.T) {
	hub, _, ns, flags := enrollSetup(t)
	t.Cleanup(func() {
		mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "reg-probe"}}
		if err := hub.Delete(context.Background(), mc); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	f, err := parseRunFlags([]string{flags[0], "--namespace=" + ns, "--metrics-bind-address=0", "--health-probe-bind-address=0"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	f.skipNameValidation = true
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, f, logr.Discard()) }()
	res := runEnroll(t, append([]string{"register", "reg-probe", "--permissions=view", "--wait=1m"}, flags...)...)
	cancel()
	if err := <-stopped; err != nil {
		t.Errorf("run: %v", err)
	}
	if res.code != 0 || !strings.Contains(res.stdout, "MemberCluster reg-probe is Ready (Kubernetes v") {
		t.Fatalf("register with a manager: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}

	// The wait counts from register's start: long enough that its writes
	// fit in it on two loaded cores.
	res = runEnroll(t, append([]string{"register", "reg-probe", "--permissions=view", "--wait=8s"}, flags...)...)
	want := "Waiting for MemberCluster reg-probe to be Ready: Ready as recorded, but not probed with this registration yet\n" +
		"fleet-manager register: MemberCluster reg-probe is not Ready: not probed with this registration within 8s (is a manager running for this fleet?): state Ready"
	if res.code != 1 || strings.Contains(res.stdout, "is Ready") || !strings.Contains(res.stderr, want) {
		t.Errorf("register without a manager: exit %d, want 1\nstdout:\n%s\nstderr:\n%s\nwant in stderr:\n%s", res.code, res.stdout, res.stderr, want)
	}
	if n := strings.Count(res.stderr, "Waiting for MemberCluster"); n != 2 {
		t.Errorf("register without a manager printed %d progress lines, want 2 (Ready, then Ready as recorded): one per change, not per read\n%s", n, res.stderr)
	}
}

// TestRegisterAgainWaitsForTheManagerToProbeItsSecret: register --wait of
// a member already Ready returns once the manager has probed with the
// Secret it wrote, which the manager does at once, not at its next probe
// (a minute here) or at its next refresh of lastProbeTime (8 minutes).
func TestRegisterAgainWaitsForTheManagerToProbeItsSecret(t *testing.T) {
	hub, _, ns, flags := enrollSetup(t)
	t.Cleanup(func() {
		mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "reg-again"}}
		if err := hub.Delete(context.Background(), mc); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	startInProcess(t, flags[0], "--namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=1m", "--probe-review-interval=10m")
	res := runEnroll(t, append([]string{"register", "reg-again", "--permissions=view", "--wait=1m"}, flags...)...)
	if res.code != 0 || !strings.Contains(res.stdout, "MemberCluster reg-again is Ready") {
		t.Fatalf("first register: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}

	res = runEnroll(t, append([]string{"register", "reg-again", "--permissions=view", "--wait=30s"}, flags...)...)
	if res.code != 0 || !strings.Contains(res.stdout, "MemberCluster reg-again is Ready") {
		t.Fatalf("register again: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	var secret corev1.Secret
	var mc fleetv1alpha1.MemberCluster
	if err := hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "reg-again"}, &secret); err != nil {
		t.Fatal(err)
	}
	if err := hub.Get(t.Context(), client.ObjectKey{Name: "reg-again"}, &mc); err != nil {
		t.Fatal(err)
	}
	if mc.Status.ObservedSecretVersion != secret.ResourceVersion {
		t.Errorf("register returned with the MemberCluster's observedSecretVersion %q, not the Secret's %q it wrote", mc.Status.ObservedSecretVersion, secret.ResourceVersion)
	}
	var lines []string
	for l := range strings.Lines(res.stderr) {
		if strings.HasPrefix(l, "Waiting for MemberCluster") {
			if len(lines) > 0 && lines[len(lines)-1] == l {
				t.Errorf("register again printed %q twice in a row: a line per change, not per read\n%s", l, res.stderr)
			}
			lines = append(lines, l)
		}
	}
	if len(lines) > 3 {
		t.Errorf("register again printed %d progress lines, want at most 3 (Ready, Ready as recorded, Ready):\n%s", len(lines), res.stderr)
	}
}

func TestRegisterDryRun(t *testing.T) {
	hub, member, ns, flags := enrollSetup(t)
	for _, mode := range []string{"--dry-run", "--dry-run=server"} {
		res := runEnroll(t, append([]string{"register", "reg-dry", "--permissions=edit", "--namespaces=default", mode, "-o", "yaml"}, flags...)...)
		docs := strings.Split(res.stdout, "---\n")
		if res.code != 0 || len(docs) != 6 || !strings.Contains(docs[0], "kind: Namespace") || !strings.Contains(docs[5], "token: <redacted>") {
			t.Fatalf("register %s -o yaml: exit %d\nstdout:\n%s\nstderr:\n%s", mode, res.code, res.stdout, res.stderr)
		}
		if left := labelledInMember(t, member); len(left) > 0 {
			t.Errorf("register %s created %v in the member", mode, left)
		}
		var secrets corev1.SecretList
		if err := hub.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil || len(secrets.Items) > 0 {
			t.Errorf("register %s: hub Secrets %v, %v", mode, secrets.Items, err)
		}
	}
}

func TestRegisterErrors(t *testing.T) {
	_, _, _, flags := enrollSetup(t)
	unreachable := writeTemp(t, "unreachable.kubeconfig", []byte(`apiVersion: v1
kind: Config
clusters: [{name: m, cluster: {server: "https://`+closedAddress(t)+`"}}]
users: [{name: u, user: {token: secret-token-123}}]
contexts: [{name: m, context: {cluster: m, user: u}}]
current-context: m
`))
	noCRD := hubFlag(t, testMember)
	cases := map[string]struct {
		args []string
		code int
		want string
	}{
		"bad name":                       {args: []string{"register", "Bad_Name", "--permissions=view"}, code: 1, want: "DNS-1123"},
		"no permissions":                 {args: []string{"register", "reg-x"}, code: 2, want: "there is no default"},
		"both":                           {args: []string{"register", "reg-x", "--permissions=view", "--cluster-role=view"}, code: 2, want: "exclude each other"},
		"bad preset":                     {args: []string{"register", "reg-x", "--permissions=admin"}, code: 2, want: "fleet, view, edit or cluster-admin"},
		"no NAME":                        {args: []string{"register", "--permissions=view"}, code: 2, want: "NAME"},
		"bad label":                      {args: []string{"register", "reg-x", "--permissions=view", "--labels=a"}, code: 2, want: "key=value"},
		"short ttl":                      {args: []string{"register", "reg-x", "--permissions=view", "--token-ttl=1m"}, code: 2, want: "at least 10m"},
		"long ttl":                       {args: []string{"register", "reg-x", "--permissions=view", "--token-ttl=25h"}, code: 2, want: "at most 24h"},
		"unreachable":                    {args: []string{"register", "reg-x", "--permissions=view", "--wait=0", "--member-kubeconfig=" + unreachable}, code: 1, want: "cannot reach the member at https://127.0.0.1:"},
		"unreachable says what to check": {args: []string{"register", "reg-x", "--permissions=view", "--wait=0", "--member-kubeconfig=" + unreachable}, code: 1, want: "; check --member-kubeconfig/--member-context"},
		"no CRD":                         {args: []string{"register", "reg-x", "--permissions=view", noCRD}, code: 1, want: "apply deploy/crd"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The case's own flags come last, so that they win.
			res := runEnroll(t, append(append([]string{tc.args[0]}, flags...), tc.args[1:]...)...)
			if res.code != tc.code || !strings.Contains(res.stderr, tc.want) || strings.Count(res.stderr, "\n") != 1 {
				t.Fatalf("exit %d, want %d with one line saying %q; stderr:\n%s", res.code, tc.code, tc.want, res.stderr)
			}
			if strings.Contains(res.stderr, "secret-token-123") {
				t.Error("the error shows the token")
			}
		})
	}
}

func TestRegisterWarnsWhenItRepointsTheSecret(t *testing.T) {
	_, _, ns, flags := enrollSetup(t)
	res := runEnroll(t, append([]string{"register", "reg-ready", "--permissions=view", "--wait=0", "--server=https://10.0.0.7:6443"}, flags...)...)
	if res.code != 0 {
		t.Fatalf("register --server: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	res = runEnroll(t, append([]string{"register", "reg-ready", "--permissions=view", "--wait=0"}, flags...)...)
	if res.code != 0 || !strings.Contains(res.stderr, "Warning: the hub Secret "+ns+"/reg-ready registered \"reg-ready\" at https://10.0.0.7:6443; it now points at https://") ||
		!strings.Contains(res.stdout, "hub: Secret "+ns+"/reg-ready configured, re-pointed from https://10.0.0.7:6443") {
		t.Errorf("register to another server: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
}

// TestRegisterWaitFailsWithTheStateGetMembersShows: a MemberCluster that
// records Ready, last probed ten minutes ago, is one no manager probes:
// register --wait fails saying Unknown, as get members shows it, not
// Ready.
func TestRegisterWaitFailsWithTheStateGetMembersShows(t *testing.T) {
	hub, _, ns, flags := enrollSetup(t)
	mc := &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "reg-stale", Labels: map[string]string{fleetv1alpha1.FleetLabel: ns}},
		Spec:       fleetv1alpha1.MemberClusterSpec{SecretRef: fleetv1alpha1.SecretReference{Namespace: ns, Name: "reg-stale", Format: fleetv1alpha1.FormatNative}},
	}
	if err := hub.Create(t.Context(), mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hub.Delete(context.Background(), mc); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	probed := metav1.NewTime(time.Now().Add(-10 * time.Minute))
	mc.Status = fleetv1alpha1.MemberClusterStatus{
		State: fleetv1alpha1.MemberStateReady, LastProbeTime: &probed,
		Conditions: []metav1.Condition{{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Probed", Message: "probed", LastTransitionTime: probed}},
	}
	if err := hub.Status().Update(t.Context(), mc); err != nil {
		t.Fatal(err)
	}
	res := runEnroll(t, append([]string{"register", "reg-stale", "--permissions=view", "--wait=3s"}, flags...)...)
	want := "not probed with this registration within 3s (is a manager running for this fleet?): state Unknown (no manager has probed the member for over 72s; last probed "
	if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "(10m ago)); it records state Ready") {
		t.Errorf("register --wait: exit %d, want 1\nstderr:\n%s\nwant in it:\n%s", res.code, res.stderr, want)
	}
}
