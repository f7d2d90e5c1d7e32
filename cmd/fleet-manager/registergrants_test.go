package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestANewKindIsGrantedByGrantsSync: a member registered with
// --permissions=fleet before a Propagation copies PodTemplates fails it
// Forbidden, naming the command that grants it; grants sync --dry-run
// prints the rule and writes nothing; grants sync writes it, and the
// member applies the Propagation within seconds, not after a back-off
// of half a minute.
func TestANewKindIsGrantedByGrantsSync(t *testing.T) {
	hub, member, ns, flags := enrollSetup(t)
	startInProcess(t, flags[0], "--namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	res := runEnroll(t, append([]string{"register", "reg-grants", "--permissions=fleet", "--wait=1m"}, flags...)...)
	if res.code != 0 {
		t.Fatalf("register: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}

	// A Propagation of a kind no Propagation copied when register ran.
	p := hubPropagation(t, hub, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "PodTemplate", Name: "tmpl"})
	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "tmpl"},
		Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}
	if err := hub.Create(t.Context(), tmpl); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Gone before the manager stops, so that no later test's register
		// grants PodTemplates.
		if err := hub.Delete(context.Background(), p); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
		poll.Until(t, "Propagation "+p.Namespace+"/settings gone", func() bool {
			return hub.Get(context.Background(), client.ObjectKeyFromObject(p), &fleetv1alpha1.Propagation{}) != nil
		})
	}()
	entry := func() fleetv1alpha1.MemberPropagationStatus {
		if err := hub.Get(t.Context(), client.ObjectKeyFromObject(p), p); err == nil {
			for _, m := range p.Status.Members {
				if m.Name == "reg-grants" {
					return m
				}
			}
		}
		return fleetv1alpha1.MemberPropagationStatus{}
	}
	poll.Until(t, "reg-grants fails the Propagation Forbidden", func() bool { return entry().Reason == fleetv1alpha1.ReasonForbidden })
	if m, want := entry().Message, " in namespace "+p.Namespace+"; to grant it, run: fleet-manager grants sync reg-grants"; !strings.Contains(m, "forbids the manager to list") || !strings.Contains(m, want) {
		t.Errorf("the member's message %q does not name the fix %q", m, want)
	}

	cfg, err := clientcmd.LoadFromFile(strings.TrimPrefix(flags[1], "--member-kubeconfig="))
	if err != nil {
		t.Fatal(err)
	}
	syncFlags := append([]string{"grants", "sync", "reg-grants", "--member-context=reg-grants=" + cfg.CurrentContext}, flags...)
	res = runEnroll(t, append(syncFlags, "--dry-run")...)
	want := "reg-grants: ClusterRole fleet-manager:fleet configured (dry run)\n  may get, create namespaces\n  may get, list clusterproperties.about.k8s.io\n  may get, list, watch, create, update, patch, delete configmaps, podtemplates\n"
	if res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Fatalf("grants sync --dry-run: exit %d, want %q in\nstdout:\n%s\nstderr:\n%s", res.code, want, res.stdout, res.stderr)
	}
	if entry().Reason != fleetv1alpha1.ReasonForbidden {
		t.Fatalf("grants sync --dry-run granted: %+v", entry())
	}
	res = runEnroll(t, syncFlags...)
	if want := "reg-grants: ClusterRole fleet-manager:fleet configured\n"; res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Fatalf("grants sync: exit %d, want %q in\nstdout:\n%s\nstderr:\n%s", res.code, want, res.stdout, res.stderr)
	}
	granted := time.Now()
	// Members lists only those not Applied and Available: the others
	// are counted.
	poll.Until(t, "reg-grants applies the Propagation", func() bool {
		return entry().Name == "" && p.Status.Applied == 1 && p.Status.ObservedGeneration == p.Generation
	})
	took := time.Since(granted)
	t.Logf("applied %s after grants sync", took.Round(100*time.Millisecond))
	if bound := 15 * time.Second; took > bound {
		t.Errorf("the member applied the Propagation %s after the grant, over %s", took.Round(time.Second), bound)
	}
	if err := member.Get(t.Context(), client.ObjectKeyFromObject(tmpl), &corev1.PodTemplate{}); err != nil {
		t.Errorf("the copy: %v", err)
	}
	res = runEnroll(t, syncFlags...)
	if want := "reg-grants: ClusterRole fleet-manager:fleet unchanged\n"; res.code != 0 || !strings.Contains(res.stdout, want) {
		t.Errorf("grants sync again: exit %d, want %q in\nstdout:\n%s\nstderr:\n%s", res.code, want, res.stdout, res.stderr)
	}
}
