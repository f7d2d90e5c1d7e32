package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// hubPropagation creates, in a new hub namespace, ConfigMap settings and
// a Propagation of it, and of more, to every member.
func hubPropagation(t *testing.T, hub client.Client, more ...fleetv1alpha1.ResourceSelector) *fleetv1alpha1.Propagation {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-"}}
	if err := hub.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "settings"}, Data: map[string]string{"color": "blue"}}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "settings"},
		Spec: fleetv1alpha1.PropagationSpec{Resources: append([]fleetv1alpha1.ResourceSelector{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"},
		}, more...)},
	}
	for _, obj := range []client.Object{cm, p} {
		if err := hub.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestRegisterFleetDryRunShowsTheRules(t *testing.T) {
	hub, member, _, flags := enrollSetup(t)
	hubPropagation(t, hub, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "Node", Name: "n"})
	res := runEnroll(t, append([]string{"register", "reg-fleet", "--permissions=fleet", "--dry-run"}, flags...)...)
	for _, line := range []string{
		"member: ClusterRole fleet-manager:fleet created (dry run)\n  may get, create namespaces\n  may get, list clusterproperties.about.k8s.io\n",
		"  may get, list, watch, create, update, patch, delete configmaps\n",
		"member: ClusterRoleBinding fleet-manager:fleet created (dry run)",
	} {
		if res.code != 0 || !strings.Contains(res.stdout, line) {
			t.Errorf("register --dry-run: exit %d, no %q in\nstdout:\n%s\nstderr:\n%s", res.code, line, res.stdout, res.stderr)
		}
	}
	for _, line := range []string{"Warning: Node (v1): it is cluster-scoped", "Propagation(s) copy now: run fleet-manager grants sync when they change"} {
		if !strings.Contains(res.stderr, line) {
			t.Errorf("register --dry-run: no %q in stderr:\n%s", line, res.stderr)
		}
	}
	if left := labelledInMember(t, member); len(left) > 0 {
		t.Errorf("register --dry-run created %v in the member", left)
	}
}

func TestRegisterWarnsWhatBuiltinPresetsAllow(t *testing.T) {
	_, _, _, flags := enrollSetup(t)
	for preset, want := range map[string]string{
		"edit":          "Warning: --permissions=edit without --namespaces is cluster-admin in disguise: it lets the manager read every Secret, and create tokens for and impersonate any ServiceAccount",
		"cluster-admin": "Warning: --permissions=cluster-admin lets the fleet's manager do everything in the member",
		"view":          "Warning: --permissions=view only reads: Propagations to this member will fail Forbidden",
	} {
		res := runEnroll(t, append([]string{"register", "reg-x", "--permissions=" + preset, "--dry-run"}, flags...)...)
		if res.code != 0 || !strings.Contains(res.stderr, want) {
			t.Errorf("register --permissions=%s: exit %d, stderr:\n%s\nwant %q", preset, res.code, res.stderr, want)
		}
	}
}

// TestAFleetMemberTakesAPropagationAtOnce: registered with the fleet
// preset, a member receives a Propagation without a single failure, its
// namespace created; unregister --cleanup then keeps its copy with
// --keep-copies, and deletes it without.
func TestAFleetMemberTakesAPropagationAtOnce(t *testing.T) {
	hub, member, ns, flags := enrollSetup(t)
	p := hubPropagation(t, hub)
	startInProcess(t, flags[0], "--namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address=0")

	res := runEnroll(t, append([]string{"register", "reg-fleet", "--permissions=fleet", "--wait=1m"}, flags...)...)
	if res.code != 0 {
		t.Fatalf("register: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	failed := ""
	poll.Until(t, "Propagation "+p.Namespace+"/settings applied to reg-fleet", func() bool {
		if err := hub.Get(t.Context(), client.ObjectKeyFromObject(p), p); err != nil {
			return false
		}
		for _, m := range p.Status.Members {
			if m.Name == "reg-fleet" && m.Result == fleetv1alpha1.ResultFailed && failed == "" {
				failed = m.Reason + ": " + m.Message
			}
		}
		return p.Status.Applied == 1
	})
	if failed != "" {
		t.Errorf("the member failed before it applied: %s", failed)
	}
	copyKey := client.ObjectKey{Namespace: p.Namespace, Name: "settings"}
	if err := member.Get(t.Context(), copyKey, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the copy: %v", err)
	}

	res = runEnroll(t, append([]string{"unregister", "reg-fleet", "--cleanup", "--keep-copies", "--wait=1m"}, flags...)...)
	want := "member: ConfigMap " + p.Namespace + "/settings kept: --keep-copies; it is still labelled a copy of Propagation " + p.Namespace + "/settings\n"
	if res.code != 0 || !strings.Contains(res.stdout, want) || member.Get(t.Context(), copyKey, &corev1.ConfigMap{}) != nil {
		t.Errorf("unregister --cleanup --keep-copies: exit %d\nstdout:\n%s\nstderr:\n%s\nwant %q", res.code, res.stdout, res.stderr, want)
	}
	res = runEnroll(t, append([]string{"unregister", "reg-fleet", "--cleanup", "--wait=0"}, flags...)...)
	want = "member: ConfigMap " + p.Namespace + "/settings deleted: a copy of Propagation " + p.Namespace + "/settings\n"
	if res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Errorf("unregister --cleanup: exit %d\nstdout:\n%s\nstderr:\n%s\nwant %q", res.code, res.stdout, res.stderr, want)
	}
	var cm corev1.ConfigMap
	if err := member.Get(t.Context(), copyKey, &cm); err == nil && cm.DeletionTimestamp == nil {
		t.Error("the copy is still in the member")
	}
}
