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
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestStaleByLease: a member whose last probe is recent is Unknown while
// no manager holds its fleet's Lease, and as recorded while one does.
func TestStaleByLease(t *testing.T) {
	needAPIServers(t)
	c, hubFlag := hubClient(t)
	ns, now := readyMemberOfFleet(t, c, "lease", "", func(st *fleetv1alpha1.MemberClusterStatus, now time.Time) {
		st.LastProbeTime = ptrTime(now.Add(-20 * time.Second))
	})
	clk := clocktesting.NewFakeClock(now)
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
	// Its Secret's namespace is not the generated fleet namespace, which
	// the goldens cannot hold.
	ns, now := readyMemberOfFleet(t, c, "shard", "fleet-system", func(st *fleetv1alpha1.MemberClusterStatus, now time.Time) {
		st.Replica = "fleet-manager-7d9f-b2x4q"
		st.LastProbeTime = ptrTime(now.Add(-time.Hour))
	})
	clk := clocktesting.NewFakeClock(now)
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

// readyMemberOfFleet creates MemberCluster <prefix>-east of a new fleet
// namespace, labelled <getTestLabel>=prefix, its Secret in secretNS (the
// fleet namespace if ""), and records it Ready for an hour, probed
// successfully, edited by edit. It returns the fleet namespace and the
// test's now, two hours after the member was created.
func readyMemberOfFleet(t *testing.T, c client.Client, prefix, secretNS string, edit func(st *fleetv1alpha1.MemberClusterStatus, now time.Time)) (*corev1.Namespace, time.Time) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-fleet-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	if secretNS == "" {
		secretNS = ns.Name
	}
	mc := newMember(prefix+"-east", prefix, fleetv1alpha1.SecretReference{Namespace: secretNS, Name: prefix + "-east", Format: fleetv1alpha1.FormatNative})
	mc.Labels[fleetv1alpha1.FleetLabel] = ns.Name
	createMember(t, c, mc)
	now := mc.CreationTimestamp.Add(2 * time.Hour)
	st := fleetv1alpha1.MemberClusterStatus{
		State:      fleetv1alpha1.MemberStateReady,
		StateSince: ptrTime(now.Add(-time.Hour)),
		Conditions: []metav1.Condition{
			condition(fleetv1alpha1.ConditionReady, metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "", now.Add(-time.Hour)),
			condition(fleetv1alpha1.ConditionHealthy, metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "", now.Add(-time.Hour)),
		},
		ServerVersion:   "v1.37.1",
		LastProbeResult: fleetv1alpha1.ProbeResultSuccess,
	}
	edit(&st, now)
	setStatus(t, c, mc, st)
	return ns, now
}
