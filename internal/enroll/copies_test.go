package enroll_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

func TestRemoveCopies(t *testing.T) {
	hub, member, ns := clients(t)
	id, err := registry.FleetID(t.Context(), hub, hub, ns)
	if err != nil {
		t.Fatal(err)
	}
	memberNamespaces(t, member, "a")
	p := propagate(t, hub, "a", "app", "v1", "ConfigMap")
	p.Status.Kinds = []fleetv1alpha1.KindReference{{APIVersion: "v1", Kind: "Secret"}}
	if err := hub.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	copyOf := func(fleetID, propagation string) map[string]string {
		l := map[string]string{fleetv1alpha1.FleetIDLabel: fleetID}
		if propagation != "" {
			l[fleetv1alpha1.PropagationLabel] = propagation
		}
		return l
	}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "copy", Labels: copyOf(id, "app")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "copy", Labels: copyOf(id, "old")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "other-fleets", Labels: copyOf("another-id", "app")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "no-propagation", Labels: copyOf(id, "")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "unlabelled"}},
	}
	for _, obj := range objs {
		if err := member.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = member.Delete(context.Background(), obj) })
	}
	described := func(changes []enroll.Change, op string) []string {
		var s []string
		for _, c := range changes {
			if c.Op == op {
				s = append(s, enroll.Describe(c.Object))
			}
		}
		slices.Sort(s)
		return s
	}
	want := []string{"ConfigMap a/copy", "Secret a/copy"}
	for _, keep := range []bool{true, false} {
		changes, warnings, err := enroll.RemoveCopies(t.Context(), memberEnv.Config, hub, id, keep)
		op := map[bool]string{true: "kept", false: "deleted"}[keep]
		if err != nil || len(warnings) > 0 || !slices.Equal(described(changes, op), want) || len(changes) != len(want) {
			t.Fatalf("keep %v: %v %q, changes %+v", keep, err, warnings, changes)
		}
	}
	for _, obj := range objs {
		err := member.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		if gone := err != nil; gone != (obj.GetName() == "copy") {
			t.Errorf("%s: %v", enroll.Describe(obj), err)
		}
	}
}
