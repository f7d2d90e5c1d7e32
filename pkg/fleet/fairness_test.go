package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// queueDepth reads fleet_queue_depth of one controller and cluster.
func queueDepth(t *testing.T, controller, clusterName string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fleet_queue_depth" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "controller") == controller && label(m, "cluster") == clusterName {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestQuietMemberIsNotStarvedByANoisyOne(t *testing.T) {
	const backlog = 3000
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []fleet.Request
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		<-gate
		mu.Lock()
		defer mu.Unlock()
		order = append(order, req)
		return reconcile.Result{}, nil
	})
	f.WatchConfigMaps(t, "flood", "flood", fleet.Members, reconciler)
	f.Register(t, "noisy", suite.Kubeconfigs[0])
	f.Register(t, "quiet", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "noisy", "quiet")

	fleettest.CreateNamespace(t, suite.MemberClients[0], "flood")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < backlog; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "flood", Name: fmt.Sprintf("noise-%04d", i)}}
				if err := suite.MemberClients[0].Create(t.Context(), cm); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// One request is with the held worker; the rest are queued.
	poll.Until(t, "the noisy backlog queued", func() bool { return queueDepth(t, "flood", "noisy") >= backlog-1 })
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "flood", "whisper")
	poll.Until(t, "the quiet request queued", func() bool { return queueDepth(t, "flood", "quiet") == 1 })
	close(gate)

	quiet := fleettest.Request("quiet", "flood", "whisper")
	poll.Until(t, "the quiet request reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(order, quiet)
	})
	mu.Lock()
	defer mu.Unlock()
	position := slices.Index(order, quiet)
	t.Logf("the quiet request was reconciled %d-th, behind a noisy backlog of %d", position+1, backlog)
	if position > backlog/2 {
		t.Fatalf("the quiet request was reconciled %d-th: it waited behind most of the noisy backlog", position+1)
	}
}
