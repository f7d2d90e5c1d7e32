package fleet_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// One hub and two members for the whole suite. Each test works in
// namespaces of its own and runs its own manager on a fleet namespace of
// its own.
var suite = &fleettest.Suite{MemberCount: 2, Parallel: 4}

func TestMain(m *testing.M) {
	code := suite.Run(m)
	if secretReader.dir != "" {
		_ = os.RemoveAll(secretReader.dir)
	}
	os.Exit(code)
}

// memberClusters adds the MemberCluster controller, as the binary runs
// it: the package's fleets run it, and several tests read MemberClusters.
func memberClusters(m *fleet.Manager) error { return membercluster.Add(m, membercluster.Options{}) }

func TestRequestsCarryTheirClusterName(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "routing", "routing", fleet.HubAndMembers, r)
	f.Register(t, "alpha", suite.Kubeconfigs[0])
	f.Register(t, "beta", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "alpha", "beta")

	fleettest.CreateConfigMap(t, suite.MemberClients[0], "routing", "same")
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "routing", "same")
	fleettest.CreateConfigMap(t, suite.HubClient, "routing", "same")
	r.WaitFor(t, fleettest.Request("alpha", "routing", "same"), fleettest.Request("beta", "routing", "same"), fleettest.Request("", "routing", "same"))
}

func TestReconcilerUsesTheMembersClient(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		if strings.HasSuffix(req.Name, "-seen") {
			return reconcile.Result{}, nil
		}
		cl, err := f.Manager.GetCluster(ctx, req.ClusterName)
		if err != nil {
			return reconcile.Result{}, err
		}
		src := &corev1.ConfigMap{}
		if err := cl.GetClient().Get(ctx, req.NamespacedName, src); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		seen := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name + "-seen"},
			Data:       map[string]string{"cluster": req.ClusterName, "uid": string(src.UID)},
		}
		return reconcile.Result{}, client.IgnoreAlreadyExists(cl.GetClient().Create(ctx, seen))
	})
	f.WatchConfigMaps(t, "writer", "readwrite", fleet.Members, reconciler)
	f.Register(t, "writer", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "readwrite", "source")

	src, seen := &corev1.ConfigMap{}, &corev1.ConfigMap{}
	poll.Until(t, "the reconciler's write in the member", func() bool {
		return suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "readwrite", Name: "source-seen"}, seen) == nil
	})
	if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "readwrite", Name: "source"}, src); err != nil {
		t.Fatal(err)
	}
	if seen.Data["cluster"] != "writer" || seen.Data["uid"] != string(src.UID) {
		t.Fatalf("reconciler wrote %v; want cluster writer and uid %s", seen.Data, src.UID)
	}
}

func TestDeletedSecretDisengagesItsMember(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "removal", "removal", fleet.Members, r)
	keep := f.Register(t, "keep", suite.Kubeconfigs[1])
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "removal", "before")
	r.WaitFor(t, fleettest.Request("keep", "removal", "before"))
	// The MemberCluster controller adds its event handler to the hub's
	// cache when its source has started, which may take longer than
	// engaging a member: wait until it reconciled, so the handler
	// predates the baseline.
	suite.WaitMemberCluster(t, "keep", "written by this fleet", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Spec.SecretRef.Namespace == f.Namespace
	})
	// The hub's event broadcaster starts with its first Event and lives
	// as long as the manager: start it before the baseline.
	f.Manager.GetEventRecorder("warm-up").Eventf(keep, nil, corev1.EventTypeNormal, "WarmUp", "Test", "before the goroutine baseline")
	baseline := goleak.IgnoreCurrent()
	// Controller-runtime's workers belong to the hub's controllers, not to
	// a member, and may start at any time.
	hubWorkers := goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority")

	gone := f.Register(t, "gone", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "removal", "before")
	r.WaitFor(t, fleettest.Request("gone", "removal", "before"))

	if err := suite.HubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "gone disengaged", func() bool {
		_, err := f.Manager.GetCluster(t.Context(), "gone")
		return !slices.Contains(f.Manager.ClusterNames(), "gone") && err != nil
	})
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "removal", "after")
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "removal", "after")
	r.WaitFor(t, fleettest.Request("keep", "removal", "after"))
	if r.Has(fleettest.Request("gone", "removal", "after")) {
		t.Fatal("a request came from a member whose Secret was deleted")
	}
	var leaked error
	deadline := time.Now().Add(time.Minute)
	for leaked = goleak.Find(baseline, hubWorkers); leaked != nil && time.Now().Before(deadline); leaked = goleak.Find(baseline, hubWorkers) {
		time.Sleep(100 * time.Millisecond)
	}
	if leaked != nil {
		t.Fatalf("the removed member's goroutines did not end: %v", leaked)
	}
}

func TestChangedKubeconfigReengages(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "repoint", "repoint", fleet.Members, r)
	s := f.Register(t, "moving", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "repoint", "first")
	r.WaitFor(t, fleettest.Request("moving", "repoint", "first"))

	s.Data[registry.KubeconfigKey] = suite.Kubeconfigs[1]
	if err := suite.HubClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "repoint", "second")
	r.WaitFor(t, fleettest.Request("moving", "repoint", "second"))
	wantHost(t, f, "moving", suite.Members[1])
}

// wantHost fails unless cluster name points at env's API server.
func wantHost(t *testing.T, f *fleettest.Fleet, name string, env *envtest.Environment) {
	t.Helper()
	cl, err := f.Manager.GetCluster(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSuffix(cl.GetConfig().Host, "/"), strings.TrimSuffix(env.Config.Host, "/"); got != want {
		t.Fatalf("cluster %s points at %s, want %s", name, got, want)
	}
}

func TestControllerAddedLaterSeesEngagedMembers(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	f.Register(t, "early-a", suite.Kubeconfigs[0])
	f.Register(t, "early-b", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "early-a", "early-b")
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "late", "existing")
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "late", "existing")

	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "late", "late", fleet.Members, r)
	r.WaitFor(t, fleettest.Request("early-a", "late", "existing"), fleettest.Request("early-b", "late", "existing"))
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "late", "new")
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "late", "new")
	r.WaitFor(t, fleettest.Request("early-a", "late", "new"), fleettest.Request("early-b", "late", "new"))
}

func TestHostileSecretsAreRefusedAndIsolated(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "isolation", "isolation", fleet.Members, r)
	// Keyed by Secret name.
	hostile := map[string]struct {
		kubeconfig  []byte
		clusterName string // the name annotation, if set
		reason      string
	}{
		"malformed":       {kubeconfig: []byte("apiVersion: v1\nclusters: [ {"), reason: "KubeconfigMalformed"},
		"exec":            {kubeconfig: fleettest.HostileKubeconfig("https://10.0.0.1", `{exec: {command: /bin/sh, args: [-c, "touch /tmp/pwned"], apiVersion: client.authentication.k8s.io/v1}}`), reason: "ExecPluginRefused"},
		"token-file":      {kubeconfig: fleettest.HostileKubeconfig("https://10.0.0.1", `{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}`), reason: "FileReference"},
		"metadata":        {kubeconfig: fleettest.HostileKubeconfig("https://169.254.169.254", `{token: `+fleettest.HostileToken+`}`), reason: "LinkLocalAddressRefused"},
		"plain-http":      {kubeconfig: fleettest.HostileKubeconfig("http://10.0.0.1", `{token: `+fleettest.HostileToken+`}`), reason: "PlainHTTPRefused"},
		"no-context":      {kubeconfig: []byte("apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: " + fleettest.HostileToken + "}}]\n"), reason: "NoCurrentContext"},
		"proxy-userinfo":  {kubeconfig: []byte(strings.Replace(string(fleettest.HostileKubeconfig("https://10.0.0.1", `{token: `+fleettest.HostileToken+`}`)), `server: "https://10.0.0.1"`, `server: "https://10.0.0.1", proxy-url: "http://svc:`+fleettest.HostilePassword+`@proxy:3128"`, 1)), reason: "ProxyRefused"},
		"server-userinfo": {kubeconfig: fleettest.HostileKubeconfig("https://admin:"+fleettest.HostilePassword+"@169.254.169.254", `{token: `+fleettest.HostileToken+`}`), reason: "LinkLocalAddressRefused"},
		"bad-name":        {kubeconfig: suite.Kubeconfigs[1], clusterName: "Bad_Name", reason: "InvalidClusterName"},
	}
	for name, h := range hostile {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: h.kubeconfig},
		}
		if h.clusterName != "" {
			s.Annotations = map[string]string{registry.ClusterNameAnnotation: h.clusterName}
		}
		if err := suite.HubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.Register(t, "healthy", suite.Kubeconfigs[0])
	fleettest.CreateConfigMap(t, suite.MemberClients[0], "isolation", "works")
	r.WaitFor(t, fleettest.Request("healthy", "isolation", "works"))

	for name, h := range hostile {
		poll.Until(t, name+" refused in the log", func() bool {
			return f.Logs.Find("Registration refused", `"reason"="`+h.reason+`"`)
		})
		f.WaitWarning(t, name, h.reason)
	}
	if names := f.Manager.ClusterNames(); !slices.Equal(names, []string{"healthy"}) {
		t.Fatalf("engaged %v; only healthy may be", names)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Fatal("an exec plugin from a Secret ran")
	}
}

func TestEveryFormatEngagesItsMember(t *testing.T) {
	t.Parallel()
	capiNS, argoNS := "capi-formats", "argocd-formats"
	fleettest.CreateNamespace(t, suite.HubClient, capiNS)
	fleettest.CreateNamespace(t, suite.HubClient, argoNS)
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.SecretFormats = []registry.Format{
			registry.MulticlusterRuntimeFormat(o.Namespace),
			registry.ClusterAPIFormat([]string{capiNS}),
			registry.ArgoCDFormat(argoNS),
		}
	}})
	secrets := []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "mcr-member", Labels: map[string]string{registry.MulticlusterRuntimeLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[0]},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: capiNS, Name: "workload-kubeconfig", Labels: map[string]string{registry.ClusterAPIClusterLabel: "workload"}},
			Type:       registry.ClusterAPISecretType,
			Data:       map[string][]byte{registry.ClusterAPIKey: suite.Kubeconfigs[1]},
		},
		{
			// Same type, not a kubeconfig: Cluster API's CA Secret.
			ObjectMeta: metav1.ObjectMeta{Namespace: capiNS, Name: "workload-ca"},
			Type:       registry.ClusterAPISecretType,
			Data:       map[string][]byte{"tls.crt": []byte("x")},
		},
		fleettest.ArgoCDSecret(t, argoNS, "argo-member", suite.Kubeconfigs[1]),
	}
	for _, s := range secrets {
		if err := suite.HubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitEngaged(t, "mcr-member", capiNS+".workload", "argo-member")
	if names := f.Manager.ClusterNames(); len(names) != 3 {
		t.Fatalf("engaged %v, want exactly the three registered members", names)
	}
	cl, err := f.Manager.GetCluster(t.Context(), "argo-member")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.GetAPIReader().List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatalf("the Argo CD member's credentials do not work: %v", err)
	}
}

func TestConflictingNamesEngageNeither(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	claim := func(secretName string, kubeconfig []byte) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: secretName, Labels: map[string]string{registry.KubeconfigLabel: "true"},
				Annotations: map[string]string{registry.ClusterNameAnnotation: "contested"}},
			Data: map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if err := suite.HubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	claim("first", suite.Kubeconfigs[0])
	f.WaitEngaged(t, "contested")
	second := claim("second", suite.Kubeconfigs[1])
	for _, name := range []string{"first", "second"} {
		f.WaitWarning(t, name, "ClusterNameConflict")
	}
	poll.Until(t, "contested disengaged", func() bool { return !slices.Contains(f.Manager.ClusterNames(), "contested") })

	if err := suite.HubClient.Delete(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	f.WaitEngaged(t, "contested")
	wantHost(t, f, "contested", suite.Members[0])
}

// TestSecretsRegisteredAtOnceSettleByName creates Secrets all at once, two
// pairs of them claiming the same name, for the provider to reconcile in
// parallel: each name ends up as its claims say.
func TestSecretsRegisteredAtOnceSettleByName(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	var wg sync.WaitGroup
	create := func(secretName, clusterName string, kubeconfig []byte) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: secretName, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if clusterName != "" {
			s.Annotations = map[string]string{registry.ClusterNameAnnotation: clusterName}
		}
		wg.Go(func() {
			if err := suite.HubClient.Create(t.Context(), s); err != nil {
				t.Error(err)
			}
		})
		return s
	}
	var solo []string
	for i := range 8 {
		solo = append(solo, fmt.Sprintf("solo-%d", i))
		create(solo[i], "", suite.Kubeconfigs[i%len(suite.Kubeconfigs)])
	}
	var firstClaims []*corev1.Secret
	for i := range 2 {
		firstClaims = append(firstClaims, create(fmt.Sprintf("claim-%d-a", i), fmt.Sprintf("contested-%d", i), suite.Kubeconfigs[0]))
		create(fmt.Sprintf("claim-%d-b", i), fmt.Sprintf("contested-%d", i), suite.Kubeconfigs[1])
	}
	wg.Wait()

	f.WaitEngaged(t, solo...)
	for i := range 2 {
		for _, side := range []string{"a", "b"} {
			f.WaitWarning(t, fmt.Sprintf("claim-%d-%s", i, side), "ClusterNameConflict")
		}
	}
	poll.Until(t, "contested names disengaged", func() bool {
		engaged := f.Manager.ClusterNames()
		return !slices.Contains(engaged, "contested-0") && !slices.Contains(engaged, "contested-1")
	})

	for _, s := range firstClaims {
		if err := suite.HubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitEngaged(t, "contested-0", "contested-1")
	wantHost(t, f, "contested-0", suite.Members[1])
	wantHost(t, f, "contested-1", suite.Members[1])

	// Writing the MemberClusters of members that arrive together, from a
	// cache that lags the writes, is no reconcile error.
	for _, name := range append(solo, "contested-0", "contested-1") {
		suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool { return mc.Status.State == fleetv1alpha1.MemberStateReady })
	}
	if f.Logs.Find("Reconciler error") {
		t.Fatal("a reconcile failed; the log says Reconciler error")
	}
}

func TestOwnsAndWatchesResolveWithinEachMember(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	r := &fleettest.Recorder{}
	// The For watch admits no event of its own, so every request below
	// comes from the Owns or the Watches handler.
	none := predicate.NewPredicateFuncs(func(client.Object) bool { return false })
	toConfigMap := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		target, ok := o.GetLabels()["points-to"]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: target}}}
	})
	err := fleet.NewControllerManagedBy(f.Manager).
		Named("owners").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(none)).
		Owns(&corev1.Secret{}).
		Watches(&corev1.ServiceAccount{}, toConfigMap).
		WithEventFilter(fleettest.InNamespace("owners")).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.Register(t, "owner-a", suite.Kubeconfigs[0])
	f.Register(t, "owner-b", suite.Kubeconfigs[1])
	f.WaitEngaged(t, "owner-a", "owner-b")

	fleettest.CreateConfigMap(t, suite.MemberClients[0], "owners", "parent")
	parent := &corev1.ConfigMap{}
	if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "owners", Name: "parent"}, parent); err != nil {
		t.Fatal(err)
	}
	child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "owners", Name: "child"}}
	if err := controllerutil.SetControllerReference(parent, child, suite.MemberClients[0].Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := suite.MemberClients[0].Create(t.Context(), child); err != nil {
		t.Fatal(err)
	}
	fleettest.CreateNamespace(t, suite.MemberClients[1], "owners")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "owners", Name: "pointer", Labels: map[string]string{"points-to": "mapped"}}}
	if err := suite.MemberClients[1].Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}

	r.WaitFor(t, fleettest.Request("owner-a", "owners", "parent"), fleettest.Request("owner-b", "owners", "mapped"))
	if r.Has(fleettest.Request("owner-b", "owners", "parent")) || r.Has(fleettest.Request("owner-a", "owners", "mapped")) {
		t.Fatal("a request was tagged with the wrong cluster")
	}
}

func TestEventsAreWrittenToTheirMember(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters})
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		cl, err := f.Manager.GetCluster(ctx, req.ClusterName)
		if err != nil {
			return reconcile.Result{}, err
		}
		cm := &corev1.ConfigMap{}
		if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		recorder, err := f.Manager.GetClusterEventRecorder(ctx, req.ClusterName, "events-test")
		if err != nil {
			return reconcile.Result{}, err
		}
		recorder.Eventf(cm, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "seen in %s", req.ClusterName)
		return reconcile.Result{}, nil
	})
	f.WatchConfigMaps(t, "events", "member-events", fleet.Members, reconciler)
	f.Register(t, "eventful", suite.Kubeconfigs[1])
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "member-events", "noted")
	poll.Until(t, "the Event in the member", func() bool {
		events := &eventsv1.EventList{}
		if err := suite.MemberClients[1].List(t.Context(), events, client.InNamespace("member-events")); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "noted" && e.Reason == "Seen" && e.Note == "seen in eventful"
		})
	})
}
