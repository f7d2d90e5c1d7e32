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

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// nothing admits no event: the For watch of a test that is about its
// other watches.
var nothing = predicate.NewPredicateFuncs(func(client.Object) bool { return false })

func (r *recorder) times(req fleet.Request) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, seen := range r.seen {
		if seen == req {
			n++
		}
	}
	return n
}

func TestHubObjectFansOutToEveryEngagedMember(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	key := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("fanout").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(nothing)).
		WatchesFleet(&corev1.ConfigMap{}, fleet.ToEveryMember(f.mgr, key), fleet.InClusters(fleet.Hub), fleet.WithPredicates(inNamespace("fanout"))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "fan-a", kubeconfigs[0])
	f.register(t, "fan-b", kubeconfigs[1])
	gone := f.register(t, "fan-gone", kubeconfigs[0])
	f.waitEngaged(t, "fan-a", "fan-b", "fan-gone")
	if err := hubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "fan-gone disengaged", func() bool { return !slices.Contains(f.mgr.ClusterNames(), "fan-gone") })

	createConfigMap(t, hubClient, "fanout", "announce")
	createConfigMap(t, hubClient, "fanout", "barrier")
	r.waitFor(t, request("fan-a", "fanout", "barrier"), request("fan-b", "fanout", "barrier"))
	for _, member := range []string{"fan-a", "fan-b"} {
		if n := r.times(request(member, "fanout", "announce")); n != 1 {
			t.Errorf("%s got %d requests for the hub object, want 1", member, n)
		}
	}
	if r.has(request("fan-gone", "fanout", "announce")) || r.has(request("", "fanout", "announce")) {
		t.Fatal("a request went to a disengaged member or to the hub")
	}
}

func TestClusterFilterSelectsMembersByLabel(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("eu-only").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(inNamespace("filtered"))).
		WithClusterFilter(fleet.ClusterSelectorFilter(labels.SelectorFromSet(labels.Set{"region": "eu"}))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, region := range map[string]string{"in-eu": "eu", "in-us": "us"} {
		kc := kubeconfigs[0]
		if region == "us" {
			kc = kubeconfigs[1]
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true", "region": region}},
			Data:       map[string][]byte{registry.KubeconfigKey: kc},
		}
		if err := hubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.waitEngaged(t, "in-eu", "in-us")
	createConfigMap(t, memberClients[1], "filtered", "us-object")
	createConfigMap(t, memberClients[0], "filtered", "eu-object")
	r.waitFor(t, request("in-eu", "filtered", "eu-object"))
	if r.has(request("in-us", "filtered", "us-object")) {
		t.Fatal("a member the filter rejects was reconciled")
	}
}

func TestWatchesMetadata(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("metadata").
		For(&corev1.Secret{}, fleet.WithPredicates(nothing)).
		WatchesMetadata(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}, fleet.WithPredicates(inNamespace("metadata"))).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "thin", kubeconfigs[1])
	createConfigMap(t, memberClients[1], "metadata", "light")
	r.waitFor(t, request("thin", "metadata", "light"))
}

func TestReconcileLoggerCarriesTheRequest(t *testing.T) {
	f := startFleet(t)
	done := &recorder{}
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		logf.FromContext(ctx).Info("Reconciling in test")
		return done.Reconcile(ctx, req)
	})
	watchConfigMaps(t, f, "logging", "logging", fleet.Members, reconciler)
	f.register(t, "logged", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "logging", "line")
	done.waitFor(t, request("logged", "logging", "line"))
	if !f.logs.find("Reconciling in test", `"controller"="logging"`, `"cluster"="logged"`, `"namespace"="logging"`, `"name"="line"`, `"reconcileID"=`) {
		t.Fatal("the reconcile logger lacks controller, cluster, namespace, name or reconcileID")
	}
}

// TestRawSourcesAndBuild checks that a fleet controller takes requests
// from a channel that names their clusters, both one given to the builder
// and one added after Build, and that requests for clusters it has not
// engaged are dropped.
func TestRawSourcesAndBuild(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	early, late := make(chan event.TypedGenericEvent[fleet.Request]), make(chan event.TypedGenericEvent[fleet.Request])
	var logged atomic.Bool
	ctrl, err := fleet.NewControllerManagedBy(f.mgr).
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
	f.register(t, "raw-a", kubeconfigs[0])
	f.waitEngaged(t, "raw-a")
	send := func(ch chan event.TypedGenericEvent[fleet.Request], req fleet.Request) {
		select {
		case ch <- event.TypedGenericEvent[fleet.Request]{Object: req}:
		case <-time.After(10 * time.Second):
			t.Fatal("the channel source does not receive")
		}
	}
	send(early, request("nowhere", "raw", "dropped"))
	send(early, request("raw-a", "raw", "early"))
	r.waitFor(t, request("raw-a", "raw", "early"))

	if err := ctrl.Watch(fleet.Channel(late)); err != nil {
		t.Fatal(err)
	}
	send(late, request("raw-a", "raw", "late"))
	r.waitFor(t, request("raw-a", "raw", "late"))
	if r.has(request("nowhere", "raw", "dropped")) {
		t.Error("a request for a cluster the controller never engaged was reconciled")
	}
	if !logged.Load() {
		t.Error("the log constructor given with WithLogConstructor was not used")
	}
}
