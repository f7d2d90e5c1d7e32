package member_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

var (
	members []*envtest.Environment
	// memberClients talk to members directly, as a user would. They are
	// made before any goroutine baseline, so their connections are not
	// counted as leaks.
	memberClients []client.Client
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(controlplane.RunTests(m.Run, 2, func(envs []*envtest.Environment) error {
		for _, env := range envs {
			cl, err := client.New(env.Config, client.Options{})
			if err != nil {
				return err
			}
			if err := cl.List(context.Background(), &corev1.NamespaceList{}); err != nil {
				return err
			}
			memberClients = append(memberClients, cl)
		}
		members = envs
		return nil
	}))
}

func needEnvtest(t *testing.T) {
	t.Helper()
	if members == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
}

func kubeconfig(t *testing.T, env *envtest.Environment) []byte {
	t.Helper()
	kc, err := controlplane.AdminKubeconfig(env, "pool-test")
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// watcher engages each member by watching ConfigMaps into one queue, and
// records which cluster instance each name was engaged with.
type watcher struct {
	queue   priorityqueue.PriorityQueue[engage.Request]
	engaged chan engagement
}

type engagement struct {
	name string
	cl   cluster.Cluster
}

func newWatcher() *watcher {
	return &watcher{
		queue:   priorityqueue.New[engage.Request]("pool-test"),
		engaged: make(chan engagement, 10),
	}
}

func (w *watcher) engage(ctx context.Context, name string, cl cluster.Cluster) <-chan struct{} {
	src := engage.NewKind(&corev1.ConfigMap{}, func(cluster.Cluster) handler.EventHandler {
		return &handler.EnqueueRequestForObject{}
	})
	if _, err := src.Start(ctx, name, cl, w.queue); err != nil {
		panic(err)
	}
	w.engaged <- engagement{name: name, cl: cl}
	return ctx.Done()
}

// next returns the next request, failing the test after a minute.
func (w *watcher) next(t *testing.T) engage.Request {
	t.Helper()
	got := make(chan engage.Request, 1)
	go func() {
		r, _ := w.queue.Get()
		w.queue.Done(r)
		got <- r
	}()
	select {
	case r := <-got:
		return r
	case <-time.After(time.Minute):
		t.Fatal("no request within a minute")
		return engage.Request{}
	}
}

// startPool starts a pool of opts, by default on an ObservedRegistry,
// until the test ends.
func startPool(t *testing.T, opts member.Options) *member.Pool {
	t.Helper()
	if opts.Registry == nil {
		opts.Registry = member.NewObservedRegistry(nil)
	}
	pool, err := member.NewPool(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- pool.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return pool
}

func createConfigMap(t *testing.T, cl client.Client, namespace, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := client.IgnoreAlreadyExists(cl.Create(t.Context(), ns)); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}}
	if err := cl.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}

func TestPoolRemoveLeavesNothingBehind(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)

	if err := pool.Set(registry.Registration{ClusterName: "leak-check", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	createConfigMap(t, memberClients[0], "leak-check", "one", nil)
	for r := w.next(t); r.Name != "one"; r = w.next(t) {
	}

	if !pool.Remove("leak-check") {
		t.Fatal("Remove reported no member")
	}
	if _, err := pool.Get("leak-check"); err == nil {
		t.Fatal("Get found a removed member")
	}
	waitForBaseline(t, baseline, sockets)
}

// waitForBaseline waits until no goroutine outside baseline is left and
// no more sockets are open than before. Idle HTTP/2 connections and
// informers stop asynchronously after their context ends; they get a
// bounded moment. The pool's own workers, which follow the registry and
// may have started after the baseline, are not a member's.
func waitForBaseline(t *testing.T, baseline goleak.Option, sockets int) {
	t.Helper()
	var leaked error
	for range 100 {
		leaked = goleak.Find(baseline, goleak.IgnoreTopFunction("time.Sleep"),
			goleak.IgnoreAnyFunction("github.com/fleetkube/fleet-manager/pkg/registry.(*Subscription).Next"))
		if leaked == nil && poll.OpenSockets(t) <= sockets {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d sockets open, %d before; goroutines: %v", poll.OpenSockets(t), sockets, leaked)
}

func TestPoolSetReplacesOnlyOnChange(t *testing.T) {
	needEnvtest(t)
	kcA, kcB := kubeconfig(t, members[0]), kubeconfig(t, members[1])
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})

	if err := pool.Set(registry.Registration{ClusterName: "moving", Kubeconfig: kcA}); err != nil {
		t.Fatal(err)
	}
	first := <-w.engaged
	if err := pool.Set(registry.Registration{ClusterName: "moving", Kubeconfig: kcA}); err != nil {
		t.Fatal(err)
	}
	if err := pool.Set(registry.Registration{ClusterName: "moving", Kubeconfig: kcB}); err != nil {
		t.Fatal(err)
	}
	second := <-w.engaged
	if first.cl == second.cl {
		t.Fatal("a changed kubeconfig did not build a new cluster")
	}
	select {
	case e := <-w.engaged:
		t.Fatalf("unexpected extra engagement of %q: the same kubeconfig must not re-engage", e.name)
	default:
	}
	if got, err := pool.Get("moving"); err != nil || got != second.cl {
		t.Fatalf("Get returned %v, %v; want the replacement cluster", got, err)
	}
	if got, want := strings.TrimSuffix(second.cl.GetConfig().Host, "/"), strings.TrimSuffix(members[1].Config.Host, "/"); got != want {
		t.Fatalf("replacement points at %s, want %s", got, want)
	}
	if names := pool.Names(); len(names) != 1 || names[0] != "moving" {
		t.Fatalf("Names() = %v, want [moving]", names)
	}
}

func TestPoolIndexesReachLaterMembers(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[1])
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})

	byLabel := func(o client.Object) []string { return []string{o.GetLabels()["team"]} }
	if err := pool.IndexField(t.Context(), &corev1.ConfigMap{}, "team", byLabel); err != nil {
		t.Fatal(err)
	}
	if err := pool.Set(registry.Registration{ClusterName: "indexed", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	e := <-w.engaged

	createConfigMap(t, memberClients[1], "indexed", "red", map[string]string{"team": "red"})
	for r := w.next(t); r.Name != "red"; r = w.next(t) {
	}
	list := &corev1.ConfigMapList{}
	if err := e.cl.GetCache().List(t.Context(), list, client.MatchingFields{"team": "red"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "red" {
		t.Fatalf("index lookup returned %d items, want the one ConfigMap labelled red", len(list.Items))
	}
}

func TestPoolRefusesBadRegistrations(t *testing.T) {
	pool, err := member.NewPool(member.Options{Registry: member.NewObservedRegistry(nil), Engage: engageNothing})
	if err != nil {
		t.Fatal(err)
	}
	for name, reg := range map[string]registry.Registration{
		"invalid name":       {ClusterName: "Not_A_Name", Kubeconfig: []byte("apiVersion: v1")},
		"hub name":           {ClusterName: "", Kubeconfig: []byte("apiVersion: v1")},
		"garbage kubeconfig": {ClusterName: "garbage", Kubeconfig: []byte("{{{{")},
	} {
		t.Run(name, func(t *testing.T) {
			if err := pool.Set(reg); err == nil {
				t.Fatal("Set accepted a bad registration")
			}
			if len(pool.Names()) != 0 {
				t.Fatalf("a refused registration left a member: %v", pool.Names())
			}
		})
	}
}

func TestPoolChurnReturnsToBaseline(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)

	for range 50 {
		if err := pool.Set(registry.Registration{ClusterName: "churn", Kubeconfig: kc}); err != nil {
			t.Fatal(err)
		}
		<-w.engaged
		if !pool.Remove("churn") {
			t.Fatal("Remove reported no member")
		}
	}
	waitForBaseline(t, baseline, sockets)
}

// engageNothing engages a member with nothing.
func engageNothing(ctx context.Context, _ string, _ cluster.Cluster) <-chan struct{} {
	return ctx.Done()
}

// TestGetRunningOnlyForItsKubeconfig: the pool hands out a member for a
// kubeconfig only while the member runs those very bytes.
func TestGetRunningOnlyForItsKubeconfig(t *testing.T) {
	pool, err := member.NewPool(member.Options{Registry: member.NewObservedRegistry(nil), Engage: engageNothing, Policy: kubeconfigtest.Permissive})
	if err != nil {
		t.Fatal(err)
	}
	ran := kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		cl.Server, cl.CertificateAuthorityData = "https://127.0.0.1:1", nil
	})
	other := kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		cl.Server, cl.CertificateAuthorityData = "https://127.0.0.1:2", nil
	})
	if err := pool.Set(registry.Registration{ClusterName: "running", Kubeconfig: ran}); err != nil {
		t.Fatal(err)
	}
	defer pool.Remove("running")
	if _, err := pool.GetRunning("running", other); !errors.Is(err, member.ErrOtherKubeconfig) {
		t.Errorf("GetRunning for another kubeconfig: %v, want ErrOtherKubeconfig", err)
	}
	if _, err := pool.GetRunning("running", ran); !errors.Is(err, member.ErrClusterNotConnected) {
		t.Errorf("GetRunning for its kubeconfig, not started: %v, want ErrClusterNotConnected", err)
	}
}
