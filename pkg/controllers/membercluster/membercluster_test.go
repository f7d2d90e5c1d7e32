package membercluster_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

func TestMemberClusterFollowsItsMember(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: fleettest.QuickHealth})
	f.WatchConfigMaps(t, "status", "status", fleet.Members, &fleettest.Recorder{})
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "observed", Labels: map[string]string{registry.KubeconfigLabel: "true", "region": "eu"}},
		Data:       map[string][]byte{registry.KubeconfigKey: kc},
	}
	if err := suite.HubClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}

	mc := suite.WaitMemberCluster(t, "observed", "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady && fleettest.Condition(mc, fleetv1alpha1.ConditionReady) == metav1.ConditionTrue &&
			len(mc.Status.EngagedControllers) == 1 && mc.Status.ServerVersion != ""
	})
	if mc.Labels["region"] != "eu" || mc.Spec.SecretRef.Name != "observed" || mc.Spec.SecretRef.Format != fleetv1alpha1.FormatNative {
		t.Fatalf("MemberCluster does not reflect its Secret: labels %v, spec %+v", mc.Labels, mc.Spec)
	}
	if fleettest.Condition(mc, fleetv1alpha1.ConditionHealthy) != metav1.ConditionTrue || fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) != metav1.ConditionTrue {
		t.Fatalf("conditions %+v, want Healthy and CredentialsAccepted True", mc.Status.Conditions)
	}
	// LastProbeTime is rewritten while the member is probed, though
	// nothing else changes.
	refresh := membercluster.ProbeTimeRefreshIntervals * 200 * time.Millisecond
	first := mc.Status.LastProbeTime.Time
	for deadline := time.Now().Add(2*refresh + time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Name: "observed"}, mc); err != nil {
			t.Fatal(err)
		}
		if mc.Status.LastProbeTime.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastProbeTime still %s after %s, want it refreshed every %s", first, 2*refresh+time.Second, refresh)
		}
	}

	proxy.Down()
	suite.WaitMemberCluster(t, "observed", "Unhealthy", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateUnhealthy && fleettest.Condition(mc, fleetv1alpha1.ConditionHealthy) == metav1.ConditionFalse &&
			mc.Status.ConsecutiveFailures >= 2 && mc.Status.LastError != ""
	})
	suite.WaitMemberCluster(t, "observed", "Disconnected", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateDisconnected && fleettest.Condition(mc, fleetv1alpha1.ConditionReady) == metav1.ConditionFalse
	})
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	mc = suite.WaitMemberCluster(t, "observed", "Ready again", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady && mc.Status.ConsecutiveFailures == 0
	})
	var seen []fleetv1alpha1.MemberState
	for _, tr := range mc.Status.RecentTransitions {
		seen = append(seen, tr.State)
	}
	if !containsInOrder(seen, fleetv1alpha1.MemberStateReady, fleetv1alpha1.MemberStateUnhealthy, fleetv1alpha1.MemberStateDisconnected, fleetv1alpha1.MemberStateReady) {
		t.Fatalf("transitions %v do not record Ready, Unhealthy, Disconnected, Ready", seen)
	}
	// Every transition, the first included, is one Event.
	poll.Until(t, "one Event per transition of observed", func() bool {
		events := stateEvents(t, "observed")
		if len(events) != len(mc.Status.RecentTransitions) {
			return false
		}
		for i, tr := range mc.Status.RecentTransitions {
			// The note names the state once, then says what happened.
			note, state := events[i].Note, string(tr.State)
			if events[i].Reason != tr.Reason || !strings.HasPrefix(note, state+": ") || strings.Count(note, state) != 1+strings.Count(note, "(was "+state+")") {
				return false
			}
		}
		return true
	})

	if err := suite.HubClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "MemberCluster observed deleted", func() bool {
		return apierrors.IsNotFound(suite.HubClient.Get(t.Context(), types.NamespacedName{Name: "observed"}, &fleetv1alpha1.MemberCluster{}))
	})
	poll.Until(t, "a Deregistered Event for observed", func() bool {
		return slices.ContainsFunc(memberClusterEvents(t, "observed"), func(e eventsv1.Event) bool { return e.Reason == fleetv1alpha1.ReasonDeregistered })
	})
}

// memberClusterEvents returns the Events about the MemberCluster named
// name, oldest first.
func memberClusterEvents(t *testing.T, name string) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := suite.HubClient.List(t.Context(), list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "MemberCluster" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// stateEvents returns the state change Events of the MemberCluster named
// name, oldest first.
func stateEvents(t *testing.T, name string) []eventsv1.Event {
	t.Helper()
	var out []eventsv1.Event
	for _, e := range memberClusterEvents(t, name) {
		if e.Action == "StateChanged" {
			out = append(out, e)
		}
	}
	return out
}

// TestMemberClusterShowsOwedRemovals: the removals a member owes, as the
// Propagation controller publishes them, reach its MemberCluster, the
// oldest 20 listed and all counted, and go with them.
func TestMemberClusterShowsOwedRemovals(t *testing.T) {
	t.Parallel()
	published := registry.NewFacts(slices.Equal[[]fleetv1alpha1.OwedRemoval])
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: func(m *fleet.Manager) error {
		return membercluster.Add(m, membercluster.Options{OwedRemovals: published})
	}})
	f.Register(t, "owing", suite.Kubeconfigs[0])
	suite.WaitMemberCluster(t, "owing", "Ready", func(mc *fleetv1alpha1.MemberCluster) bool { return mc.Status.State == fleetv1alpha1.MemberStateReady })
	decided := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	var owed []fleetv1alpha1.OwedRemoval
	for i := range 25 {
		owed = append(owed, fleetv1alpha1.OwedRemoval{Propagation: fmt.Sprintf("team/p-%02d", i), Reason: "the member is Unhealthy", Since: metav1.NewTime(decided.Add(time.Duration(i) * time.Minute))})
	}
	published.Publish("owing", owed)
	mc := suite.WaitMemberCluster(t, "owing", "25 owed removals", func(mc *fleetv1alpha1.MemberCluster) bool { return mc.Status.OwedRemovalCount == 25 })
	if got := mc.Status.OwedRemovals; len(got) != fleetv1alpha1.MaxOwedRemovals || got[0].Propagation != "team/p-00" ||
		got[0].Reason != "the member is Unhealthy" || !got[0].Since.Time.Equal(decided) {
		t.Fatalf("owedRemovals = %+v, want the oldest 20, first team/p-00 decided at %s", got, decided)
	}
	published.Publish("owing", nil)
	suite.WaitMemberCluster(t, "owing", "no owed removal", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.OwedRemovalCount == 0 && len(mc.Status.OwedRemovals) == 0
	})
}

func TestMemberClusterCarriesTheRefusal(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	f.Register(t, "refused", fleettest.HostileKubeconfig("https://10.0.0.1", `{exec: {command: kubelogin, apiVersion: client.authentication.k8s.io/v1}}`))
	mc := suite.WaitMemberCluster(t, "refused", "refused", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) == metav1.ConditionFalse
	})
	accepted := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
	if accepted.Reason != "ExecPluginRefused" || fleettest.Condition(mc, fleetv1alpha1.ConditionReady) != metav1.ConditionFalse {
		t.Fatalf("conditions %+v, want CredentialsAccepted False for ExecPluginRefused and not Ready", mc.Status.Conditions)
	}
	poll.Until(t, "one Warning Event saying refused was refused", func() bool {
		events := stateEvents(t, "refused")
		return len(events) == 1 && events[0].Reason == fleetv1alpha1.ReasonCredentialsRefused && events[0].Type == corev1.EventTypeWarning
	})
	// A token no HTTP header can carry, and a kubeconfig over the structure
	// budget, are refused with their own reasons (issue 12, defects 1 and 10).
	more := map[string]struct {
		kubeconfig []byte
		reason     string
	}{
		"refused-crlf-token":  {fleettest.HostileKubeconfig("https://10.0.0.1", `{token: "`+fleettest.HostileToken+`\r\nX-Injected: 1"}`), kubeconfig.ReasonInvalidHeaderValue},
		"refused-too-complex": {kubeconfigtest.Flat(kubeconfig.MaxKubeconfigBytes - 1024), kubeconfig.ReasonKubeconfigTooComplex},
	}
	for name, m := range more {
		f.Register(t, name, m.kubeconfig)
	}
	for name, m := range more {
		mc := suite.WaitMemberCluster(t, name, "refused", func(mc *fleetv1alpha1.MemberCluster) bool {
			return fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) == metav1.ConditionFalse
		})
		if accepted := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted); accepted.Reason != m.reason {
			t.Fatalf("%s: CredentialsAccepted is False for %s, want %s", name, accepted.Reason, m.reason)
		}
	}
	if err := suite.HubClient.DeleteAllOf(t.Context(), &corev1.Secret{}, client.InNamespace(f.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"refused", "refused-crlf-token", "refused-too-complex"} {
		poll.Until(t, "MemberCluster "+name+" deleted", func() bool {
			return apierrors.IsNotFound(suite.HubClient.Get(t.Context(), types.NamespacedName{Name: name}, &fleetv1alpha1.MemberCluster{}))
		})
	}
}

// containsInOrder reports whether want occurs in got as a subsequence.
func containsInOrder[T comparable](got []T, want ...T) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestMissingKindHoldsBackOnlyItsController(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	working := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "working", "missing-kind", fleet.Members, working)
	// Members have no MemberCluster CRD: this controller cannot watch them.
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("needs-crd").
		For(&fleetv1alpha1.MemberCluster{}).
		Complete(&fleettest.Recorder{})
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "lacking", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "missing-kind", "works")
	working.WaitFor(t, fleettest.Request("lacking", "missing-kind", "works"))

	suite.WaitMemberCluster(t, "lacking", "Ready, with working engaged and needs-crd KindNotFound", func(mc *fleetv1alpha1.MemberCluster) bool {
		kindNotFound := slices.ContainsFunc(mc.Status.ControllerConditions, func(c fleetv1alpha1.ControllerCondition) bool {
			return c.Name == "needs-crd" && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonKindNotFound
		})
		return kindNotFound && mc.Status.State == fleetv1alpha1.MemberStateReady && slices.Equal(mc.Status.EngagedControllers, []string{"working"})
	})
}
