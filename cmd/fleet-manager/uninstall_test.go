package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// uninstallFleet is a fleet of its own namespace on the test hub, its
// manager run in-process with leader election, and the test member
// registered by "register" under a name of its own, with a Propagation
// whose copy is in the member.
type uninstallFleet struct {
	hub, member client.Client
	ns, name    string
	p           *fleetv1alpha1.Propagation
	// flags reach the hub, the fleet namespace and the member, through a
	// context named as the member.
	flags []string
	stop  func()
}

func startUninstallFleet(t *testing.T) *uninstallFleet {
	t.Helper()
	hub, member, ns, flags := enrollSetup(t)
	f := &uninstallFleet{hub: hub, member: member, ns: ns, name: suite.Name("uninstall")}
	memberKubeconfig, err := controlplane.AdminKubeconfig(testMember, "uninstall-test")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(memberKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[f.name] = kc.Contexts[kc.CurrentContext]
	delete(kc.Contexts, kc.CurrentContext)
	kc.CurrentContext = f.name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	f.flags = []string{flags[0], "--namespace=" + ns, "--member-kubeconfig=" + writeTemp(t, "members.kubeconfig", data)}

	f.stop = startUninstallManager(t, flags[0], ns)

	res := runEnroll(t, append([]string{"register", f.name, "--permissions=cluster-admin", "--wait=1m"}, f.flags[0], f.flags[1], flags[1])...)
	if res.code != 0 {
		t.Fatalf("register: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	f.p = f.propagate(t)
	return f
}

// propagate creates, in a new hub namespace, ConfigMap settings and a
// Propagation of it to every member, claimed for the fleet already so
// that no other fleet of the hub takes it, and waits for its copy.
func (f *uninstallFleet) propagate(t *testing.T) *fleetv1alpha1.Propagation {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "uninstall-"}}
	if err := f.hub.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "settings"}, Data: map[string]string{"color": "blue"}}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "settings", Labels: map[string]string{fleetv1alpha1.FleetLabel: f.ns}},
		Spec:       fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}},
	}
	for _, obj := range []client.Object{cm, p} {
		if err := f.hub.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the copy of "+ns.Name+"/settings in the member", func() bool {
		return f.member.Get(t.Context(), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}) == nil
	})
	return p
}

// registerDown registers, in the fleet, a member that never answers.
func (f *uninstallFleet) registerDown(t *testing.T) string {
	t.Helper()
	name := suite.Name("uninstall-down")
	kc := []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://` + closedAddress(t) + `"}}]
users: [{name: u, user: {token: uninstall-test-token-of-a-member-that-never-answers}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": kc},
	}
	if err := f.hub.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return name
}

// uninstall runs "fleet-manager uninstall" with the fleet's flags and
// args.
func (f *uninstallFleet) uninstall(t *testing.T, args ...string) cliResult {
	t.Helper()
	root := newRootCommand(func(runFlags) error { return nil })
	root.SetContext(t.Context())
	var stdout, stderr bytes.Buffer
	code := executeRoot(root, append(append([]string{"uninstall", "--timeout=1m"}, f.flags...), args...), &stdout, &stderr)
	res := cliResult{stdout.String(), stderr.String(), code}
	t.Logf("uninstall %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, res.code, res.stdout, res.stderr)
	return res
}

// copyOf returns the copy of the fleet's Propagation's ConfigMap in the
// member, nil if there is none.
func (f *uninstallFleet) copyOf(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := f.member.Get(t.Context(), client.ObjectKey{Namespace: f.p.Namespace, Name: "settings"}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// checkGone fails t for each object of the hub in objs that is still
// there, terminating or not.
func (f *uninstallFleet) checkGone(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		switch {
		case err == nil && obj.GetDeletionTimestamp() != nil:
			t.Errorf("%T %s is stuck Terminating, held by %v", obj, client.ObjectKeyFromObject(obj), obj.GetFinalizers())
		case err == nil:
			t.Errorf("%T %s is still there", obj, client.ObjectKeyFromObject(obj))
		case !apierrors.IsNotFound(err):
			t.Fatal(err)
		}
	}
}

func (f *uninstallFleet) identity() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fleetv1alpha1.FleetIdentityName}}
}

func (f *uninstallFleet) registration(name string) (*corev1.Secret, *fleetv1alpha1.MemberCluster) {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}},
		&fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestUninstallLeavesNothing: with the manager running, uninstall deletes
// the fleet's Propagation and waits until the manager removed its copy
// and let it go; a member that is down and owes the removal stays
// registered, and uninstall fails naming it, until --leave-owed; then the
// registrations, MemberClusters and what register made in the reachable
// member are gone, and nothing is left Terminating. The fleet's identity
// stays while the member that is down may hold objects it proves ours.
func TestUninstallLeavesNothing(t *testing.T) {
	f := startUninstallFleet(t)
	down := f.registerDown(t)
	poll.Until(t, "MemberCluster "+down, func() bool {
		return f.hub.Get(t.Context(), client.ObjectKey{Name: down}, &fleetv1alpha1.MemberCluster{}) == nil
	})

	res := f.uninstall(t, "--dry-run")
	if res.code != 0 || !strings.Contains(res.stdout, "hub: Propagation "+f.p.Namespace+"/settings would be deleted") {
		t.Errorf("uninstall --dry-run: exit %d, stdout:\n%s", res.code, res.stdout)
	}
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.p), f.p); err != nil || f.p.DeletionTimestamp != nil {
		t.Fatalf("uninstall --dry-run deleted the Propagation: %v", err)
	}

	res = f.uninstall(t)
	if res.code != 1 || !strings.Contains(res.stderr, "kept registered, not Ready and owing removals of copies: "+down) || !strings.Contains(res.stderr, "--leave-owed") {
		t.Errorf("uninstall with a member down that owes a removal: exit %d, stderr:\n%s", res.code, res.stderr)
	}
	if c := f.copyOf(t); c != nil && c.DeletionTimestamp == nil {
		t.Errorf("the copy is still in the member: %v", c.Labels)
	}
	secret, mc := f.registration(f.name)
	f.checkGone(t, f.p, secret, mc)
	if left := labelledInMember(t, f.member); len(left) > 0 {
		t.Errorf("what register made is still in the member: %v", left)
	}
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.identity()), f.identity()); err != nil {
		t.Errorf("the fleet's identity went while %s owes removals: %v", down, err)
	}

	res = f.uninstall(t, "--leave-owed")
	if res.code != 0 || !strings.Contains(res.stderr, "Warning: member "+down) || !strings.Contains(res.stdout, "kubectl delete -k deploy/") {
		t.Errorf("uninstall --leave-owed: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	downSecret, downMC := f.registration(down)
	f.checkGone(t, downSecret, downMC, f.p)
	// What register made in the member that is down, if anything, still
	// carries the fleet's identity: the hub keeps it, to prove it.
	if !strings.Contains(res.stdout, "fleet-identity kept: "+down+" may still hold objects labelled") {
		t.Errorf("uninstall --leave-owed does not say why it keeps the fleet's identity:\n%s", res.stdout)
	}
}

// TestUninstallKeepCopies: with --keep-copies, the copy stays in the
// member as a plain object, no longer labelled a copy, and nothing on the
// hub holds a finalizer.
func TestUninstallKeepCopies(t *testing.T) {
	f := startUninstallFleet(t)
	res := f.uninstall(t, "--keep-copies")
	if res.code != 0 {
		t.Errorf("uninstall --keep-copies: exit %d", res.code)
	}
	secret, mc := f.registration(f.name)
	f.checkGone(t, f.p, secret, mc, f.identity())
	c := f.copyOf(t)
	switch {
	case c == nil || c.DeletionTimestamp != nil:
		t.Error("the copy was deleted")
	case c.Labels[fleetv1alpha1.PropagationLabel] != "" || c.Labels[fleetv1alpha1.FleetIDLabel] != "":
		t.Errorf("the copy kept is still labelled a copy: %v", c.Labels)
	}
}

// TestUninstallForceWhenTheManagerIsGone: a Propagation deleted after the
// manager stopped stays Terminating; uninstall refuses to start without a
// manager, and --force refuses while one runs. Without one, --force lets
// the Propagation go and removes the registration, touching no member: the
// copy stays, and the fleet's identity, which proves it the fleet's.
func TestUninstallForceWhenTheManagerIsGone(t *testing.T) {
	f := startUninstallFleet(t)
	if res := f.uninstall(t, "--force"); res.code != 1 || !strings.Contains(res.stderr, "a manager of fleet "+f.ns+" runs") {
		t.Errorf("uninstall --force with a manager running: exit %d, stderr:\n%s", res.code, res.stderr)
	}
	f.stop()
	if err := f.hub.Delete(t.Context(), f.p); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.p), f.p); err != nil || f.p.DeletionTimestamp == nil {
		t.Fatalf("the Propagation is not Terminating: %v", err)
	}

	res := f.uninstall(t)
	if res.code != 1 || !strings.Contains(res.stderr, "no manager of fleet "+f.ns+" is running") {
		t.Errorf("uninstall without a manager: exit %d, stderr:\n%s", res.code, res.stderr)
	}
	res = f.uninstall(t, "--force")
	if res.code != 0 || !strings.Contains(res.stdout, "its copies stay in the members it selected") {
		t.Errorf("uninstall --force: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	secret, mc := f.registration(f.name)
	f.checkGone(t, f.p, secret, mc)
	if c := f.copyOf(t); c == nil || c.DeletionTimestamp != nil {
		t.Error("uninstall --force deleted the copy in the member")
	}
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.identity()), f.identity()); err != nil {
		t.Errorf("uninstall --force deleted the fleet's identity: %v", err)
	}
}

// startUninstallManager runs a leader-electing manager of fleet ns on the
// hub of hubFlag, in-process, and returns what stops it (also at cleanup).
func startUninstallManager(t *testing.T, hubFlag, ns string) func() {
	t.Helper()
	return startInProcess(t, hubFlag, "--namespace="+ns, "--leader-elect", "--state-dir="+t.TempDir(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
}

// startInProcess runs "fleet-manager run" with args in-process, and
// returns what stops it, which also runs at cleanup.
func startInProcess(t *testing.T, args ...string) func() {
	t.Helper()
	runFlags, err := parseRunFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	runFlags.skipNameValidation = true
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, runFlags, logr.Discard()) }()
	stop := func() {
		if cancel == nil {
			return
		}
		cancel()
		cancel = nil
		if err := <-stopped; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
