package membercluster_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestOneClusterUnderTwoNamesIsEngagedOnce (issue 38): a member API
// server registered a second time, under another name and through
// another URL, is refused as DuplicateCluster naming the first name, and
// is never engaged, so that the copy of a Propagation selecting only the
// first name stays in it; once the first registration is removed, the
// second name engages.
func TestOneClusterUnderTwoNamesIsEngagedOnce(t *testing.T) {
	t.Parallel()
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	var p *fleetv1alpha1.Propagation
	t.Cleanup(func() { // once the manager stopped
		if p != nil {
			releasePropagation(t, p)
		}
	})
	f := suite.StartFleet(t, fleettest.FleetOptions{
		Configure: func(o *fleet.Options) {
			fleettest.QuickHealth(o)
			o.AllowDuplicateClusters = false
		},
		Setup: func(m *fleet.Manager) error {
			if err := membercluster.Add(m, membercluster.Options{}); err != nil {
				return err
			}
			return propagation.Add(m, propagation.Options{Journal: j})
		},
	})
	team, first, second := suite.Name("dup-team"), suite.Name("dup-a"), suite.Name("dup-b")
	fleettest.CreateNamespace(t, suite.HubClient, team)
	fleettest.CreateNamespace(t, suite.MemberClients[0], team)

	f.Register(t, first, suite.Kubeconfigs[0], map[string]string{"selected": team})
	suite.WaitMemberCluster(t, first, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "web", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"v": "1"}}
	if err := suite.HubClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	p = &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"selected": team})},
		},
	}
	if err := suite.HubClient.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	member := suite.MemberClients[0]
	copyKey := types.NamespacedName{Namespace: team, Name: "web"}
	waitCopy(t, member, copyKey, "1")

	list := &corev1.ConfigMapList{}
	if err := member.List(t.Context(), list, client.InNamespace(team)); err != nil {
		t.Fatal(err)
	}
	wcl, err := client.NewWithWatch(suite.Members[0].Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wcl.Watch(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(team), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The same API server, through another URL.
	kc, _ := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.Register(t, second, kc)
	// Evidence the second name was settled: refused, or (without the
	// fix) engaged; then a change of the object, reconciled in every
	// member the Propagation reaches.
	suite.WaitMemberCluster(t, second, "refused or Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		ready := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionReady)
		return mc.Status.State == fleetv1alpha1.MemberStateReady || (ready != nil && ready.Reason == registry.ReasonDuplicateCluster)
	})
	cm.Data["v"] = "2"
	if err := suite.HubClient.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	waitCopy(t, member, copyKey, "2")
	for drained := false; !drained; {
		select {
		case e := <-w.ResultChan():
			if e.Type == watch.Deleted {
				t.Fatalf("the copy was deleted from the member while registered under two names")
			}
		default:
			drained = true
		}
	}

	mc := suite.WaitMemberCluster(t, second, "refused as a duplicate", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStatePending
	})
	ready := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != registry.ReasonDuplicateCluster || !strings.Contains(ready.Message, first) {
		t.Fatalf("Ready condition %+v, want False, %s, naming %s", ready, registry.ReasonDuplicateCluster, first)
	}
	firstMC := suite.WaitMemberCluster(t, first, "its cluster ID", func(mc *fleetv1alpha1.MemberCluster) bool { return mc.Status.ClusterID != "" })
	if mc.Status.ClusterID != firstMC.Status.ClusterID {
		t.Fatalf("cluster IDs %q and %q, want the same", mc.Status.ClusterID, firstMC.Status.ClusterID)
	}
	if fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) != metav1.ConditionTrue {
		t.Fatalf("CredentialsAccepted %s, want True: the kubeconfig is not at fault", fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted))
	}
	poll.Until(t, "a DuplicateCluster Event", func() bool {
		events := stateEvents(t, second)
		return len(events) > 0 && events[len(events)-1].Reason == registry.ReasonDuplicateCluster &&
			events[len(events)-1].Type == corev1.EventTypeWarning && strings.Contains(events[len(events)-1].Note, first)
	})
	if names := f.Manager.ClusterNames(); slices.Contains(names, second) {
		t.Fatalf("%s is engaged: %v", second, names)
	}

	// The first registration goes: the second name takes the cluster.
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: first}}
	if err := suite.HubClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	suite.WaitMemberCluster(t, second, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady && fleettest.Condition(mc, fleetv1alpha1.ConditionReady) == metav1.ConditionTrue
	})
}

// waitCopy waits until the member holds the copy key with data v.
func waitCopy(t *testing.T, member client.Client, key types.NamespacedName, v string) {
	t.Helper()
	poll.Until(t, "the copy "+key.String()+" at v="+v, func() bool {
		cm := &corev1.ConfigMap{}
		return member.Get(t.Context(), key, cm) == nil && cm.Data["v"] == v
	})
}

// releasePropagation removes p, finalizers and all, once the test's
// manager stopped.
func releasePropagation(t *testing.T, p *fleetv1alpha1.Propagation) {
	ctx := context.Background()
	cur := &fleetv1alpha1.Propagation{}
	if err := suite.HubClient.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
		return
	}
	before := cur.DeepCopy()
	cur.Finalizers = nil
	_ = suite.HubClient.Patch(ctx, cur, client.MergeFrom(before))
	_ = client.IgnoreNotFound(suite.HubClient.Delete(ctx, cur))
}
