package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The namespaces every member API server holds. A fleet's members cache
// one of them, so one server serves many members and scenarios.
const (
	engageNamespace = "bench-engage" // one ConfigMap
	loadNamespace   = "bench-load"   // loadObjects ConfigMaps of loadBytes
	loadObjects     = 500
	loadBytes       = 2 << 10
	// thousandNamespace holds the thousandObjects ConfigMaps each of the
	// 1,000 members of the thousand scenario caches.
	thousandNamespace = "bench-thousand"
	thousandObjects   = 10
)

// lab is the bench's hub and member API servers. Many members share one
// member server under different Secret names.
type lab struct {
	hub        *envtest.Environment
	servers    []*envtest.Environment
	envs       []*envtest.Environment
	hubClient  client.Client
	clients    []client.Client // one per member server
	kubeconfig [][]byte        // an admin kubeconfig per member server
	scheme     *runtime.Scheme

	// files holds kubeconfig files for child processes: hubFile for the
	// hub, serverFiles one per member server.
	files       string
	hubFile     string
	serverFiles []string

	// apiServers are the member servers' kube-apiserver processes the
	// outage scenario found, by server.
	apiServers map[int]*apiServerProcess

	nextID atomic.Int32
}

func startLab(servers int) (*lab, error) {
	envs, err := controlplane.Start(1 + servers)
	if err != nil {
		return nil, err
	}
	l := &lab{hub: envs[0], servers: envs[1:], envs: envs, scheme: runtime.NewScheme(), apiServers: map[int]*apiServerProcess{}}
	if err := l.setUp(); err != nil {
		return nil, errors.Join(err, l.stop())
	}
	return l, nil
}

func (l *lab) setUp() error {
	if err := errors.Join(clientgoscheme.AddToScheme(l.scheme), fleetv1alpha1.AddToScheme(l.scheme)); err != nil {
		return err
	}
	if err := controlplane.InstallCRDs(l.hub); err != nil {
		return err
	}
	var err error
	if l.hubClient, err = client.New(l.hub.Config, client.Options{Scheme: l.scheme}); err != nil {
		return err
	}
	ctx := context.Background()
	errs := make([]error, len(l.servers))
	l.clients = make([]client.Client, len(l.servers))
	l.kubeconfig = make([][]byte, len(l.servers))
	var wg sync.WaitGroup
	for i, env := range l.servers {
		wg.Go(func() {
			if l.kubeconfig[i], errs[i] = controlplane.AdminKubeconfig(env, "fleet-manager"); errs[i] != nil {
				return
			}
			if l.clients[i], errs[i] = client.New(env.Config, client.Options{Scheme: l.scheme}); errs[i] != nil {
				return
			}
			errs[i] = fill(ctx, l.clients[i])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return l.writeFiles()
}

// writeFiles writes the kubeconfig files child processes read.
func (l *lab) writeFiles() error {
	var err error
	if l.files, err = os.MkdirTemp("", "fleet-bench-"); err != nil {
		return err
	}
	hub, err := controlplane.AdminKubeconfig(l.hub, "bench")
	if err != nil {
		return err
	}
	l.hubFile = filepath.Join(l.files, "hub")
	if err := os.WriteFile(l.hubFile, hub, 0o600); err != nil {
		return err
	}
	for i, kc := range l.kubeconfig {
		f := filepath.Join(l.files, fmt.Sprintf("server-%d", i))
		if err := os.WriteFile(f, kc, 0o600); err != nil {
			return err
		}
		l.serverFiles = append(l.serverFiles, f)
	}
	return nil
}

// fill creates the namespaces and objects every member server holds.
func fill(ctx context.Context, c client.Client) error {
	for _, ns := range []string{engageNamespace, loadNamespace, thousandNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, configMap(engageNamespace, "engage", 16)); err != nil {
		return err
	}
	return errors.Join(
		createConfigMaps(ctx, c, loadNamespace, "load", loadObjects, loadBytes, 8),
		createConfigMaps(ctx, c, thousandNamespace, "thousand", thousandObjects, 256, 8))
}

// createConfigMaps creates n ConfigMaps of size bytes of random data, named
// prefix-0 onwards, from parallel writers.
func createConfigMaps(ctx context.Context, c client.Client, ns, prefix string, n, size, parallel int) error {
	next := atomic.Int64{}
	errs := make([]error, parallel)
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := c.Create(ctx, configMap(ns, fmt.Sprintf("%s-%d", prefix, i), size)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func configMap(ns, name string, size int) *corev1.ConfigMap {
	data := make([]byte, size/2)
	_, _ = rand.Read(data)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{"data": hex.EncodeToString(data)},
	}
}

// stop stops every API server.
func (l *lab) stop() error {
	for _, p := range l.apiServers {
		_ = p.thaw()
		p.stop()
	}
	if l.files != "" {
		_ = os.RemoveAll(l.files)
	}
	return controlplane.Stop(l.envs)
}

// newNamespace creates a hub namespace for one fleet's Secrets and
// returns its name, which also prefixes the fleet's cluster names:
// MemberClusters are cluster-scoped, so names must not repeat across
// fleets.
func (l *lab) newNamespace(ctx context.Context) (string, error) {
	ns := fmt.Sprintf("fleet-%d", l.nextID.Add(1))
	return ns, l.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
}

// register creates a native registration Secret.
func (l *lab) register(ctx context.Context, ns, name string, kubeconfig []byte) error {
	return l.hubClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	})
}

// unregister deletes a registration Secret.
func (l *lab) unregister(ctx context.Context, ns, name string) error {
	return l.hubClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// registerAll creates one Secret per name, from parallel writers, and
// returns when each was created.
func (l *lab) registerAll(ctx context.Context, ns string, names []string, kubeconfig func(i int) []byte) ([]time.Time, error) {
	created := make([]time.Time, len(names))
	next := atomic.Int64{}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(names); i = int(next.Add(1) - 1) {
				created[i] = time.Now()
				if err := l.register(ctx, ns, names[i], kubeconfig(i)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return created, errors.Join(errs...)
}

// cleanUp deletes what a fleet left: its Secrets, namespace and
// MemberClusters on the hub, and the ConfigMaps of its namespace on every
// member server. Envtest runs no namespace controller, so a deleted
// namespace keeps its objects: they are deleted by kind, lest every run
// leave the servers busier than the last.
func (l *lab) cleanUp(ctx context.Context, ns string) error {
	errs := []error{
		l.hubClient.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns)),
		l.hubClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}),
		l.hubClient.DeleteAllOf(ctx, &fleetv1alpha1.MemberCluster{}),
	}
	for _, c := range l.clients {
		errs = append(errs, client.IgnoreNotFound(c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))))
	}
	return errors.Join(errs...)
}

// serverKubeconfig returns the kubeconfig of member i, which lives on
// server i modulo the number of servers.
func (l *lab) serverKubeconfig(i int) []byte { return l.kubeconfig[i%len(l.kubeconfig)] }
