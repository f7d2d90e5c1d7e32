package mcprovider_test

// Outside review (wt-review42): attacks on the promises of
// docs/library.md "Running multicluster-runtime controllers".

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// --- helpers -------------------------------------------------------------

// span is one reconcile of a review controller that got its cluster.
type span struct {
	replica, cluster, name string
	got, end               time.Time
	wroteAt                time.Time
	writeErr               error
}

// reviewRec is an MCR reconciler that records what it reconciled.
type reviewRec struct {
	replica  string
	mgr      mcmanager.Manager
	hold     time.Duration
	writesNS string // if set, each reconcile creates a ConfigMap there after hold

	mu    sync.Mutex
	spans []span
}

func (r *reviewRec) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, err
	}
	s := span{replica: r.replica, cluster: string(req.ClusterName), name: req.Name, got: time.Now()}
	if r.hold > 0 {
		time.Sleep(r.hold)
	}
	if r.writesNS != "" {
		s.writeErr = cl.GetClient().Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: r.writesNS, GenerateName: "w-",
			Labels: map[string]string{"replica": r.replica, "cluster": string(req.ClusterName)},
		}})
		s.wroteAt = time.Now()
	}
	s.end = time.Now()
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	return reconcile.Result{}, nil
}

func (r *reviewRec) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

func (r *reviewRec) has(cluster, name string) bool {
	return slices.ContainsFunc(r.all(), func(s span) bool { return s.cluster == cluster && s.name == name })
}

// reviewMCR builds a deferred fleet wrapped for MCR, with a ConfigMap
// controller of namespace ns recorded by the returned reconciler.
func reviewMCR(t *testing.T, opts fleettest.FleetOptions, replica, ns string, hold time.Duration, writesNS string) (*fleettest.Fleet, *mcprovider.Provider, mcmanager.Manager, *reviewRec) {
	t.Helper()
	opts.Deferred = true
	f := suite.StartFleet(t, opts)
	p := mcprovider.New(f.Manager, mcprovider.Options{})
	mgr, err := mcmanager.WithMultiCluster(f.Manager, p)
	if err != nil {
		t.Fatal(err)
	}
	rec := &reviewRec{replica: replica, mgr: mgr, hold: hold, writesNS: writesNS}
	if ns != "" {
		if err := addReviewController(mgr, "review-"+replica+"-"+ns, ns, rec); err != nil {
			t.Fatal(err)
		}
	}
	return f, p, mgr, rec
}

func addReviewController(mgr mcmanager.Manager, name, ns string, rec *reviewRec) error {
	return mcbuilder.ControllerManagedBy(mgr).
		Named(name).
		WithOptions(mccontroller.Options{MaxConcurrentReconciles: 16}).
		For(&corev1.ConfigMap{}, mcbuilder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns }))).
		Complete(rec)
}

func namespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, cl := range suite.MemberClients {
		for _, n := range names {
			fleettest.CreateNamespace(t, cl, n)
		}
	}
}

func createCM(t *testing.T, cl client.Client, ns, name string) {
	t.Helper()
	if err := cl.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// awareRec is a bare multicluster.Aware that records every engagement.
type awareRec struct {
	mu  sync.Mutex
	eng map[string][]awareEng
	// onEnd, if set, runs as an engagement's context ends.
	onEnd func(name string, cl cluster.Cluster)
}

type awareEng struct {
	ctx context.Context
	cl  cluster.Cluster
}

func (a *awareRec) Engage(ctx context.Context, name mcluster.ClusterName, cl cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.eng == nil {
		a.eng = map[string][]awareEng{}
	}
	a.eng[string(name)] = append(a.eng[string(name)], awareEng{ctx: ctx, cl: cl})
	if a.onEnd != nil {
		context.AfterFunc(ctx, func() { a.onEnd(string(name), cl) })
	}
	return nil
}

func (a *awareRec) of(name string) []awareEng {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.eng[name])
}

func liveOf(es []awareEng) []awareEng {
	var out []awareEng
	for _, e := range es {
		if e.ctx.Err() == nil {
			out = append(out, e)
		}
	}
	return out
}

func runProvider(t *testing.T, p *mcprovider.Provider, a mcluster.Aware) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx, a) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("provider Start did not return within 30s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// --- attacks -------------------------------------------------------------

// TestReviewShardedMoveMCR: two replicas (fleet.Options.Shard), an MCR
// controller on each. Replica "first" owns all 6 members; "second"
// joins. Is a member ever reconciled by both (a reconcile that got its
// cluster overlapping the other replica's, or a write of the old owner
// landing after the new owner's first write), or by none after the move?
func TestShardedMoveLandsNoWriteOfTheOldOwner(t *testing.T) {
	t.Parallel()
	ns := suite.FleetNamespace(t)
	watched, writes := suite.Name("rv-shard"), suite.Name("rv-writes")
	namespaces(t, watched, writes)
	quick := func(name string) func(o *fleet.Options) {
		return func(o *fleet.Options) {
			o.Shard = &shard.Options{Name: name, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 250 * time.Millisecond}
		}
	}
	const hold = time.Second
	first, p1, mgr1, rec1 := reviewMCR(t, fleettest.FleetOptions{Namespace: ns, Configure: quick("first")}, "first", watched, hold, writes)
	var names []string
	for i := range 6 {
		n := suite.Name("rv-sh")
		names = append(names, n)
		first.Register(t, n, suite.Kubeconfigs[i%3])
	}
	start(t, mgr1)
	for i, cl := range suite.MemberClients {
		createCM(t, cl, watched, fmt.Sprint("tick-", i))
	}
	poll.Until(t, "first engaged MCR with every member", func() bool { return len(p1.ListClusters()) == len(names) })

	// Ticks keep every member's reconciles going through the move.
	tickCtx, stopTicks := context.WithCancel(context.Background())
	var tickWG sync.WaitGroup
	tickWG.Go(func() {
		for n := 0; tickCtx.Err() == nil; n++ {
			for i, cl := range suite.MemberClients {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: watched, Name: fmt.Sprint("tick-", i)}, Data: map[string]string{"n": fmt.Sprint(n)}}
				_ = cl.Update(tickCtx, cm)
			}
			select {
			case <-tickCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	defer func() { stopTicks(); tickWG.Wait() }()

	joined := time.Now()
	poll.Until(t, "first reconciled every member a few times with the ticks", func() bool {
		for _, n := range names {
			c := 0
			for _, s := range rec1.all() {
				if s.cluster == n && s.got.After(joined) {
					c++
				}
			}
			if c < 3 {
				return false
			}
		}
		return true
	})
	_, p2, mgr2, rec2 := reviewMCR(t, fleettest.FleetOptions{Namespace: ns, Configure: quick("second")}, "second", watched, hold, writes)
	start(t, mgr2)
	m1, m2 := first.Manager, mgr2.GetLocalManager().(*fleet.Manager)
	var moved []string
	poll.Until(t, "each member owned by one replica and engaged with MCR there only, some moved", func() bool {
		moved = nil
		l1, l2 := p1.ListClusters(), p2.ListClusters()
		for _, n := range names {
			o1, o2 := m1.Owns(n), m2.Owns(n)
			if o1 == o2 || slices.Contains(l1, mcluster.ClusterName(n)) != o1 || slices.Contains(l2, mcluster.ClusterName(n)) != o2 {
				return false
			}
			if o2 {
				moved = append(moved, n)
			}
		}
		return len(moved) > 0
	})
	// Let the moved members be reconciled on their new owner.
	settled := time.Now()
	poll.Until(t, "every member reconciled by its owner after the move", func() bool {
		for _, n := range names {
			rec := rec1
			if m2.Owns(n) {
				rec = rec2
			}
			if !slices.ContainsFunc(rec.all(), func(s span) bool { return s.cluster == n && s.got.After(settled) && s.writeErr == nil }) {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second)
	stopTicks()
	tickWG.Wait()
	after := time.Now()

	all := append(rec1.all(), rec2.all()...)
	t.Logf("moved to second: %v", moved)
	var broken []string
	for _, n := range names {
		var a, b []span
		for _, s := range all {
			if s.cluster != n {
				continue
			}
			if s.replica == "first" {
				a = append(a, s)
			} else {
				b = append(b, s)
			}
		}
		owner := "first"
		if m2.Owns(n) {
			owner = "second"
		}
		// Reconcile-level overlap: spans that got the cluster on both.
		overlaps := 0
		for _, x := range a {
			for _, y := range b {
				if x.got.Before(y.end) && y.got.Before(x.end) {
					overlaps++
					t.Logf("%s: first held it %s..%s (write at %s: %v), second %s..%s (write: %v)", n,
						x.got.Format("15:04:05.000"), x.end.Format("15:04:05.000"), x.wroteAt.Format("15:04:05.000"), x.writeErr,
						y.got.Format("15:04:05.000"), y.end.Format("15:04:05.000"), y.writeErr)
				}
			}
		}
		// Write-level: a successful write of one replica after the
		// other's first successful write, for a member that moved once.
		var firstB time.Time
		for _, y := range b {
			if y.writeErr == nil && (firstB.IsZero() || y.wroteAt.Before(firstB)) {
				firstB = y.wroteAt
			}
		}
		lateA, refusedA := 0, 0
		for _, x := range a {
			if x.writeErr != nil {
				refusedA++
			}
			if !firstB.IsZero() && x.writeErr == nil && x.wroteAt.After(firstB) {
				lateA++
			}
		}
		// After the move: the non-owner wrote nothing after settled.
		nonOwner := 0
		for _, s := range all {
			if s.cluster == n && s.replica != owner && s.writeErr == nil && s.wroteAt.After(settled) && s.wroteAt.Before(after) {
				nonOwner++
			}
		}
		// Gap for a moved member: first's last successful write to
		// second's first.
		var lastA time.Time
		for _, x := range a {
			if x.writeErr == nil && x.wroteAt.Before(firstB) && x.wroteAt.After(lastA) {
				lastA = x.wroteAt
			}
		}
		gap := time.Duration(0)
		if !firstB.IsZero() && !lastA.IsZero() {
			gap = firstB.Sub(lastA)
		}
		t.Logf("%s owner=%s reconciles first=%d second=%d overlapping-reconciles=%d first-writes-refused=%d first-writes-after-second's=%d non-owner-writes-after-settle=%d write-gap=%s",
			n, owner, len(a), len(b), overlaps, refusedA, lateA, nonOwner, gap)
		if lateA > 0 || nonOwner > 0 {
			broken = append(broken, fmt.Sprintf("%s: %d writes of the old owner after the new owner's first, %d writes of the non-owner after the move", n, lateA, nonOwner))
		}
		// A reconcile in flight on the old owner may overlap the new
		// owner's first (multicluster-runtime does not tell the provider
		// of its reconciles); what holds is that none of its requests
		// reaches the member once the new owner works on it.
	}
	if len(broken) > 0 {
		t.Errorf("a member written by both replicas:\n%v", broken)
	}
}

// TestReviewDisconnectReconnectMCR: a member behind a proxy goes Down
// (then, second round, Hangs): MCR's engagement ends, Get is not-found;
// a ConfigMap created while it is away is reconciled once it is back,
// on a new cluster.
func TestDisconnectReconnectMCR(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-disc")
	namespaces(t, watched)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f, p, mgr, rec := reviewMCR(t, fleettest.FleetOptions{Configure: fleettest.QuickHealth}, "r", watched, 0, "")
	name := suite.Name("rv-down")
	f.Register(t, name, kc)
	start(t, mgr)
	poll.Until(t, "engaged", func() bool { return slices.Contains(p.ListClusters(), mcluster.ClusterName(name)) })
	createCM(t, suite.MemberClients[0], watched, "before")
	poll.Until(t, "before reconciled", func() bool { return rec.has(name, "before") })
	cl0, err := p.Get(t.Context(), mcluster.ClusterName(name))
	if err != nil {
		t.Fatal(err)
	}
	for round, cut := range map[string]func(bool){
		"down": func(away bool) {
			if away {
				proxy.Down()
			} else if err := proxy.Up(); err != nil {
				t.Fatal(err)
			}
		},
		// Hang only affects new connections: cut the established ones
		// too, so that every connection from now on hangs.
		"hang": func(away bool) {
			proxy.Hang(away)
			if away {
				proxy.Down()
				if err := proxy.Up(); err != nil {
					t.Fatal(err)
				}
			}
		},
	} {
		cut(true)
		poll.Until(t, round+": Disconnected and MCR disengaged", func() bool {
			s, _ := f.Manager.MemberState(name)
			return s == fleetv1alpha1.MemberStateDisconnected && !slices.Contains(p.ListClusters(), mcluster.ClusterName(name))
		})
		if _, err := p.Get(t.Context(), mcluster.ClusterName(name)); !errors.Is(err, mcluster.ErrClusterNotFound) {
			t.Errorf("%s: Get of a Disconnected member: %v, want ErrClusterNotFound", round, err)
		}
		createCM(t, suite.MemberClients[0], watched, "while-"+round)
		cut(false)
		poll.Until(t, round+": reconnected member's object created while away reconciled", func() bool { return rec.has(name, "while-"+round) })
		cl1, err := p.Get(t.Context(), mcluster.ClusterName(name))
		if err != nil {
			t.Fatalf("%s: Get after reconnection: %v", round, err)
		}
		if cl1 == cl0 {
			t.Errorf("%s: reconnected with the same cluster.Cluster, want a new one", round)
		}
		cl0 = cl1
	}
}

// extraCA returns kubeconfig with one more (unrelated) CA in its
// certificate-authority-data: the same server, a different CA bundle.
func extraCA(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "review-extra-ca"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.CertificateAuthorityData = append(append([]byte{}, c.CertificateAuthorityData...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReviewRotationTokenServerCA: through the provider, a rotated
// credential keeps the cluster and engagement; a changed CA bundle and a
// changed server each end the engagement and engage a new cluster; an
// annotation touches nothing.
func TestRotationTokenServerCA(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	f.Start(t)
	name := suite.Name("rv-rot")
	secret := f.Register(t, name, suite.Kubeconfigs[0])
	a := &awareRec{}
	runProvider(t, p, a)
	poll.Until(t, "engaged once", func() bool { return len(liveOf(a.of(name))) == 1 })
	cur := a.of(name)[0]

	update := func(mut func(s *corev1.Secret)) {
		t.Helper()
		s := &corev1.Secret{}
		if err := suite.HubClient.Get(t.Context(), client.ObjectKeyFromObject(secret), s); err != nil {
			t.Fatal(err)
		}
		mut(s)
		if err := suite.HubClient.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	// credential
	rotated := suite.AdminKubeconfig(t, suite.Members[0], suite.Name("rv-rot-user"))
	update(func(s *corev1.Secret) { s.Data[registry.KubeconfigKey] = rotated })
	poll.Until(t, "the rotated kubeconfig runs", func() bool {
		_, err := f.Manager.GetRunningCluster(name, rotated)
		return err == nil
	})
	time.Sleep(time.Second)
	if es := a.of(name); len(es) != 1 || es[0].ctx.Err() != nil {
		t.Errorf("credential rotation: %d engagements, first ended=%v; want the first only, alive", len(es), es[0].ctx.Err() != nil)
	}
	if cl, _ := p.Get(t.Context(), mcluster.ClusterName(name)); cl != cur.cl {
		t.Errorf("credential rotation: Get returns another cluster.Cluster")
	}
	// annotation
	update(func(s *corev1.Secret) { metav1.SetMetaDataAnnotation(&s.ObjectMeta, "review", "x") })
	time.Sleep(time.Second)
	if n := len(a.of(name)); n != 1 {
		t.Errorf("annotation change: %d engagements, want 1", n)
	}
	// CA bundle
	withCA := extraCA(t, rotated)
	update(func(s *corev1.Secret) { s.Data[registry.KubeconfigKey] = withCA })
	poll.Until(t, "CA change: a new engagement with a new cluster, the old ended", func() bool {
		es := a.of(name)
		live := liveOf(es)
		return len(es) == 2 && len(live) == 1 && live[0].cl != cur.cl && cur.ctx.Err() != nil
	})
	cur = liveOf(a.of(name))[0]
	// server
	proxied, _ := fleettest.ViaProxy(t, withCA)
	update(func(s *corev1.Secret) { s.Data[registry.KubeconfigKey] = proxied })
	poll.Until(t, "server change: a new engagement with a new cluster, the old ended", func() bool {
		es := a.of(name)
		live := liveOf(es)
		return len(es) == 3 && len(live) == 1 && live[0].cl != cur.cl && cur.ctx.Err() != nil
	})
	if cl, err := p.Get(t.Context(), mcluster.ClusterName(name)); err != nil || cl != liveOf(a.of(name))[0].cl {
		t.Errorf("after the server change Get returns %v, %v; want the engaged cluster", cl, err)
	}
}

// TestReviewSecretRecreatedQuickly: a Secret deleted and created again
// at once, with the same name (same kubeconfig, then another server):
// MCR ends up engaged with exactly the cluster Get returns, and sees
// objects created afterwards.
func TestSecretRecreatedQuickly(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-recr")
	namespaces(t, watched)
	f, p, mgr, rec := reviewMCR(t, fleettest.FleetOptions{}, "r", watched, 0, "")
	name := suite.Name("rv-recreated")
	f.Register(t, name, suite.Kubeconfigs[0])
	a := &awareRec{}
	if err := mgr.Add(awareRunnable{a}); err != nil {
		t.Fatal(err)
	}
	start(t, mgr)
	poll.Until(t, "engaged", func() bool { return slices.Contains(p.ListClusters(), mcluster.ClusterName(name)) })
	for round, kc := range [][]byte{suite.Kubeconfigs[0], suite.Kubeconfigs[1]} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}
		if err := suite.HubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		f.Register(t, name, kc)
		cmName := fmt.Sprint("after-", round)
		createCM(t, suite.MemberClients[round], watched, cmName)
		poll.Until(t, fmt.Sprintf("round %d: object created after the re-creation reconciled", round), func() bool { return rec.has(name, cmName) })
		poll.Until(t, fmt.Sprintf("round %d: one live engagement, the cluster Get returns", round), func() bool {
			live := liveOf(a.of(name))
			cl, err := p.Get(t.Context(), mcluster.ClusterName(name))
			return err == nil && len(live) == 1 && live[0].cl == cl && slices.Contains(p.ListClusters(), mcluster.ClusterName(name))
		})
	}
	t.Logf("engagements: %d", len(a.of(name)))
}

// awareRunnable adds a recording aware to an MCR manager as MCR's own
// controllers are added.
type awareRunnable struct{ *awareRec }

func (awareRunnable) Start(ctx context.Context) error { <-ctx.Done(); return nil }

// TestReviewGetDuringDisengagement: at the moment an engagement's
// context ends (Secret deleted, or repointed), Get must no longer hand
// out the cluster that engagement was for.
func TestGetDuringDisengagement(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	f.Start(t)
	gone, repointed := suite.Name("rv-gone"), suite.Name("rv-repoint")
	f.Register(t, gone, suite.Kubeconfigs[0])
	rs := f.Register(t, repointed, suite.Kubeconfigs[0])
	var mu sync.Mutex
	stale := map[string][]string{}
	a := &awareRec{}
	a.onEnd = func(name string, old cluster.Cluster) {
		// A reconcile's next GetCluster, right as the engagement ends,
		// and a few more in the next 200 ms.
		for i := range 5 {
			cl, err := p.Get(context.Background(), mcluster.ClusterName(name))
			if err == nil && cl == old {
				mu.Lock()
				stale[name] = append(stale[name], fmt.Sprintf("+%dms: the old cluster", i*50))
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	runProvider(t, p, a)
	poll.Until(t, "both engaged", func() bool { return len(liveOf(a.of(gone))) == 1 && len(liveOf(a.of(repointed))) == 1 })
	if err := suite.HubClient.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: gone}}); err != nil {
		t.Fatal(err)
	}
	rs.Data[registry.KubeconfigKey] = suite.Kubeconfigs[1]
	if err := suite.HubClient.Update(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "both old engagements ended", func() bool { return a.of(gone)[0].ctx.Err() != nil && a.of(repointed)[0].ctx.Err() != nil })
	time.Sleep(500 * time.Millisecond)
	if _, err := p.Get(t.Context(), mcluster.ClusterName(gone)); !errors.Is(err, mcluster.ErrClusterNotFound) {
		t.Errorf("Get of the removed member: %v, want ErrClusterNotFound", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stale) > 0 {
		t.Errorf("Get handed out the cluster of an ended engagement: %v", stale)
	}
}

// TestReviewIndexFieldAfterEngaged: an index added through MCR's
// GetFieldIndexer once members are engaged and a controller's informer
// for the kind already runs reaches every member present, and one that
// joins later.
func TestIndexFieldAfterEngaged(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-idx")
	namespaces(t, watched)
	f, p, mgr, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", watched, 0, "")
	a, b := suite.Name("rv-idx-a"), suite.Name("rv-idx-b")
	f.Register(t, a, suite.Kubeconfigs[0])
	f.Register(t, b, suite.Kubeconfigs[1])
	start(t, mgr)
	poll.Until(t, "engaged", func() bool { return len(p.ListClusters()) == 2 })
	for i, cl := range suite.MemberClients[:3] {
		if err := cl.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: watched, Name: fmt.Sprint("idx-", i)}, Data: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
	}
	field := "review.k"
	if err := mgr.GetFieldIndexer().IndexField(t.Context(), &corev1.ConfigMap{}, field, func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["k"]}
	}); err != nil {
		t.Fatalf("IndexField after the members were engaged: %v", err)
	}
	c := suite.Name("rv-idx-c")
	f.Register(t, c, suite.Kubeconfigs[2])
	poll.Until(t, "late member engaged", func() bool { return len(p.ListClusters()) == 3 })
	for _, n := range []string{a, b, c} {
		var got []string
		var lastErr error
		ok := false
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			cl, err := p.Get(t.Context(), mcluster.ClusterName(n))
			if err != nil {
				lastErr = err
			} else {
				list := &corev1.ConfigMapList{}
				lastErr = cl.GetCache().List(t.Context(), list, client.InNamespace(watched), client.MatchingFields{field: "v"})
				got = nil
				for _, cm := range list.Items {
					got = append(got, cm.Name)
				}
				if lastErr == nil && len(got) == 1 {
					ok = true
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !ok {
			t.Errorf("%s: List by the index: %v, %v", n, got, lastErr)
		}
	}
}

// TestReviewLateMCRController: an MCR controller added after the manager
// started and the members were engaged: does it reconcile the members
// engaged before it (MCR's kubeconfig provider would not), and the ones
// that join after?
func TestLateMCRController(t *testing.T) {
	t.Parallel()
	watched := suite.Name("rv-late")
	namespaces(t, watched)
	f, p, mgr, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	early := suite.Name("rv-early")
	f.Register(t, early, suite.Kubeconfigs[0])
	start(t, mgr)
	poll.Until(t, "engaged", func() bool { return len(p.ListClusters()) == 1 })
	rec := &reviewRec{replica: "late", mgr: mgr}
	if err := addReviewController(mgr, "review-late", watched, rec); err != nil {
		t.Fatal(err)
	}
	later := suite.Name("rv-later")
	f.Register(t, later, suite.Kubeconfigs[1])
	createCM(t, suite.MemberClients[0], watched, "x0")
	createCM(t, suite.MemberClients[1], watched, "x1")
	poll.Until(t, "the member that joined after the controller reconciled", func() bool { return rec.has(later, "x1") })
}

// TestReviewProviderStartTwice: the provider's Start called twice, then
// the first cancelled: the second's engagements, Get and ListClusters
// stay. Start with an already-cancelled context returns at once.
func TestProviderStartTwice(t *testing.T) {
	t.Parallel()
	f, p, _, _ := reviewMCR(t, fleettest.FleetOptions{}, "r", "", 0, "")
	f.Start(t)
	names := []string{suite.Name("rv-twice"), suite.Name("rv-twice"), suite.Name("rv-twice")}
	for i, n := range names {
		f.Register(t, n, suite.Kubeconfigs[i])
	}
	f.WaitEngaged(t, names...)

	a1 := &awareRec{}
	runProvider(t, p, a1)
	poll.Until(t, "the first Start engaged with all", func() bool {
		for _, n := range names {
			if len(liveOf(a1.of(n))) != 1 {
				return false
			}
		}
		return true
	})
	// A second Start is refused at once, and leaves the first alone.
	done := make(chan error, 1)
	go func() { done <- p.Start(t.Context(), &awareRec{}) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a second Start was accepted: one provider serves one multicluster-runtime manager")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second Start did not return")
	}
	got := p.ListClusters()
	var want []mcluster.ClusterName
	for _, n := range names {
		want = append(want, mcluster.ClusterName(n))
		if len(liveOf(a1.of(n))) != 1 {
			t.Errorf("%s: the first Start's engagement ended", n)
		}
		if _, err := p.Get(t.Context(), mcluster.ClusterName(n)); err != nil {
			t.Errorf("%s: Get: %v", n, err)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if !slices.Equal(got, want) {
		t.Errorf("ListClusters after a refused second Start: %v, want %v", got, want)
	}
}
