package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestStaleByLease: a member whose last probe is recent is Unknown while
// no manager holds its fleet's Lease, and as recorded while one does.
func TestStaleByLease(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-fleet-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	mc := newMember("lease-east", "lease", fleetv1alpha1.SecretReference{Namespace: ns.Name, Name: "lease-east", Format: fleetv1alpha1.FormatNative})
	mc.Labels[fleetv1alpha1.FleetLabel] = ns.Name
	createMember(t, c, mc)
	now := mc.CreationTimestamp.Add(2 * time.Hour)
	clk := clocktesting.NewFakeClock(now)
	setStatus(t, c, mc, fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Hour)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-time.Hour)),
		},
		ServerVersion:   "v1.37.1",
		LastProbeTime:   ptrTime(now.Add(-20 * time.Second)),
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	})
	// As a manager stopped with SIGTERM leaves it: released.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: leaderElectionID},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(""),
			LeaseDurationSeconds: ptr.To[int32](1),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-30 * time.Second)},
		},
	}
	if err := c.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}

	res := runCLI(t, nil, clk, "get", "members", "-l", getTestLabel+"=lease", hubFlag)
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("get members: %+v", res)
	}
	checkGolden(t, "members-lease-released.golden", res.stdout)
	res = runCLI(t, nil, clk, "status", "lease-east", hubFlag)
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("status: %+v", res)
	}
	// The times are the test's own, relative to when it runs.
	times := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	checkGolden(t, "status-lease-released.golden", times.ReplaceAllString(strings.ReplaceAll(res.stdout, ns.Name, "FLEET"), "TIME"))

	// Held by a manager that renews it.
	lease.Spec.HolderIdentity = ptr.To("manager-0")
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](15)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-2 * time.Second)}
	if err := c.Update(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, nil, clk, "get", "members", "-l", getTestLabel+"=lease", hubFlag)
	checkGolden(t, "members-lease-held.golden", res.stdout)

	// Held once, by a manager killed 20 s ago.
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-20 * time.Second)}
	if err := c.Update(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, nil, clk, "get", "members", "-l", getTestLabel+"=lease", hubFlag)
	checkGolden(t, "members-lease-released.golden", res.stdout)
}

// TestStaleByReplicaLease: when replicas share the fleet, a member's
// status names its replica, which writes it only on change: it is current
// while that replica holds its own Lease, however old its last probe, and
// Unknown once the replica's Lease is gone. -o wide and status name the
// replica.
func TestStaleByReplicaLease(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shard-fleet-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	mc := newMember("shard-east", "shard", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "shard-east", Format: fleetv1alpha1.FormatNative})
	mc.Labels[fleetv1alpha1.FleetLabel] = ns.Name
	createMember(t, c, mc)
	now := mc.CreationTimestamp.Add(2 * time.Hour)
	clk := clocktesting.NewFakeClock(now)
	setStatus(t, c, mc, fleetv1alpha1.MemberClusterStatus{
		Replica:    "fleet-manager-7d9f-b2x4q",
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Hour)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-time.Hour)),
		},
		ServerVersion:   "v1.37.1",
		LastProbeTime:   ptrTime(now.Add(-time.Hour)),
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	})
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "fleet-manager-7d9f-b2x4q"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("fleet-manager-7d9f-b2x4q_1"),
			LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-2 * time.Second)},
		},
	}
	if err := c.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, nil, clk, "get", "members", "-o", "wide", "-l", getTestLabel+"=shard", hubFlag)
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("get members: %+v", res)
	}
	checkGolden(t, "members-replica-held.golden", res.stdout)

	// The replica is gone.
	if err := c.Delete(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, nil, clk, "get", "members", "-o", "wide", "-l", getTestLabel+"=shard", hubFlag)
	checkGolden(t, "members-replica-gone.golden", res.stdout)
	res = runCLI(t, nil, clk, "status", "shard-east", hubFlag)
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("status: %+v", res)
	}
	times := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	checkGolden(t, "status-replica-gone.golden", times.ReplaceAllString(strings.ReplaceAll(res.stdout, ns.Name, "FLEET"), "TIME"))
}
