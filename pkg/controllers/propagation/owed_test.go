package propagation_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// newFleetOwingServiceAccounts returns a fleet whose members are east,
// behind a proxy the test takes down, and west, and whose Propagation web
// copies ServiceAccount web to both. No other test copies
// ServiceAccounts: once web is deleted no Propagation of the shared hub
// does, so a manager finds east's copy only through what east owes, never
// by watching the kind for another Propagation.
func newFleetOwingServiceAccounts(t *testing.T) (*testFleet, *controlplane.Proxy) {
	t.Helper()
	f := newFleetWith(t, &member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, DisconnectAfter: time.Hour})
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.registerKubeconfig("east", proxied, map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web", Labels: map[string]string{"app": "web"}}}
	if err := f.hub.Client.Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ServiceAccount", Name: "web"}}
	})
	f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	return f, proxy
}

// serviceAccountIn reports whether member i holds ServiceAccount web of
// f's team namespace.
func (f *testFleet) serviceAccountIn(i int) bool {
	f.t.Helper()
	err := suite.MemberClients[i].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &corev1.ServiceAccount{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// deleteWhileEastIsDown deletes Propagation web while east is down, and
// waits until it is gone, east owing the removal of its copy.
func (f *testFleet) deleteWhileEastIsDown(proxy *controlplane.Proxy) {
	f.t.Helper()
	proxy.Down()
	poll.Until(f.t, "east Unhealthy", func() bool { s, _ := f.mgr.MemberState("east"); return s == fleetv1alpha1.MemberStateUnhealthy })
	if err := f.hub.Client.Delete(f.t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
		f.t.Fatal(err)
	}
	poll.Until(f.t, "the Propagation gone although east is down", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
	})
	if owed, err := f.journal.Owed("east"); err != nil || len(owed) != 1 || owed[0].Propagation != "web" {
		f.t.Fatalf("the journal's owed removals of east: %+v, %v; want web's", owed, err)
	}
}

// mirror returns the ConfigMaps of the fleet namespace that mirror the
// owed removals.
func (f *testFleet) mirror() []corev1.ConfigMap {
	f.t.Helper()
	var found []corev1.ConfigMap
	for _, name := range propagation.OwedRemovalsConfigMaps() {
		cm := &corev1.ConfigMap{}
		err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.namespace, Name: name}, cm)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		found = append(found, *cm)
	}
	return found
}

// TestReRegisteredMemberKeepsItsOwedRemoval deletes a Propagation while
// east is down, then deletes east's registration Secret and creates it
// again, as kubectl replace --force or unregister and register do: east,
// back, still removes its copy.
func TestReRegisteredMemberKeepsItsOwedRemoval(t *testing.T) {
	t.Parallel()
	f, proxy := newFleetOwingServiceAccounts(t)
	f.deleteWhileEastIsDown(proxy)

	secret := &corev1.Secret{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.namespace, Name: "east"}, secret); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Client.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east no longer registered", func() bool { _, ok := f.mgr.Registry().Get("east"); return !ok })
	again := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "east", Labels: secret.Labels}, Data: secret.Data}
	if err := f.hub.Client.Create(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east registered again", func() bool { _, ok := f.mgr.Registry().Get("east"); return ok })
	if !f.serviceAccountIn(0) {
		t.Fatal("the copy in east is gone while east was down: the test proves nothing")
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east's copy removed once east is back under its new registration", func() bool { return !f.serviceAccountIn(0) })
	poll.Until(t, "the owed removal settled in the journal", func() bool {
		owed, err := f.journal.Owed("east")
		return err == nil && len(owed) == 0
	})
	// The MemberCluster, the metric and the hub's mirror follow the
	// journal: nothing shows the removal owed once it is carried out.
	poll.Until(t, "the manager publishes that east owes nothing", func() bool {
		owed, published := f.owedRemovals.Get("east")
		return published && len(owed) == 0
	})
	poll.Until(t, "the mirror emptied once east settled", func() bool { return len(f.mirror()) == 0 })
}

// TestFailoverCarriesOutOwedRemovals deletes a Propagation while east is
// down, then starts a manager on a new, empty state directory, as a second
// replica taking over the lead would: it learns the owed removal from the
// hub, and carries it out when east is back.
func TestFailoverCarriesOutOwedRemovals(t *testing.T) {
	t.Parallel()
	f, proxy := newFleetOwingServiceAccounts(t)
	f.deleteWhileEastIsDown(proxy)
	mirror := f.mirror()
	if len(mirror) != 1 {
		t.Fatalf("the owed removal is mirrored in %d ConfigMaps of the fleet namespace, want 1", len(mirror))
	}
	if cm := mirror[0]; cm.Labels[fleetv1alpha1.FleetIDLabel] != f.fleetID() || !strings.Contains(cm.Data["members.json"], `"propagation":"web"`) {
		t.Errorf("the mirror ConfigMap %s: labels %v, data %v; want the fleet's identity and web's removal", cm.Name, cm.Labels, cm.Data)
	}

	f.stop()
	f.stateDir = t.TempDir()
	f.start(f.health)
	if rec := f.journal.Recovered(); rec == nil || rec.MovedTo != "" {
		t.Fatalf("the second replica's journal is not new: %+v", rec)
	}
	poll.Until(t, "the new leader knows east owes web's removal", func() bool {
		owed, err := f.journal.Owed("east")
		return err == nil && len(owed) == 1 && owed[0].Propagation == "web"
	})
	if !f.serviceAccountIn(0) {
		t.Fatal("the copy in east is gone while east was down: the test proves nothing")
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east's copy removed by the new leader once east is back", func() bool { return !f.serviceAccountIn(0) })
	poll.Until(t, "the mirror emptied once east settled", func() bool { return len(f.mirror()) == 0 })
}

// TestUnlistableKindAtDeletionIsOwedAndRetried deletes a Propagation
// while the member's user may no longer list the kind it copied: the
// copy cannot be proven gone, so the member owes its removal, which is
// tried again until the member lets the manager list the kind.
func TestUnlistableKindAtDeletionIsOwedAndRetried(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	user := suite.Name("unlisting")
	write := []string{"get", "create", "patch", "update", "delete"}
	kc := memberUser(t, 1, user, "",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: append([]string{"list", "watch"}, write...)},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
	)
	f.registerKubeconfig("west", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })

	// A new manager's copy cache lists the kind anew.
	f.stop()
	setVerbs := func(verbs []string) {
		t.Helper()
		r := &rbacv1.ClusterRole{}
		if err := suite.MemberClients[1].Get(t.Context(), types.NamespacedName{Name: user}, r); err != nil {
			t.Fatal(err)
		}
		r.Rules[0].Verbs = verbs
		if err := suite.MemberClients[1].Update(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	setVerbs(write)
	f.start(nil)
	poll.Until(t, "west Ready", func() bool { s, _ := f.mgr.MemberState("west"); return s == fleetv1alpha1.MemberStateReady })
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Propagation gone", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
	})
	owed, err := f.journal.Owed("west")
	if err != nil || len(owed) != 1 || owed[0].Propagation != "web" || !strings.Contains(owed[0].Reason, "forbids the manager to list configmaps") {
		t.Fatalf("west's owed removals: %+v, %v; want web's, the member forbidding to list configmaps", owed, err)
	}
	if f.copyIn(1, "web") == nil {
		t.Fatal("the copy in west is gone: the test proves nothing")
	}

	setVerbs(append([]string{"list", "watch"}, write...))
	// Tried again after a back-off of at most a minute (failureRetry):
	// waited for twice poll's time at most.
	for deadline := time.Now().Add(2 * poll.Timeout); f.copyIn(1, "web") != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("west's copy not removed within %s of the member letting the manager list ConfigMaps again", 2*poll.Timeout)
		}
	}
	poll.Until(t, "the owed removal settled in the journal", func() bool {
		owed, err := f.journal.Owed("west")
		return err == nil && len(owed) == 0
	})
}

// TestFailoverRemovesCopiesOfAKindNoLongerCopied: Propagation web stops
// copying ServiceAccounts while east is down, then a manager on a new,
// empty state directory takes over, as the second replica of the default
// install would: it learns the kind from status.kinds, and removes east's
// copy once east is back.
func TestFailoverRemovesCopiesOfAKindNoLongerCopied(t *testing.T) {
	t.Parallel()
	f, proxy := newFleetOwingServiceAccounts(t)
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	proxy.Down()
	poll.Until(t, "east Unhealthy", func() bool { s, _ := f.mgr.MemberState("east"); return s == fleetv1alpha1.MemberStateUnhealthy })
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}}
	})
	poll.Until(t, "west's ServiceAccount copy removed", func() bool { return !f.serviceAccountIn(1) })
	f.waitStatus("web", "the ServiceAccount kind kept in status.kinds", func(p *fleetv1alpha1.Propagation) bool {
		return slices.Contains(p.Status.Kinds, fleetv1alpha1.KindReference{APIVersion: "v1", Kind: "ServiceAccount"})
	})

	f.stop()
	f.stateDir = t.TempDir()
	f.start(f.health)
	if !f.serviceAccountIn(0) {
		t.Fatal("the copy in east is gone while east was down: the test proves nothing")
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "east's ServiceAccount copy removed by the new leader once east is back", func() bool { return !f.serviceAccountIn(0) })
	f.waitCopy(0, "web", "applied", exists)
}
