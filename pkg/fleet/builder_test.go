package fleet_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// nothing admits no event: the For watch of a test that is about its
// other watches.
var nothing = predicate.NewPredicateFuncs(func(client.Object) bool { return false })

func TestHubObjectFansOutToEveryEngagedMember(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	key := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("fanout").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(nothing)).
		WatchesFleet(&corev1.ConfigMap{}, fleet.ToEveryMember(f.Manager, key), fleet.InClusters(fleet.Hub), fleet.WithPredicates(fleettest.InNamespace("fanout"))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "fan-a", suite.Kubeconfigs[0])
	f.Register(t, "fan-b", suite.Kubeconfigs[1])
	gone := f.Register(t, "fan-gone", suite.Kubeconfigs[0])
	f.WaitEngaged(t, "fan-a", "fan-b", "fan-gone")
	if err := suite.HubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "fan-gone disengaged", func() bool { return !slices.Contains(f.Manager.ClusterNames(), "fan-gone") })

	fleettest.CreateConfigMap(t, suite.HubClient, "fanout", "announce")
	fleettest.CreateConfigMap(t, suite.HubClient, "fanout", "barrier")
	r.WaitFor(t, fleettest.Request("fan-a", "fanout", "barrier"), fleettest.Request("fan-b", "fanout", "barrier"))
	for _, member := range []string{"fan-a", "fan-b"} {
		if n := r.Times(fleettest.Request(member, "fanout", "announce")); n != 1 {
			t.Errorf("%s got %d requests for the hub object, want 1", member, n)
		}
	}
	if r.Has(fleettest.Request("fan-gone", "fanout", "announce")) || r.Has(fleettest.Request("", "fanout", "announce")) {
		t.Fatal("a request went to a disengaged member or to the hub")
	}
}

func TestClusterFilterSelectsMembersByLabel(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("eu-only").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace("filtered"))).
		WithClusterFilter(fleet.ClusterSelectorFilter(labels.SelectorFromSet(labels.Set{"region": "eu"}))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, region := range map[string]string{"in-eu": "eu", "in-us": "us"} {
		kc := suite.Kubeconfigs[0]
		if region == "us" {
			kc = suite.Kubeconfigs[1]
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true", "region": region}},
			Data:       map[string][]byte{registry.KubeconfigKey: kc},
		}
		if err := suite.HubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitEngaged(t, "in-eu", "in-us")
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "filtered", "us-object")
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "filtered", "eu-object")
	r.WaitFor(t, fleettest.Request("in-eu", "filtered", "eu-object"))
	if r.Has(fleettest.Request("in-us", "filtered", "us-object")) {
		t.Fatal("a member the filter rejects was reconciled")
	}
}

func TestWatchesMetadata(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("metadata").
		For(&corev1.Secret{}, fleet.WithPredicates(nothing)).
		WatchesMetadata(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}, fleet.WithPredicates(fleettest.InNamespace("metadata"))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "thin", suite.Kubeconfigs[1])
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "metadata", "light")
	r.WaitFor(t, fleettest.Request("thin", "metadata", "light"))
}

func TestReconcileLoggerCarriesTheRequest(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	done := &fleettest.Recorder{}
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		logf.FromContext(ctx).Info("Reconciling in test")
		return done.Reconcile(ctx, req)
	})
	f.WatchConfigMaps(t, "logging", "logging", fleet.Members, reconciler)
	f.Register(t, "logged", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "logging", "line")
	done.WaitFor(t, fleettest.Request("logged", "logging", "line"))
	if !f.Logs.Find("Reconciling in test", `"controller"="logging"`, `"cluster"="logged"`, `"namespace"="logging"`, `"name"="line"`, `"reconcileID"=`) {
		t.Fatal("the reconcile logger lacks controller, cluster, namespace, name or reconcileID")
	}
}

// TestRawSourcesAndBuild checks that a fleet controller takes requests
// from a channel that names their clusters, both one given to the builder
// and one added after Build, and that requests for clusters it has not
// engaged are dropped.
func TestRawSourcesAndBuild(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	early, late := make(chan event.TypedGenericEvent[fleet.Request]), make(chan event.TypedGenericEvent[fleet.Request])
	var logged atomic.Bool
	ctrl, err := fleet.NewControllerManagedBy(f.Manager).
		Named("raw").
		WatchesRawSource(fleet.Channel(early)).
		WithLogConstructor(func(req *fleet.Request) logr.Logger {
			if req != nil {
				logged.Store(true)
			}
			return logr.Discard()
		}).
		Build(r)
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "raw-a", suite.Kubeconfigs[0])
	f.WaitEngaged(t, "raw-a")
	send := func(ch chan event.TypedGenericEvent[fleet.Request], req fleet.Request) {
		select {
		case ch <- event.TypedGenericEvent[fleet.Request]{Object: req}:
		case <-time.After(10 * time.Second):
			t.Fatal("the channel source does not receive")
		}
	}
	send(early, fleettest.Request("nowhere", "raw", "dropped"))
	send(early, fleettest.Request("raw-a", "raw", "early"))
	r.WaitFor(t, fleettest.Request("raw-a", "raw", "early"))

	if err := ctrl.Watch(fleet.Channel(late)); err != nil {
		t.Fatal(err)
	}
	send(late, fleettest.Request("raw-a", "raw", "late"))
	r.WaitFor(t, fleettest.Request("raw-a", "raw", "late"))
	if r.Has(fleettest.Request("nowhere", "raw", "dropped")) {
		t.Error("a request for a cluster the controller never engaged was reconciled")
	}
	if !logged.Load() {
		t.Error("the log constructor given with WithLogConstructor was not used")
	}
}
