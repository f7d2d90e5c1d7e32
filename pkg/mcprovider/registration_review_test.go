package mcprovider_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// Attacks on registration (review): many members at once, Secrets
// re-created, a refusal followed by a good kubeconfig. Helpers are in
// handover_review_test.go.

// TestManyMembersAtOnceWithOneHungAreAllReconciledByMCR: members
// registered together, one hung among them: every healthy one is
// reconciled by an MCR controller.
func TestManyMembersAtOnceWithOneHungAreAllReconciledByMCR(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-many")
	namespaces(t, watched)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	proxy.Hang(true)
	f, _, mgr, rec := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", watched, 0, "")
	healthy := []string{suite.Name("rv-many-a"), suite.Name("rv-many-b")}
	clients := []client.Client{suite.MemberClients[0], suite.MemberClients[2]}
	createCM(t, clients[0], watched, "cm")
	createCM(t, clients[1], watched, "cm")
	f.Register(t, suite.Name("rv-many-hung"), kc)
	f.Register(t, healthy[0], suite.Kubeconfigs[0])
	f.Register(t, healthy[1], suite.Kubeconfigs[2])
	start(t, mgr)
	const bound = 30 * time.Second
	for deadline := time.Now().Add(bound); !rec.has(healthy[0], "cm") || !rec.has(healthy[1], "cm"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("within %v: %s reconciled %v, %s reconciled %v", bound, healthy[0], rec.has(healthy[0], "cm"), healthy[1], rec.has(healthy[1], "cm"))
		}
	}
}

// TestSecretRecreatedRepeatedlyEndsRunningTheLastKubeconfig: a Secret
// deleted and created again several times quickly, alternating two
// kubeconfigs: the member ends on the last one (MemberCluster Ready with
// the last Secret's resourceVersion observed, MCR reconciles an object
// only the last server has, Get's cluster reads it). (MemberCluster
// clusterID is not checked: this suite's fleet never writes it.)
func TestSecretRecreatedRepeatedlyEndsRunningTheLastKubeconfig(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-alt")
	namespaces(t, watched)
	// The MemberCluster controller writes MemberCluster status.
	withStatus := fleettest.FleetOptions{Setup: func(m *fleet.Manager) error { return membercluster.Add(m, membercluster.Options{}) }}
	f, p, mgr, rec := reviewMCR(t, withStatus, "r", watched, 0, "")
	name := suite.Name("rv-alt")
	f.Register(t, name, suite.Kubeconfigs[0])
	start(t, mgr)
	poll.Until(t, "engaged", func() bool { return slices.Contains(p.ListClusters(), mcluster.ClusterName(name)) })
	kcs := [][]byte{suite.Kubeconfigs[2], suite.Kubeconfigs[0], suite.Kubeconfigs[2], suite.Kubeconfigs[0], suite.Kubeconfigs[2]}
	var last *corev1.Secret
	for _, kc := range kcs {
		if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}); err != nil {
			t.Fatal(err)
		}
		last = f.Register(t, name, kc)
	}
	suite.WaitMemberCluster(t, name, "Ready on the last Secret", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.ObservedSecretVersion == last.ResourceVersion && mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	createCM(t, suite.MemberClients[2], watched, "after")
	poll.Until(t, "MCR reconciles an object of the last kubeconfig's server", func() bool { return rec.has(name, "after") })
	cl, err := p.Get(t.Context(), mcluster.ClusterName(name))
	if err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := cl.GetClient().Get(t.Context(), client.ObjectKey{Namespace: watched, Name: "after"}, got); err != nil {
		t.Fatalf("Get's cluster is not the last kubeconfig's server: %v", err)
	}
}

// TestRefusalThenGoodKubeconfigAtOnceIsAccepted: a bad kubeconfig
// followed at once by a good one under the same name is accepted and
// handed to MCR.
func TestRefusalThenGoodKubeconfigAtOnceIsAccepted(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	f.Start(t)
	a := &awareRec{}
	runProvider(t, p, a)
	for i, how := range []string{"update", "recreate"} {
		name := suite.Name(fmt.Sprint("rv-refgood-", i))
		f.Register(t, name, []byte("not: [a kubeconfig"))
		switch how {
		case "update":
			updateSecret(t, f, name, suite.Kubeconfigs[i])
		case "recreate":
			if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}); err != nil {
				t.Fatal(err)
			}
			f.Register(t, name, suite.Kubeconfigs[i])
		}
		awaitHandedOver(t, f, a, name, fmt.Sprintf("%s: a good kubeconfig after a bad one", how))
	}
}

// TestPolicyRefusalThenGoodKubeconfigIsAccepted: a kubeconfig refused by
// policy (an exec plugin user) as the member is built, followed by a good
// one under the same name, at once or once the refusal is recorded, is
// accepted and handed to MCR: the refusal of the bad one is not pinned on
// the good one.
func TestPolicyRefusalThenGoodKubeconfigIsAccepted(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	f.Start(t)
	a := &awareRec{}
	runProvider(t, p, a)
	host := suite.Members[0].Config.Host
	bad := fleettest.HostileKubeconfig(host, `{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}`)
	for i, wait := range []bool{false, true} {
		name := suite.Name(fmt.Sprint("rv-polgood-", i))
		f.Register(t, name, bad)
		if wait {
			poll.Until(t, "the exec kubeconfig refused", func() bool {
				c, ok := f.Manager.Registry().Get(name)
				return ok && !c.Accepted()
			})
		}
		if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}); err != nil {
			t.Fatal(err)
		}
		f.Register(t, name, suite.Kubeconfigs[i])
		awaitHandedOver(t, f, a, name, fmt.Sprintf("refusal recorded first: %v; a good kubeconfig after an exec one", wait))
	}
}

// awaitHandedOver waits until member name has one live engagement with
// a, and fails saying what and the registration's refusal if it has none
// within 30 s.
func awaitHandedOver(t *testing.T, f *fleettest.Fleet, a *awareRec, name, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(liveOf(a.of(name))) != 1 {
		if time.Now().After(deadline) {
			reg, _ := f.Manager.Registry().Get(name)
			t.Fatalf("%s: not handed over within 30s; refusal %v", what, reg.Refusal)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
