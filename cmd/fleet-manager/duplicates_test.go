package main

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestAllowDuplicateClustersEngagesEveryName registers the member's API
// server under two names. run refuses the younger one as DuplicateCluster,
// and records the cluster's identity on both MemberClusters; a run with the
// hidden --allow-duplicate-clusters then engages both names, despite those
// records, as the benches that register one server under many names need.
func TestAllowDuplicateClustersEngagesEveryName(t *testing.T) {
	needAPIServers(t)
	ctx := t.Context()
	admin, hub := hubClient(t)
	const ns = "duplicates"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	memberKubeconfig, err := controlplane.AdminKubeconfig(testMember, "duplicates-test")
	if err != nil {
		t.Fatal(err)
	}
	// The second Secret is the younger by its time or, within a second,
	// by its name.
	names := []string{"dup-first", "dup-second"}
	for _, name := range names {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: memberKubeconfig},
		}
		if err := admin.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, obj := range []client.Object{secret, &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}} {
				if err := admin.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
					t.Error(err)
				}
			}
		})
	}
	ready := func(name string) (*metav1.Condition, string) {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
			return nil, ""
		}
		return meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionReady), mc.Status.ClusterID
	}
	runUntilStopped := func(extra ...string) (stop func()) {
		args := append([]string{hub, "--namespace=" + ns, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--state-dir=" + t.TempDir()}, extra...)
		f, err := parseRunFlags(args, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		f.skipNameValidation = true
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- run(runCtx, f, logr.Discard()) }()
		return func() {
			cancel()
			if err := <-stopped; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}

	stop := runUntilStopped()
	poll.Until(t, "by default, "+names[0]+" Ready and "+names[1]+" refused as its duplicate, both recording the cluster", func() bool {
		first, firstID := ready(names[0])
		second, secondID := ready(names[1])
		return first != nil && first.Status == metav1.ConditionTrue && firstID != "" &&
			second != nil && second.Reason == registry.ReasonDuplicateCluster && secondID == firstID
	})
	stop()

	stop = runUntilStopped("--" + allowDuplicateClustersFlag)
	defer stop()
	poll.Until(t, "with --"+allowDuplicateClustersFlag+", both names Ready", func() bool {
		for _, name := range names {
			if c, _ := ready(name); c == nil || c.Status != metav1.ConditionTrue {
				return false
			}
		}
		return true
	})
}
