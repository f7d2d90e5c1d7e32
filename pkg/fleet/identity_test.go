package fleet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// fleetID waits up to 30 s for f's manager to know its fleet's identity.
func fleetID(t *testing.T, f *runningFleet) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	id, err := f.mgr.FleetID(ctx)
	if err != nil {
		t.Fatalf("fleet %s: no identity: %v", f.namespace, err)
	}
	return id
}

func TestReplicasShareTheFleetsIdentityAcrossRestarts(t *testing.T) {
	ns := mclNamespace(t)
	a, b := newFleetOn(t, ns, nil), newFleetOn(t, ns, nil)
	a.start(t)
	b.start(t) // both race to create it
	id := fleetID(t, a)
	if other := fleetID(t, b); other != id {
		t.Fatalf("two replicas of one fleet have the identities %q and %q", id, other)
	}
	cm := &corev1.ConfigMap{}
	if err := hubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[fleetv1alpha1.FleetIdentityKey] != id || cm.Immutable == nil || !*cm.Immutable {
		t.Fatalf("identity ConfigMap %v (immutable %v): want the immutable id %q", cm.Data, cm.Immutable, id)
	}
	a.stop(t)
	b.stop(t)

	again := newFleetOn(t, ns, nil)
	again.start(t)
	if got := fleetID(t, again); got != id {
		t.Fatalf("after a restart the fleet's identity is %q, was %q", got, id)
	}
	if other := fleetID(t, startFleetOnNewNamespace(t)); other == id {
		t.Fatalf("another fleet namespace has the same identity %q", id)
	}
}

func startFleetOnNewNamespace(t *testing.T) *runningFleet {
	f := newFleetOn(t, mclNamespace(t), nil)
	f.start(t)
	return f
}

func TestAnInvalidIdentityIsReportedNotReplaced(t *testing.T) {
	ns := mclNamespace(t)
	createNamespace(t, hubClient, ns)
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName},
		Data:       map[string]string{fleetv1alpha1.FleetIdentityKey: "not a label value!"},
	}
	if err := hubClient.Create(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	f := newFleetOn(t, ns, nil)
	f.start(t)
	poll.Until(t, "the invalid identity reported", func() bool {
		return f.logs.find("Reading the fleet's identity", "holds no valid fleet identity")
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if id, err := f.mgr.FleetID(ctx); err == nil {
		t.Fatalf("the fleet took %q for its identity", id)
	}
	cm := &corev1.ConfigMap{}
	if err := hubClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: fleetv1alpha1.FleetIdentityName}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[fleetv1alpha1.FleetIdentityKey] != bad.Data[fleetv1alpha1.FleetIdentityKey] {
		t.Fatalf("the manager replaced the fleet's identity: %v", cm.Data)
	}
}
