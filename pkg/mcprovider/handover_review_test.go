package mcprovider_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// --- helpers (handover review) ---------------------------------------------

// engagerWaits counts goroutines inside the provider's Engage (waiting
// for a member to be Ready).
func engagerWaits() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mcprovider.(*engager).Engage") {
			n++
		}
	}
	return n
}

func mcrUnderWay(f *fleettest.Fleet, name string) bool {
	return slices.ContainsFunc(f.Manager.Engagements(name), func(e engage.Engagement) bool { return e.Aware == "multicluster-runtime" })
}

func slowHealth(o *fleet.Options) {
	o.MemberHealth = member.HealthOptions{Interval: 200 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: time.Hour}
}

func updateSecret(t *testing.T, f *fleettest.Fleet, name string, kc []byte) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Namespace: f.Namespace, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	s.Data[registry.KubeconfigKey] = kc
	if err := suite.HubClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s.ResourceVersion
}

// withToken returns kc with its user's bearer token replaced by token
// (the server and CA stay kc's).
func withToken(t *testing.T, kc []byte, token string) []byte {
	t.Helper()
	dst, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	dst.AuthInfos[dst.Contexts[dst.CurrentContext].AuthInfo].Token = token
	out, err := clientcmd.Write(*dst)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newSAToken requests another token of the service account
// ServiceAccountMember made in namespace ns of member i.
func newSAToken(t *testing.T, i int, ns string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := suite.MemberClients[i].SubResource("token").Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-manager"}}, req); err != nil {
		t.Fatal(err)
	}
	return req.Status.Token
}

// hangConnected makes proxy's member hang, connections it has included:
// Hang affects new connections only, so the established ones are cut.
func hangConnected(t *testing.T, proxy *controlplane.Proxy) {
	t.Helper()
	proxy.Hang(true)
	proxy.Down()
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
}

// probesOf returns how many probes member name has made.
func probesOf(t *testing.T, name string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "fleet_member_probes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == name {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// awaitProbes waits until member name has made n more probes: what the
// member's state, and so its hand-over, follows has happened n times
// since, the evidence a check that nothing was handed over waits for.
func awaitProbes(t *testing.T, name string, n int) {
	t.Helper()
	start := probesOf(t, name)
	poll.Until(t, fmt.Sprintf("%d more probes of %s", n, name), func() bool { return probesOf(t, name) >= start+float64(n) })
}

// --- attacks ---------------------------------------------------------------

// TestNeverReadyMemberIsNotHandedOverAndItsWaitEndsWhenItLeaves: a member
// that never answers is not handed to MCR; when its Secret is deleted the
// provider's wait for it (goroutine in Engage) ends and its engagement is
// gone.
func TestNeverReadyMemberIsNotHandedOverAndItsWaitEndsWhenItLeaves(t *testing.T) {
	// Not parallel: it counts the goroutines in the provider's Engage.
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", "", 0, "")
	f.Start(t)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	proxy.Hang(true)
	name := suite.Name("rv-never")
	f.Register(t, name, kc)
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "MCR engagement under way", func() bool { return mcrUnderWay(f, name) })
	poll.Until(t, "provider waiting in Engage", func() bool { return engagerWaits() >= 1 })
	awaitProbes(t, name, 5)
	if es := a.of(name); len(es) != 0 {
		t.Fatalf("a member never Ready was handed to MCR %d times", len(es))
	}
	if s, _ := f.Manager.MemberState(name); s == fleetv1alpha1.MemberStateReady {
		t.Fatalf("member is Ready behind a hung proxy")
	}
	if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for mcrUnderWay(f, name) || engagerWaits() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30s after the Secret's deletion: engagement under way %v, %d goroutines still in the provider's Engage", mcrUnderWay(f, name), engagerWaits())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if es := a.of(name); len(es) != 0 {
		t.Fatalf("a member that left without being Ready was handed to MCR")
	}
}

// TestReadyThenUnhealthyMemberIsHandedOverOnceAndFreedWhenItLeaves: a
// member Ready, then Unhealthy (hung) is engaged once; deleting it ends
// that engagement's context and leaves no goroutine in Engage.
func TestReadyThenUnhealthyMemberIsHandedOverOnceAndFreedWhenItLeaves(t *testing.T) {
	// Not parallel: it counts the goroutines in the provider's Engage.
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", "", 0, "")
	f.Start(t)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	name := suite.Name("rv-rtu")
	f.Register(t, name, kc)
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "handed over", func() bool { return len(a.of(name)) == 1 })
	hangConnected(t, proxy)
	f.WaitState(t, name, fleetv1alpha1.MemberStateUnhealthy)
	awaitProbes(t, name, 3)
	if es := a.of(name); len(es) != 1 || es[0].ctx.Err() != nil {
		t.Fatalf("Unhealthy member: %d engagements; want the first, alive", len(es))
	}
	if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "engagement context ended and no Engage goroutine left", func() bool {
		return a.of(name)[0].ctx.Err() != nil && engagerWaits() == 0 && !slices.Contains(p.ListClusters(), mcluster.ClusterName(name))
	})
}

// TestTokenRotatedWhileWaitingIsHandedOverOnceWithTheSameCluster: a
// member waiting for Ready whose token is rotated in place is handed to
// MCR once it is Ready, with the cluster it runs, once.
func TestTokenRotatedWhileWaitingIsHandedOverOnceWithTheSameCluster(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", "", 0, "")
	f.Start(t)
	// A token-only kubeconfig (a service account, as register makes).
	saNS := suite.Name("rv-rotw-sa")
	kc, proxy := fleettest.ViaProxy(t, suite.ServiceAccountMember(t, 1, saNS, 3600))
	rotated := withToken(t, kc, newSAToken(t, 1, saNS))
	proxy.Hang(true)
	name := suite.Name("rv-rotw")
	f.Register(t, name, kc)
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "MCR engagement under way", func() bool { return mcrUnderWay(f, name) })
	poll.Until(t, "provider waiting in Engage", func() bool { return engagerWaits() >= 1 })
	updateSecret(t, f, name, rotated)
	poll.Until(t, "rotated kubeconfig runs", func() bool {
		_, err := f.Manager.GetRunningCluster(name, rotated)
		return err == nil
	})
	proxy.Hang(false)
	deadline := time.Now().Add(30 * time.Second)
	for len(a.of(name)) == 0 {
		if time.Now().After(deadline) {
			s, _ := f.Manager.MemberState(name)
			t.Fatalf("member rotated in place while waiting not handed over within 30s of its server answering (state %s, %d goroutines in Engage)", s, engagerWaits())
		}
		time.Sleep(20 * time.Millisecond)
	}
	awaitProbes(t, name, 3)
	es := a.of(name)
	cl, err := p.Get(t.Context(), mcluster.ClusterName(name))
	if len(es) != 1 || es[0].ctx.Err() != nil || err != nil || es[0].cl != cl {
		t.Fatalf("after rotation while waiting: %d engagements (want 1, alive, with the cluster Get returns; Get err %v)", len(es), err)
	}
}

// TestRepointedWhileWaitingEndsTheOldWaitAndEngagesTheNewClusterOnce: a
// member waiting for Ready on a hung server, re-pointed to a healthy
// server: the wait on the old cluster ends, the new cluster is engaged
// once.
func TestRepointedWhileWaitingEndsTheOldWaitAndEngagesTheNewClusterOnce(t *testing.T) {
	// Not parallel: it counts the goroutines in the provider's Engage.
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: slowHealth}, "r", "", 0, "")
	f.Start(t)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	proxy.Hang(true)
	name := suite.Name("rv-repw")
	f.Register(t, name, kc)
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "MCR engagement under way", func() bool { return mcrUnderWay(f, name) })
	poll.Until(t, "provider waiting in Engage", func() bool { return engagerWaits() >= 1 })
	updateSecret(t, f, name, suite.Kubeconfigs[2])
	poll.Until(t, "the new cluster handed over", func() bool { return len(a.of(name)) >= 1 })
	poll.Until(t, "no goroutine left in Engage", func() bool { return engagerWaits() == 0 })
	awaitProbes(t, name, 3)
	es := a.of(name)
	cl, err := p.Get(t.Context(), mcluster.ClusterName(name))
	if len(es) != 1 || es[0].ctx.Err() != nil || err != nil || es[0].cl != cl {
		t.Fatalf("re-pointed while waiting: %d engagements (want 1, alive, with the cluster Get returns; Get err %v)", len(es), err)
	}
	if h := es[0].cl.GetConfig().Host; h == "" || strings.Contains(string(kc), h) {
		t.Fatalf("engaged cluster's host %q is the old (hung) server's", h)
	}
}

// TestMemberDisconnectedAfterReadyIsNotHandedOverAgainBeforeItAnswers: a
// member Ready and handed over, then hung until Disconnected: no new
// connection is handed to MCR while it does not answer; once it answers
// it is handed over again, once.
func TestMemberDisconnectedAfterReadyIsNotHandedOverAgainBeforeItAnswers(t *testing.T) {
	t.Parallel()
	health := func(o *fleet.Options) {
		o.MemberHealth = member.HealthOptions{Interval: 200 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 2, DisconnectAfter: 2 * time.Second}
	}
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{Configure: health}, "r", "", 0, "")
	f.Start(t)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[1])
	name := suite.Name("rv-recon")
	f.Register(t, name, kc)
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "handed over", func() bool { return len(a.of(name)) == 1 })
	hangConnected(t, proxy)
	f.WaitState(t, name, fleetv1alpha1.MemberStateDisconnected)
	poll.Until(t, "first engagement ended", func() bool { return a.of(name)[0].ctx.Err() != nil })
	awaitProbes(t, name, 3)
	if n := len(a.of(name)); n != 1 {
		t.Fatalf("a member Disconnected and still hung was handed over again (%d engagements)", n)
	}
	proxy.Hang(false)
	poll.Until(t, "handed over again once it answers", func() bool { return len(liveOf(a.of(name))) == 1 })
	awaitProbes(t, name, 3)
	if es := a.of(name); len(es) != 2 {
		t.Fatalf("after its return: %d engagements, want 2", len(es))
	}
}
