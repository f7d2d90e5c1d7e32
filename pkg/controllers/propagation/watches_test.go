package propagation_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// copiedKinds are 20 namespaced kinds an API server serves without
// controllers: ConfigMap first, ServiceAccount last.
var copiedKinds = []fleetv1alpha1.KindReference{
	{APIVersion: "v1", Kind: "ConfigMap"},
	{APIVersion: "v1", Kind: "Secret"},
	{APIVersion: "v1", Kind: "Service"},
	{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
	{APIVersion: "v1", Kind: "LimitRange"},
	{APIVersion: "v1", Kind: "ResourceQuota"},
	{APIVersion: "v1", Kind: "PodTemplate"},
	{APIVersion: "apps/v1", Kind: "Deployment"},
	{APIVersion: "apps/v1", Kind: "StatefulSet"},
	{APIVersion: "apps/v1", Kind: "DaemonSet"},
	{APIVersion: "apps/v1", Kind: "ReplicaSet"},
	{APIVersion: "batch/v1", Kind: "Job"},
	{APIVersion: "batch/v1", Kind: "CronJob"},
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
	{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
	{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
	{APIVersion: "v1", Kind: "ServiceAccount"},
}

// memberWatches is fleet_propagation_member_watches of member: the
// informers its copy caches run.
func memberWatches(t *testing.T, member string) int {
	t.Helper()
	return int(memberSeries(t, "fleet_propagation_member_watches", member))
}

// memberWatchStarts is fleet_propagation_member_watch_starts_total of
// member: the informers its copy caches started.
func memberWatchStarts(t *testing.T, member string) int {
	t.Helper()
	return int(memberSeries(t, "fleet_propagation_member_watch_starts_total", member))
}

// memberSeries is the value of member's series of family, a gauge or a
// counter, 0 if there is none.
func memberSeries(t *testing.T, family, member string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == member {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// waitWatches waits until member runs want informers for its copies.
func waitWatches(t *testing.T, member string, want int, why string) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(poll.Timeout); ; time.Sleep(10 * time.Millisecond) {
		if got = memberWatches(t, member); got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: member %s runs %d informers, want %d", why, member, got, want)
		}
	}
}

// TestWatchesFollowWhatIsNeeded copies, from each of 50 namespaces, a
// ConfigMap and two more of 20 kinds: a member watches the 3 kinds of
// each namespace (150 informers started, not 50 × 20), one more once a kind is
// added to a Propagation, none of a namespace whose Propagation is
// deleted once its copies are removed, and as many after a restart. It
// reads fleet_propagation_member_watches of a member name of its own.
func TestWatchesFollowWhatIsNeeded(t *testing.T) {
	t.Parallel()
	const member, namespaces = "watcher", 50
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.watchSweep = 100 * time.Millisecond
	f.start(nil)
	teams := make([]string, namespaces)
	for i := range teams {
		teams[i] = suite.Name("watches")
		fleettest.CreateNamespace(t, f.hub.Client, teams[i])
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: teams[i], Name: "web"}, Data: map[string]string{"team": teams[i]}}
		if err := f.hub.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		resources := []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}}
		// Two of the 19 others, in turn: every kind is copied somewhere.
		for _, k := range []int{1 + (2*i)%19, 1 + (2*i+1)%19} {
			resources = append(resources, fleetv1alpha1.ResourceSelector{
				APIVersion: copiedKinds[k].APIVersion, Kind: copiedKinds[k].Kind,
				Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "none"}),
			})
		}
		p := &fleetv1alpha1.Propagation{
			ObjectMeta: metav1.ObjectMeta{Namespace: teams[i], Name: "web"},
			Spec: fleetv1alpha1.PropagationSpec{
				Resources: resources,
				Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod", testFleetLabel: f.namespace})},
			},
		}
		if err := f.hub.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	// Every Propagation is the fleet's before the member comes.
	poll.Until(t, "the fleet claimed every Propagation", func() bool {
		list := &fleetv1alpha1.PropagationList{}
		return f.hub.Client.List(t.Context(), list, client.MatchingLabels{fleetv1alpha1.FleetLabel: f.namespace}) == nil && len(list.Items) == namespaces
	})
	f.register(0, member, map[string]string{"env": "prod"})
	// 50 Propagations converge in a minute on an idle machine: allow more.
	applied := func(what string) {
		t.Helper()
		var waiting []string
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			list := &fleetv1alpha1.PropagationList{}
			if err := f.hub.Client.List(t.Context(), list, client.MatchingLabels{fleetv1alpha1.FleetLabel: f.namespace}); err != nil {
				t.Fatal(err)
			}
			waiting = waiting[:0]
			for _, p := range list.Items {
				// The two kinds that select nothing keep Ready False
				// (NothingSelected): the ConfigMap is applied.
				if p.Status.ObservedGeneration != p.Generation || p.Status.Applied != 1 || !meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationApplied) {
					waiting = append(waiting, fmt.Sprintf("%s (generation %d, observed %d, applied %d, members %+v, conditions %+v)",
						p.Namespace, p.Generation, p.Status.ObservedGeneration, p.Status.Applied, p.Status.Members, p.Status.Conditions))
				}
			}
			if len(waiting) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d Propagations not yet, the first: %s", what, len(waiting), waiting[0])
			}
		}
	}
	applied("every Propagation applied in the member")
	waitWatches(t, member, 3*namespaces, "3 kinds in each namespace")
	// None started beyond those, not even for a while (at engagement).
	if got := memberWatchStarts(t, member); got != 3*namespaces {
		t.Errorf("member %s started %d informers, want %d: one per kind each namespace needs", member, got, 3*namespaces)
	}

	// A kind added to a Propagation is watched: a copy of it deleted in
	// the member is made again.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: teams[0], Name: "web"}}
	if err := f.hub.Client.Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	editPropagationIn(t, f, teams[0], func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ServiceAccount", Name: "web"})
	})
	saCopy := func() *corev1.ServiceAccount {
		got := &corev1.ServiceAccount{}
		err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: teams[0], Name: "web"}, got)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		return got
	}
	poll.Until(t, "the ServiceAccount copied", func() bool { return saCopy() != nil })
	waitWatches(t, member, 3*namespaces+1, "a kind added to a Propagation")
	if got := memberWatchStarts(t, member); got != 3*namespaces+1 {
		t.Errorf("member %s started %d informers, want %d", member, got, 3*namespaces+1)
	}
	first := saCopy()
	if err := suite.MemberClients[0].Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ServiceAccount copy deleted in the member made again", func() bool {
		c := saCopy()
		return c != nil && c.UID != first.UID
	})

	// A namespace whose Propagation is deleted stops its watches, once
	// its copy is removed.
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: teams[1], Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	waitWatches(t, member, 3*namespaces+1-3, "the namespace of a deleted Propagation")
	cm := &corev1.ConfigMap{}
	if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: teams[1], Name: "web"}, cm); !apierrors.IsNotFound(err) {
		t.Errorf("the watches of namespace %s stopped while its copy is there (get: %v)", teams[1], err)
	}

	// A restart watches the same: what each namespace needs.
	started := memberWatchStarts(t, member)
	f.stop()
	f.start(nil)
	applied("every Propagation applied in the member after a restart")
	waitWatches(t, member, 3*namespaces+1-3, "after a restart")
	if got := memberWatchStarts(t, member) - started; got != 3*namespaces+1-3 {
		t.Errorf("member %s started %d informers after a restart, want %d", member, got, 3*namespaces+1-3)
	}
	if saCopy() == nil {
		t.Error("the ServiceAccount copy is gone after a restart")
	}
}

// editPropagationIn applies edit to Propagation web of namespace.
func editPropagationIn(t *testing.T, f *testFleet, namespace string, edit func(p *fleetv1alpha1.Propagation)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: "web"}, p); err != nil {
			return err
		}
		edit(p)
		return f.hub.Client.Update(t.Context(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}
