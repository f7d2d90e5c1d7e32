package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// One hub and two members for the whole suite. Each test works in
// namespaces of its own and runs its own manager on a fleet namespace of
// its own.
var (
	hub           *envtest.Environment
	members       []*envtest.Environment
	hubClient     client.Client
	memberClients []client.Client
	kubeconfigs   [][]byte
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Exit(m.Run()) // envtest tests skip themselves
	}
	logf.SetLogger(suiteLogs.logger())
	klog.SetLogger(suiteLogs.logger())
	envs, err := controlplane.Start(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		hub, members = envs[0], envs[1:]
		if err := controlplane.InstallCRDs(hub); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		scheme := runtime.NewScheme()
		if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if hubClient, err = client.New(hub.Config, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, env := range members {
			cl, err := client.New(env.Config, client.Options{})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			// One request now, so the client's connection predates any
			// goroutine baseline.
			if err := cl.List(context.Background(), &corev1.NamespaceList{}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			kc, err := controlplane.AdminKubeconfig(env, "fleet-manager")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			memberClients = append(memberClients, cl)
			kubeconfigs = append(kubeconfigs, kc)
		}
		code := m.Run()
		secrets, err := suiteCredentials()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if leaked := suiteLogs.holding(secrets); leaked != "" {
			fmt.Fprintf(os.Stderr, "credential material appeared in the logs: %s\n", leaked)
			return 1
		}
		// Nothing the suite's managers wrote for others to read holds any.
		if leaked, err := controlplane.FindPublishedCredential(context.Background(), hub.Config, secrets); err != nil || leaked != "" {
			fmt.Fprintf(os.Stderr, "credential material was published on the hub: %s %v\n", leaked, err)
			return 1
		}
		return code
	}()
	_ = controlplane.Stop(envs)
	os.Exit(code)
}

var fleetNamespaces atomic.Int32

// fleetEnv is one test's fleet: a manager on a fleet namespace of its own,
// and what it logged.
type fleetEnv struct {
	mgr       *fleet.Manager
	namespace string
	logs      *logLines
}

func startFleet(t *testing.T) *fleetEnv {
	t.Helper()
	return startFleetWith(t, nil)
}

// startFleetWith starts a fleet, on a fleet namespace of its own, whose
// options configure adjusts; it is stopped when the test ends.
func startFleetWith(t *testing.T, configure func(o *fleet.Options)) *fleetEnv {
	t.Helper()
	f := newFleetOn(t, mclNamespace(t), configure)
	f.start(t)
	return f.fleetEnv
}

func (f *fleetEnv) register(t *testing.T, name string, kubeconfig []byte) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	}
	if err := hubClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitEngaged waits until every controller that accepts them has engaged
// the named clusters.
func (f *fleetEnv) waitEngaged(t *testing.T, names ...string) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("clusters %v engaged", names), func() bool {
		engaged := f.mgr.ClusterNames()
		for _, n := range names {
			if !slices.Contains(engaged, n) {
				return false
			}
			for _, e := range f.mgr.Engagements(n) {
				if !e.Engaged {
					return false
				}
			}
		}
		return true
	})
}

// recorder is a reconciler that remembers every request.
type recorder struct {
	mu   sync.Mutex
	seen []fleet.Request
}

func (r *recorder) Reconcile(_ context.Context, req fleet.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req)
	return reconcile.Result{}, nil
}

func (r *recorder) has(req fleet.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.seen, req)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) waitFor(t *testing.T, reqs ...fleet.Request) {
	t.Helper()
	for _, req := range reqs {
		poll.Until(t, "reconcile of "+req.String(), func() bool { return r.has(req) })
	}
}

func request(clusterName, namespace, name string) fleet.Request {
	return fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}

// inNamespace keeps a controller to its test's objects.
func inNamespace(ns string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
}

func watchConfigMaps(t *testing.T, f *fleetEnv, name, ns string, clusters fleet.Clusters, r fleet.Reconciler) {
	t.Helper()
	err := fleet.NewControllerManagedBy(f.mgr).
		Named(name).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(inNamespace(ns))).
		WatchClusters(clusters).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
}

func createNamespace(t *testing.T, cl client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := client.IgnoreAlreadyExists(cl.Create(t.Context(), ns)); err != nil {
		t.Fatal(err)
	}
}

func createConfigMap(t *testing.T, cl client.Client, namespace, name string) {
	t.Helper()
	createNamespace(t, cl, namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := cl.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}

// logLines collects what a logger wrote. Every test's lines are also
// collected in suiteLogs, with klog's, and checked for credentials when
// the suite ends.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

var suiteLogs = &logLines{}

func (l *logLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.add(prefix + " " + args)
		if l != suiteLogs {
			suiteLogs.add(prefix + " " + args)
		}
	}, funcr.Options{Verbosity: 4})
}

// suiteCredentials is the credential material the suite's tests use: of
// the members' kubeconfigs, kubeconfigtest's, and the hostile test's.
func suiteCredentials() ([]string, error) {
	secrets, err := kubeconfigtest.CredentialsOf(kubeconfigs...)
	return append(secrets, append(kubeconfigtest.Secrets, hostileToken, hostilePassword)...), err
}

// holding returns the first log line holding any of secrets.
func (l *logLines) holding(secrets []string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		for _, secret := range secrets {
			if strings.Contains(line, secret) {
				return line
			}
		}
	}
	return ""
}

// find reports whether a line holds every one of parts.
func (l *logLines) find(parts ...string) bool {
	return l.first(parts...) != ""
}

// first returns the first line that holds every one of parts, or "".
func (l *logLines) first(parts ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.lines, func(line string) bool {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				return false
			}
		}
		return true
	})
	if i < 0 {
		return ""
	}
	return l.lines[i]
}

func TestRequestsCarryTheirClusterName(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	watchConfigMaps(t, f, "routing", "routing", fleet.HubAndMembers, r)
	f.register(t, "alpha", kubeconfigs[0])
	f.register(t, "beta", kubeconfigs[1])
	f.waitEngaged(t, "alpha", "beta")

	createConfigMap(t, memberClients[0], "routing", "same")
	createConfigMap(t, memberClients[1], "routing", "same")
	createConfigMap(t, hubClient, "routing", "same")
	r.waitFor(t, request("alpha", "routing", "same"), request("beta", "routing", "same"), request("", "routing", "same"))
}

func TestReconcilerUsesTheMembersClient(t *testing.T) {
	f := startFleet(t)
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		if strings.HasSuffix(req.Name, "-seen") {
			return reconcile.Result{}, nil
		}
		cl, err := f.mgr.GetCluster(ctx, req.ClusterName)
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
	watchConfigMaps(t, f, "writer", "readwrite", fleet.Members, reconciler)
	f.register(t, "writer", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "readwrite", "source")

	src, seen := &corev1.ConfigMap{}, &corev1.ConfigMap{}
	poll.Until(t, "the reconciler's write in the member", func() bool {
		return memberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "readwrite", Name: "source-seen"}, seen) == nil
	})
	if err := memberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "readwrite", Name: "source"}, src); err != nil {
		t.Fatal(err)
	}
	if seen.Data["cluster"] != "writer" || seen.Data["uid"] != string(src.UID) {
		t.Fatalf("reconciler wrote %v; want cluster writer and uid %s", seen.Data, src.UID)
	}
}

func TestDeletedSecretDisengagesItsMember(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	watchConfigMaps(t, f, "removal", "removal", fleet.Members, r)
	keep := f.register(t, "keep", kubeconfigs[1])
	createConfigMap(t, memberClients[1], "removal", "before")
	r.waitFor(t, request("keep", "removal", "before"))
	// The MemberCluster controller adds its event handler to the hub's
	// cache when its source has started, which may take longer than
	// engaging a member: wait until it reconciled, so the handler
	// predates the baseline.
	memberCluster(t, "keep", "written by this fleet", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Spec.SecretRef.Namespace == f.namespace
	})
	// The hub's event broadcaster starts with its first Event and lives
	// as long as the manager: start it before the baseline.
	f.mgr.GetEventRecorder("warm-up").Eventf(keep, nil, corev1.EventTypeNormal, "WarmUp", "Test", "before the goroutine baseline")
	baseline := goleak.IgnoreCurrent()
	// Controller-runtime's workers belong to the hub's controllers, not to
	// a member, and may start at any time.
	hubWorkers := goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority")

	gone := f.register(t, "gone", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "removal", "before")
	r.waitFor(t, request("gone", "removal", "before"))

	if err := hubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "gone disengaged", func() bool {
		_, err := f.mgr.GetCluster(t.Context(), "gone")
		return !slices.Contains(f.mgr.ClusterNames(), "gone") && err != nil
	})
	createConfigMap(t, memberClients[0], "removal", "after")
	createConfigMap(t, memberClients[1], "removal", "after")
	r.waitFor(t, request("keep", "removal", "after"))
	if r.has(request("gone", "removal", "after")) {
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
	f := startFleet(t)
	r := &recorder{}
	watchConfigMaps(t, f, "repoint", "repoint", fleet.Members, r)
	s := f.register(t, "moving", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "repoint", "first")
	r.waitFor(t, request("moving", "repoint", "first"))

	s.Data[registry.KubeconfigKey] = kubeconfigs[1]
	if err := hubClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, memberClients[1], "repoint", "second")
	r.waitFor(t, request("moving", "repoint", "second"))
	f.wantHost(t, "moving", members[1])
}

// waitForWarning waits for a Warning Event with reason about the Secret
// secretName of the fleet namespace.
func (f *fleetEnv) waitForWarning(t *testing.T, secretName, reason string) {
	t.Helper()
	poll.Until(t, reason+" reported on Secret "+secretName, func() bool {
		events := &eventsv1.EventList{}
		if err := hubClient.List(t.Context(), events, client.InNamespace(f.namespace)); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == secretName && e.Reason == reason && e.Type == corev1.EventTypeWarning
		})
	})
}

// wantHost fails unless cluster name points at env's API server.
func (f *fleetEnv) wantHost(t *testing.T, name string, env *envtest.Environment) {
	t.Helper()
	cl, err := f.mgr.GetCluster(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSuffix(cl.GetConfig().Host, "/"), strings.TrimSuffix(env.Config.Host, "/"); got != want {
		t.Fatalf("cluster %s points at %s, want %s", name, got, want)
	}
}

func TestControllerAddedLaterSeesEngagedMembers(t *testing.T) {
	f := startFleet(t)
	f.register(t, "early-a", kubeconfigs[0])
	f.register(t, "early-b", kubeconfigs[1])
	f.waitEngaged(t, "early-a", "early-b")
	createConfigMap(t, memberClients[0], "late", "existing")
	createConfigMap(t, memberClients[1], "late", "existing")

	r := &recorder{}
	watchConfigMaps(t, f, "late", "late", fleet.Members, r)
	r.waitFor(t, request("early-a", "late", "existing"), request("early-b", "late", "existing"))
	createConfigMap(t, memberClients[0], "late", "new")
	createConfigMap(t, memberClients[1], "late", "new")
	r.waitFor(t, request("early-a", "late", "new"), request("early-b", "late", "new"))
}

// hostileToken and hostilePassword are credentials in the hostile
// Secrets; they must never show up in a log line or on the hub.
const (
	hostileToken    = "hostile-token-7f3a9c1e5b"
	hostilePassword = "S3cret-5d0e"
)

// hostileKubeconfig is a kubeconfig for a server of the test's choosing
// whose user entry is the YAML user.
func hostileKubeconfig(server, user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: ` + user + `}]
`)
}

func TestHostileSecretsAreRefusedAndIsolated(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
	watchConfigMaps(t, f, "isolation", "isolation", fleet.Members, r)
	// Keyed by Secret name.
	hostile := map[string]struct {
		kubeconfig  []byte
		clusterName string // the name annotation, if set
		reason      string
	}{
		"malformed":       {kubeconfig: []byte("apiVersion: v1\nclusters: [ {"), reason: "KubeconfigMalformed"},
		"exec":            {kubeconfig: hostileKubeconfig("https://10.0.0.1", `{exec: {command: /bin/sh, args: [-c, "touch /tmp/pwned"], apiVersion: client.authentication.k8s.io/v1}}`), reason: "ExecPluginRefused"},
		"token-file":      {kubeconfig: hostileKubeconfig("https://10.0.0.1", `{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}`), reason: "FileReference"},
		"metadata":        {kubeconfig: hostileKubeconfig("https://169.254.169.254", `{token: `+hostileToken+`}`), reason: "LinkLocalAddressRefused"},
		"plain-http":      {kubeconfig: hostileKubeconfig("http://10.0.0.1", `{token: `+hostileToken+`}`), reason: "PlainHTTPRefused"},
		"no-context":      {kubeconfig: []byte("apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: " + hostileToken + "}}]\n"), reason: "NoCurrentContext"},
		"proxy-userinfo":  {kubeconfig: []byte(strings.Replace(string(hostileKubeconfig("https://10.0.0.1", `{token: `+hostileToken+`}`)), `server: "https://10.0.0.1"`, `server: "https://10.0.0.1", proxy-url: "http://svc:`+hostilePassword+`@proxy:3128"`, 1)), reason: "ProxyRefused"},
		"server-userinfo": {kubeconfig: hostileKubeconfig("https://admin:"+hostilePassword+"@169.254.169.254", `{token: `+hostileToken+`}`), reason: "LinkLocalAddressRefused"},
		"bad-name":        {kubeconfig: kubeconfigs[1], clusterName: "Bad_Name", reason: "InvalidClusterName"},
	}
	for name, h := range hostile {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: h.kubeconfig},
		}
		if h.clusterName != "" {
			s.Annotations = map[string]string{registry.ClusterNameAnnotation: h.clusterName}
		}
		if err := hubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.register(t, "healthy", kubeconfigs[0])
	createConfigMap(t, memberClients[0], "isolation", "works")
	r.waitFor(t, request("healthy", "isolation", "works"))

	for name, h := range hostile {
		poll.Until(t, name+" refused in the log", func() bool {
			return f.logs.find("Registration refused", `"reason"="`+h.reason+`"`)
		})
		f.waitForWarning(t, name, h.reason)
	}
	if names := f.mgr.ClusterNames(); !slices.Equal(names, []string{"healthy"}) {
		t.Fatalf("engaged %v; only healthy may be", names)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Fatal("an exec plugin from a Secret ran")
	}
}

func TestEveryFormatEngagesItsMember(t *testing.T) {
	capiNS, argoNS := "capi-formats", "argocd-formats"
	createNamespace(t, hubClient, capiNS)
	createNamespace(t, hubClient, argoNS)
	f := startFleetWith(t, func(o *fleet.Options) {
		o.SecretFormats = []registry.Format{
			registry.MulticlusterRuntimeFormat(o.Namespace),
			registry.ClusterAPIFormat([]string{capiNS}),
			registry.ArgoCDFormat(argoNS),
		}
	})
	secrets := []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "mcr-member", Labels: map[string]string{registry.MulticlusterRuntimeLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: kubeconfigs[0]},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: capiNS, Name: "workload-kubeconfig", Labels: map[string]string{registry.ClusterAPIClusterLabel: "workload"}},
			Type:       registry.ClusterAPISecretType,
			Data:       map[string][]byte{registry.ClusterAPIKey: kubeconfigs[1]},
		},
		{
			// Same type, not a kubeconfig: Cluster API's CA Secret.
			ObjectMeta: metav1.ObjectMeta{Namespace: capiNS, Name: "workload-ca"},
			Type:       registry.ClusterAPISecretType,
			Data:       map[string][]byte{"tls.crt": []byte("x")},
		},
		argoCDSecret(t, argoNS, "argo-member", kubeconfigs[1]),
	}
	for _, s := range secrets {
		if err := hubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.waitEngaged(t, "mcr-member", capiNS+".workload", "argo-member")
	if names := f.mgr.ClusterNames(); len(names) != 3 {
		t.Fatalf("engaged %v, want exactly the three registered members", names)
	}
	cl, err := f.mgr.GetCluster(t.Context(), "argo-member")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.GetAPIReader().List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatalf("the Argo CD member's credentials do not work: %v", err)
	}
}

// argoCDSecret is an Argo CD cluster Secret carrying the server and
// credentials of kubeconfig, as Argo CD writes them, with the extra keys
// real ones have.
func argoCDSecret(t *testing.T, namespace, name string, kubeconfig []byte) *corev1.Secret {
	t.Helper()
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kctx := raw.Contexts[raw.CurrentContext]
	server, user := raw.Clusters[kctx.Cluster], raw.AuthInfos[kctx.AuthInfo]
	config, err := json.Marshal(map[string]any{
		"tlsClientConfig": map[string]any{
			"caData":   server.CertificateAuthorityData,
			"certData": user.ClientCertificateData,
			"keyData":  user.ClientKeyData,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "cluster-" + name, Labels: map[string]string{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType}},
		Data: map[string][]byte{
			"name": []byte(name), "server": []byte(server.Server), "config": config,
			"project": []byte("default"), "namespaces": []byte(""), "clusterResources": []byte("true"), "shard": []byte("0"),
		},
	}
}

func TestConflictingNamesEngageNeither(t *testing.T) {
	f := startFleet(t)
	claim := func(secretName string, kubeconfig []byte) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: secretName, Labels: map[string]string{registry.KubeconfigLabel: "true"},
				Annotations: map[string]string{registry.ClusterNameAnnotation: "contested"}},
			Data: map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if err := hubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	claim("first", kubeconfigs[0])
	f.waitEngaged(t, "contested")
	second := claim("second", kubeconfigs[1])
	for _, name := range []string{"first", "second"} {
		f.waitForWarning(t, name, "ClusterNameConflict")
	}
	poll.Until(t, "contested disengaged", func() bool { return !slices.Contains(f.mgr.ClusterNames(), "contested") })

	if err := hubClient.Delete(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	f.waitEngaged(t, "contested")
	f.wantHost(t, "contested", members[0])
}

// TestSecretsRegisteredAtOnceSettleByName creates Secrets all at once, two
// pairs of them claiming the same name, for the provider to reconcile in
// parallel: each name ends up as its claims say.
func TestSecretsRegisteredAtOnceSettleByName(t *testing.T) {
	f := startFleet(t)
	var wg sync.WaitGroup
	create := func(secretName, clusterName string, kubeconfig []byte) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: secretName, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if clusterName != "" {
			s.Annotations = map[string]string{registry.ClusterNameAnnotation: clusterName}
		}
		wg.Go(func() {
			if err := hubClient.Create(t.Context(), s); err != nil {
				t.Error(err)
			}
		})
		return s
	}
	var solo []string
	for i := range 8 {
		solo = append(solo, fmt.Sprintf("solo-%d", i))
		create(solo[i], "", kubeconfigs[i%len(kubeconfigs)])
	}
	var firstClaims []*corev1.Secret
	for i := range 2 {
		firstClaims = append(firstClaims, create(fmt.Sprintf("claim-%d-a", i), fmt.Sprintf("contested-%d", i), kubeconfigs[0]))
		create(fmt.Sprintf("claim-%d-b", i), fmt.Sprintf("contested-%d", i), kubeconfigs[1])
	}
	wg.Wait()

	f.waitEngaged(t, solo...)
	for i := range 2 {
		for _, side := range []string{"a", "b"} {
			f.waitForWarning(t, fmt.Sprintf("claim-%d-%s", i, side), "ClusterNameConflict")
		}
	}
	poll.Until(t, "contested names disengaged", func() bool {
		engaged := f.mgr.ClusterNames()
		return !slices.Contains(engaged, "contested-0") && !slices.Contains(engaged, "contested-1")
	})

	for _, s := range firstClaims {
		if err := hubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.waitEngaged(t, "contested-0", "contested-1")
	f.wantHost(t, "contested-0", members[1])
	f.wantHost(t, "contested-1", members[1])

	// Writing the MemberClusters of members that arrive together, from a
	// cache that lags the writes, is no reconcile error.
	for _, name := range append(solo, "contested-0", "contested-1") {
		memberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool { return mc.Status.State == fleetv1alpha1.MemberStateReady })
	}
	if f.logs.find("Reconciler error") {
		t.Fatal("a reconcile failed; the log says Reconciler error")
	}
}

func TestOwnsAndWatchesResolveWithinEachMember(t *testing.T) {
	f := startFleet(t)
	r := &recorder{}
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
	err := fleet.NewControllerManagedBy(f.mgr).
		Named("owners").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(none)).
		Owns(&corev1.Secret{}).
		Watches(&corev1.ServiceAccount{}, toConfigMap).
		WithEventFilter(inNamespace("owners")).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "owner-a", kubeconfigs[0])
	f.register(t, "owner-b", kubeconfigs[1])
	f.waitEngaged(t, "owner-a", "owner-b")

	createConfigMap(t, memberClients[0], "owners", "parent")
	parent := &corev1.ConfigMap{}
	if err := memberClients[0].Get(t.Context(), types.NamespacedName{Namespace: "owners", Name: "parent"}, parent); err != nil {
		t.Fatal(err)
	}
	child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "owners", Name: "child"}}
	if err := controllerutil.SetControllerReference(parent, child, memberClients[0].Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := memberClients[0].Create(t.Context(), child); err != nil {
		t.Fatal(err)
	}
	createNamespace(t, memberClients[1], "owners")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "owners", Name: "pointer", Labels: map[string]string{"points-to": "mapped"}}}
	if err := memberClients[1].Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}

	r.waitFor(t, request("owner-a", "owners", "parent"), request("owner-b", "owners", "mapped"))
	if r.has(request("owner-b", "owners", "parent")) || r.has(request("owner-a", "owners", "mapped")) {
		t.Fatal("a request was tagged with the wrong cluster")
	}
}

func TestEventsAreWrittenToTheirMember(t *testing.T) {
	f := startFleet(t)
	reconciler := fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		cl, err := f.mgr.GetCluster(ctx, req.ClusterName)
		if err != nil {
			return reconcile.Result{}, err
		}
		cm := &corev1.ConfigMap{}
		if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		recorder, err := f.mgr.GetClusterEventRecorder(ctx, req.ClusterName, "events-test")
		if err != nil {
			return reconcile.Result{}, err
		}
		recorder.Eventf(cm, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "seen in %s", req.ClusterName)
		return reconcile.Result{}, nil
	})
	watchConfigMaps(t, f, "events", "member-events", fleet.Members, reconciler)
	f.register(t, "eventful", kubeconfigs[1])
	createConfigMap(t, memberClients[1], "member-events", "noted")
	poll.Until(t, "the Event in the member", func() bool {
		events := &eventsv1.EventList{}
		if err := memberClients[1].List(t.Context(), events, client.InNamespace("member-events")); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "noted" && e.Reason == "Seen" && e.Note == "seen in eventful"
		})
	})
}
