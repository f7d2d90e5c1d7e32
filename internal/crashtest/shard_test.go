package crashtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const (
	shardFleetNS = "crash-shard"
	shardTeam    = "shard-team"
	// shardLease is the replicas' Lease duration (whole seconds).
	shardLease = 3 * time.Second
)

// startReplica starts fleet-manager run --shard as replica name.
func startReplica(t *testing.T, hubKubeconfig, name string) *manager {
	t.Helper()
	m := startRun(t, name, "--hub-kubeconfig="+hubKubeconfig, "--namespace="+shardFleetNS, "--state-dir="+t.TempDir(),
		"--shard", "--replica-name="+name, fmt.Sprintf("--shard-lease-duration=%s", shardLease), "--shard-renew-deadline=2s", "--shard-retry-period=250ms")
	t.Cleanup(func() {
		if !m.Exited() {
			m.kill(t)
		}
	})
	return m
}

// TestKilledReplicaHandsOver runs three fleet-manager processes sharing a
// fleet of three members and a Propagation, SIGKILLs the replica that owns
// the first member, and changes the propagated object: once the killed
// replica's Lease expires another replica owns the member, its
// MemberCluster is Ready there, and its copy gets the change. The others
// then stop with SIGTERM, cleanly.
func TestKilledReplicaHandsOver(t *testing.T) {
	suite.Need(t)
	ctx := t.Context()
	hubKubeconfig := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := os.WriteFile(hubKubeconfig, suite.AdminKubeconfig(t, suite.Hub, "crashtest-shard"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{shardFleetNS, shardTeam} {
		if err := suite.HubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	var members []string
	for i := range memberCount {
		name := fmt.Sprintf("shard-member-%d", i)
		members = append(members, name)
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: shardFleetNS, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true", "shard-test": "yes"}},
			Data:       map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[i]},
		}
		if err := suite.HubClient.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: shardTeam, Name: "settings"}, Data: map[string]string{"v": "1"}}
	if err := suite.HubClient.Create(ctx, settings); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: shardTeam, Name: "settings"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"shard-test": "yes"})},
		},
	}
	if err := suite.HubClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	replicas := map[string]*manager{}
	for _, name := range []string{"replica-0", "replica-1", "replica-2"} {
		replicas[name] = startReplica(t, hubKubeconfig, name)
	}
	owners := func() map[string]string {
		out := map[string]string{}
		for _, name := range members {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := suite.HubClient.Get(ctx, client.ObjectKey{Name: name}, mc); err == nil && mc.Status.State == fleetv1alpha1.MemberStateReady {
				out[name] = mc.Status.Replica
			}
		}
		return out
	}
	copiesAre := func(v string) bool {
		for _, c := range suite.MemberClients {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: shardTeam, Name: "settings"}, cm); err != nil || cm.Data["v"] != v {
				return false
			}
		}
		return true
	}
	poll.Until(t, "every member Ready on a replica, its copy applied", func() bool {
		o := owners()
		for _, name := range members {
			if replicas[o[name]] == nil {
				return false
			}
		}
		return copiesAre("1")
	})

	victim := owners()[members[0]]
	replicas[victim].kill(t)
	killed := time.Now()
	delete(replicas, victim)
	settings.Data["v"] = "2"
	if err := suite.HubClient.Update(ctx, settings); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, members[0]+" Ready on another replica, its copy changed", func() bool {
		return replicas[owners()[members[0]]] != nil && copiesAre("2")
	})
	t.Logf("%s moved from killed %s to %s, its copy changed, %s after the kill (Lease %s)", members[0], victim, owners()[members[0]], time.Since(killed).Round(time.Millisecond), shardLease)

	for name, m := range replicas {
		m.stop(t)
		if out := m.output(t); slices.ContainsFunc(strings.Split(out, "\n"), unexpectedError) {
			t.Errorf("replica %s logged an error:\n%s", name, out)
		}
	}
}

// unexpectedError reports whether a replica's log line is an error, but
// for client-go's report of a body cut short because the member's
// connections were closed, or its reconcile's context cancelled, as the
// member moved to another replica (the replicas may hand members around
// as they start).
func unexpectedError(line string) bool {
	return strings.Contains(line, `"level":"error"`) &&
		!(strings.Contains(line, "Unexpected error when reading response body") &&
			(strings.Contains(line, "member connection closing") || strings.Contains(line, `"error":"context canceled"`)))
}
