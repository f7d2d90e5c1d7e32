package fleettest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/fleettest"
)

// seen records the ConfigMaps a fleet controller reconciled, by cluster.
type seen struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (s *seen) has(cluster, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys[cluster] {
		if k == name {
			return true
		}
	}
	return false
}

// A complete test of a fleet controller against three member clusters: a
// ConfigMap created in each member is reconciled with that member's name.
// It is the example of docs/library.md.
func TestAFleetControllerSeesEveryMember(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	got := &seen{keys: map[string][]string{}}
	f := fleettest.Start(t, fleettest.Options{
		Members: 3,
		Setup: func(m *fleet.Manager) error {
			return fleet.NewControllerManagedBy(m).
				Named("configmaps").
				For(&corev1.ConfigMap{}).
				Complete(fleet.ReconcilerFunc(func(_ context.Context, req fleet.Request) (reconcile.Result, error) {
					got.mu.Lock()
					defer got.mu.Unlock()
					got.keys[req.ClusterName] = append(got.keys[req.ClusterName], req.Name)
					return reconcile.Result{}, nil
				}))
		},
	})
	for _, m := range f.Members {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-" + m.Name}}
		if err := m.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, m := range f.Members {
		for !got.has(m.Name, "from-"+m.Name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's ConfigMap was not reconciled as %s's", m.Name, m.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A member's object is reconciled as that member's only.
	if got.has(f.Members[0].Name, "from-"+f.Members[1].Name) {
		t.Errorf("%s's ConfigMap was reconciled as %s's", f.Members[1].Name, f.Members[0].Name)
	}
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The same test for a multicluster-runtime controller, unchanged from
// what MCR's own providers run, on the fleet's provider.
func TestAMulticlusterRuntimeControllerSeesEveryMember(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	got := &seen{keys: map[string][]string{}}
	f := fleettest.Start(t, fleettest.Options{
		Members: 2,
		MulticlusterRuntime: func(mgr mcmanager.Manager) error {
			return mcbuilder.ControllerManagedBy(mgr).
				Named("mcr-configmaps").
				For(&corev1.ConfigMap{}).
				Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (reconcile.Result, error) {
					got.mu.Lock()
					defer got.mu.Unlock()
					got.keys[string(req.ClusterName)] = append(got.keys[string(req.ClusterName)], req.Name)
					return reconcile.Result{}, nil
				}))
		},
	})
	for _, m := range f.Members {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mcr-" + m.Name}}
		if err := m.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, m := range f.Members {
		for !got.has(m.Name, "mcr-"+m.Name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's ConfigMap was not reconciled as %s's", m.Name, m.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got.has(f.Members[0].Name, "mcr-"+f.Members[1].Name) {
		t.Errorf("%s's ConfigMap was reconciled as %s's", f.Members[1].Name, f.Members[0].Name)
	}
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
}
