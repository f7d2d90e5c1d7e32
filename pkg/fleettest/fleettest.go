package fleettest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ErrNoAssets is returned by New when $KUBEBUILDER_ASSETS is not set.
var ErrNoAssets = errors.New("fleettest: $KUBEBUILDER_ASSETS names no directory of kube-apiserver, etcd and kubectl")

// Options say what fleet to start. The zero value is a hub and two
// members, in fleet namespace "fleet-system", with no controller.
type Options struct {
	// Members is how many member API servers to start; default 2.
	Members int
	// Namespace is the fleet namespace; default "fleet-system".
	Namespace string
	// Setup adds the controllers under test to the manager before it
	// starts, as a program does between fleet.New and Start.
	Setup func(m *fleet.Manager) error
	// MulticlusterRuntime, if set, adds multicluster-runtime controllers
	// (mcbuilder): the fleet then runs as an MCR manager on the fleet's
	// provider (pkg/mcprovider), the hub its local cluster, which starts
	// the fleet manager and its Setup controllers too.
	MulticlusterRuntime func(mgr mcmanager.Manager) error
	// Configure adjusts the manager's options last.
	Configure func(o *fleet.Options)
	// Logger is the manager's logger; default none.
	Logger logr.Logger
	// Timeout bounds the wait for every member to be Ready and engaged;
	// default 2 minutes.
	Timeout time.Duration
}

// Member is one member of a test fleet.
type Member struct {
	// Name is its cluster name in the fleet: member-0, member-1, ...
	Name string
	// Config reaches its API server as an administrator.
	Config *rest.Config
	// Client is an administrator's client of it.
	Client client.Client
	// Kubeconfig is what its registration Secret holds.
	Kubeconfig []byte
}

// Fleet is a running test fleet.
type Fleet struct {
	// Manager is the fleet's manager, started.
	Manager *fleet.Manager
	// MulticlusterRuntime is the MCR manager on the fleet's provider,
	// with Options.MulticlusterRuntime; nil without.
	MulticlusterRuntime mcmanager.Manager
	// Namespace is the fleet namespace.
	Namespace string
	// HubConfig reaches the hub as an administrator.
	HubConfig *rest.Config
	// Hub is an administrator's client of the hub, knowing the fleet's
	// and Kubernetes' types.
	Hub client.Client
	// Members are the members, registered, Ready and engaged.
	Members []Member

	envs   []*envtest.Environment
	cancel context.CancelFunc
	done   chan error
}

// Start starts a fleet as opts say for test t, and stops it when t ends;
// it skips t when $KUBEBUILDER_ASSETS is not set.
func Start(t testing.TB, opts Options) *Fleet {
	t.Helper()
	f, err := New(opts)
	if errors.Is(err, ErrNoAssets) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// New starts a fleet as opts say; the caller stops it with Stop.
func New(opts Options) (_ *Fleet, err error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, ErrNoAssets
	}
	if opts.Members <= 0 {
		opts.Members = 2
	}
	if opts.Namespace == "" {
		opts.Namespace = "fleet-system"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	envs, err := controlplane.Start(1 + opts.Members)
	if err != nil {
		return nil, err
	}
	f := &Fleet{Namespace: opts.Namespace, envs: envs, HubConfig: envs[0].Config}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Stop())
		}
	}()
	if err := f.startHub(opts); err != nil {
		return nil, err
	}
	if err := f.register(); err != nil {
		return nil, err
	}
	return f, f.waitEngaged(opts.Timeout)
}

// startHub installs the CRDs and starts the manager.
func (f *Fleet) startHub(opts Options) error {
	if err := controlplane.InstallCRDs(f.envs[0]); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	hub, err := client.New(f.HubConfig, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	f.Hub = hub
	ctx := context.Background()
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.Namespace}}); err != nil {
		return err
	}
	logger := opts.Logger
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	o := fleet.Options{
		Options: manager.Options{
			Logger:                 logger,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			// Tests of one process may build controllers of one name.
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		},
		Namespace: f.Namespace,
	}
	if opts.Configure != nil {
		opts.Configure(&o)
	}
	m, err := fleet.New(f.HubConfig, o)
	if err != nil {
		return err
	}
	if opts.Setup != nil {
		if err := opts.Setup(m); err != nil {
			return err
		}
	}
	f.Manager = m
	run := m.Start
	if opts.MulticlusterRuntime != nil {
		mc, err := mcmanager.WithMultiCluster(m, mcprovider.New(m, mcprovider.Options{}))
		if err != nil {
			return err
		}
		if err := opts.MulticlusterRuntime(mc); err != nil {
			return err
		}
		f.MulticlusterRuntime, run = mc, mc.Start
	}
	ctx, f.cancel = context.WithCancel(ctx)
	f.done = make(chan error, 1)
	go func() { f.done <- run(ctx) }()
	return nil
}

// register registers each member by a kubeconfig Secret.
func (f *Fleet) register() error {
	for i, env := range f.envs[1:] {
		kc, err := controlplane.AdminKubeconfig(env, "fleet-manager")
		if err != nil {
			return err
		}
		cl, err := client.New(env.Config, client.Options{})
		if err != nil {
			return err
		}
		m := Member{Name: fmt.Sprintf("member-%d", i), Config: env.Config, Client: cl, Kubeconfig: kc}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: m.Name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: kc},
		}
		if err := f.Hub.Create(context.Background(), secret); err != nil {
			return err
		}
		f.Members = append(f.Members, m)
	}
	return nil
}

// waitEngaged waits until every member is Ready and engaged by every
// controller that accepts it.
func (f *Fleet) waitEngaged(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		waiting := f.notEngaged()
		if waiting == "" {
			return nil
		}
		select {
		case err := <-f.done:
			f.done <- err
			return fmt.Errorf("fleettest: the manager stopped before the members were engaged: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleettest: not engaged within %s: %s", timeout, waiting)
		}
	}
}

// notEngaged names the first member not yet Ready and engaged, "" when
// all are.
func (f *Fleet) notEngaged() string {
	engaged := f.Manager.ClusterNames()
	for _, m := range f.Members {
		if state, _ := f.Manager.MemberState(m.Name); state != fleetv1alpha1.MemberStateReady {
			return fmt.Sprintf("%s is %q", m.Name, state)
		}
		if !slices.Contains(engaged, m.Name) {
			return m.Name + " is not engaged"
		}
		for _, e := range f.Manager.Engagements(m.Name) {
			if !e.Engaged {
				return fmt.Sprintf("%s is not engaged by %s", m.Name, e.Aware)
			}
		}
	}
	return ""
}

// Member returns the member named name, and false if there is none.
func (f *Fleet) Member(name string) (Member, bool) {
	i := slices.IndexFunc(f.Members, func(m Member) bool { return m.Name == name })
	if i < 0 {
		return Member{}, false
	}
	return f.Members[i], true
}

// Stop stops the manager, waits for it, then stops the API servers.
func (f *Fleet) Stop() error {
	var errs []error
	if f.cancel != nil {
		f.cancel()
		if err := <-f.done; err != nil {
			errs = append(errs, err)
		}
		f.cancel = nil
	}
	if f.envs != nil {
		errs = append(errs, controlplane.Stop(f.envs))
		f.envs = nil
	}
	return errors.Join(errs...)
}
