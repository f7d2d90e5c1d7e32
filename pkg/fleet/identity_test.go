package fleet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// fleetID waits up to 30 s for f's manager to know its fleet's identity.
func fleetID(t *testing.T, f *fleettest.Fleet) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	id, err := f.Manager.FleetID(ctx)
	if err != nil {
		t.Fatalf("fleet %s: no identity: %v", f.Namespace, err)
	}
	return id
}

func TestReplicasShareTheFleetsIdentityAcrossRestarts(t *testing.T) {
	t.Parallel()
	ns := suite.FleetNamespace(t)
	a, b := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Deferred: true}), suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Deferred: true})
	a.Start(t)
	b.Start(t) // both race to create it
	id := fleetID(t, a)
	if other := fleetID(t, b); other != id {
		t.Fatalf("two replicas of one fleet have the identities %q and %q", id, other)
	}
	cm := &corev1.ConfigMap{}
	if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[fleetv1alpha1.FleetIdentityKey] != id || cm.Immutable == nil || !*cm.Immutable {
		t.Fatalf("identity ConfigMap %v (immutable %v): want the immutable id %q", cm.Data, cm.Immutable, id)
	}
	a.Stop(t)
	b.Stop(t)

	again := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Deferred: true})
	again.Start(t)
	if got := fleetID(t, again); got != id {
		t.Fatalf("after a restart the fleet's identity is %q, was %q", got, id)
	}
	if other := fleetID(t, suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})); other == id {
		t.Fatalf("another fleet namespace has the same identity %q", id)
	}
}

func TestAnInvalidIdentityIsReportedNotReplaced(t *testing.T) {
	t.Parallel()
	ns := suite.FleetNamespace(t)
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName},
		Data:       map[string]string{fleetv1alpha1.FleetIdentityKey: "not a label value!"},
	}
	if err := suite.HubClient.Create(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Deferred: true})
	f.Start(t)
	poll.Until(t, "the invalid identity reported", func() bool {
		return f.Logs.Find("Reading the fleet's identity", "holds no valid fleet identity")
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if id, err := f.Manager.FleetID(ctx); err == nil {
		t.Fatalf("the fleet took %q for its identity", id)
	}
	cm := &corev1.ConfigMap{}
	if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[fleetv1alpha1.FleetIdentityKey] != bad.Data[fleetv1alpha1.FleetIdentityKey] {
		t.Fatalf("the manager replaced the fleet's identity: %v", cm.Data)
	}
}
