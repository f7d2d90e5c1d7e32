package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/configmapreport"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// What the demo creates.
const (
	demoNamespace = "demo"
	demoConfigMap = "hello"
	demoUser      = "fleet-manager"
)

// demoMembers are the members the demo registers.
var demoMembers = []string{"member-a", "member-b"}

// demoLogDefaults are the demo's defaults for the zap flags.
var demoLogDefaults = map[string]string{
	"zap-encoder":          "console",
	"zap-log-level":        "error",
	"zap-stacktrace-level": "panic",
}

type demoFlags struct {
	exitWhenDone bool
	timeout      time.Duration
	zap          zap.Options
}

// demoCommand parses args, runs the demo until Ctrl-C (or until it is done
// with -exit-when-done) and returns its error. Usage errors go to stderr;
// the demo's sentences go to stdout.
func demoCommand(args []string, stderr io.Writer) error {
	var f demoFlags
	fs := cli.NewFlagSet("fleet-demo", stderr, &f.zap)
	// Logs go to stderr, plain and at error level unless the flags say
	// otherwise, so that the demo's own sentences on stdout stay readable.
	for name, value := range demoLogDefaults {
		if err := fs.Set(name, value); err != nil {
			return err
		}
	}
	fs.BoolVar(&f.exitWhenDone, "exit-when-done", false, "Exit once every member's ConfigMap was reconciled, instead of waiting for Ctrl-C.")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "With -exit-when-done, fail if the ConfigMaps are not all reconciled within this time.")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if f.timeout <= 0 {
		return cli.UsageErrorf(fs, "-timeout must be positive")
	}
	cli.SetupLogging(&f.zap)

	// Unlike ctrl.SetupSignalHandler, a second signal does not exit at
	// once: the API servers run in their own process groups, and exiting
	// before they are stopped would leave them behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newDemo(os.Stdout, f).run(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // interrupted while setting up: not a failure
	}
	return err
}

// demo is one run of the demo: a hub and two members, each a local
// kube-apiserver and etcd, and a fleet manager with the ConfigMap reporter.
type demo struct {
	flags demoFlags

	// outMu serializes the sentences written to out, which come from
	// several goroutines.
	outMu sync.Mutex
	out   io.Writer

	// mu guards pending: the members whose ConfigMap was not reported yet.
	// done closes when pending becomes empty.
	mu      sync.Mutex
	pending map[string]bool
	done    chan struct{}
}

func newDemo(out io.Writer, flags demoFlags) *demo {
	d := &demo{flags: flags, out: out, pending: map[string]bool{}, done: make(chan struct{})}
	for _, name := range demoMembers {
		d.pending[name] = true
	}
	return d
}

// say writes one sentence to out.
func (d *demo) say(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

// run runs the demo until ctx ends, or until every member reported its
// ConfigMap if exitWhenDone is set. Then it stops the manager, then the
// API servers.
func (d *demo) run(ctx context.Context) (err error) {
	names := append([]string{"hub"}, demoMembers...)
	envs, err := d.startAPIServers(names)
	defer func() {
		d.say("stopping the API servers…")
		if stopErr := controlplane.Stop(envs); stopErr != nil {
			err = errors.Join(err, stopErr)
			return
		}
		d.say("stopped; bye")
	}()
	if err != nil {
		return err
	}
	hub, members := envs[0], envs[1:]
	if err := controlplane.InstallCRDs(hub); err != nil {
		return fmt.Errorf("installing the CRDs on the hub: %w", err)
	}

	if err := d.register(ctx, hub.Config, members); err != nil {
		return err
	}
	mgr, err := d.newManager(hub.Config)
	if err != nil {
		return err
	}

	d.say("starting the fleet manager…")
	mgrCtx, stopMgr := context.WithCancel(ctx)
	var mgrErr error
	mgrStopped := make(chan struct{})
	go func() {
		defer close(mgrStopped)
		mgrErr = mgr.Start(mgrCtx)
	}()
	defer func() {
		d.say("stopping the fleet manager…")
		stopMgr()
		<-mgrStopped
		if mgrErr != nil {
			err = errors.Join(err, fmt.Errorf("fleet manager: %w", mgrErr))
		}
	}()

	for i, env := range members {
		if err := d.createConfigMap(ctx, env.Config, demoMembers[i]); err != nil {
			return err
		}
	}
	return d.wait(ctx, mgr, mgrStopped)
}

// showMemberClusters waits until every member's MemberCluster on the hub is
// Ready, and says so.
func (d *demo) showMemberClusters(ctx context.Context, mgr *fleet.Manager) error {
	for _, name := range demoMembers {
		mc := &fleetv1alpha1.MemberCluster{}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, d.flags.timeout, true, func(ctx context.Context) (bool, error) {
			err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, mc)
			return err == nil && mc.Status.State == fleetv1alpha1.MemberStateReady, nil
		})
		if err != nil {
			return fmt.Errorf("MemberCluster %s is not Ready: %w", name, err)
		}
		d.say("MemberCluster %s is Ready", name)
	}
	return nil
}

// startAPIServers starts one control plane per name, in parallel.
func (d *demo) startAPIServers(names []string) ([]*envtest.Environment, error) {
	for _, name := range names {
		d.say("starting the %s API server…", name)
	}
	envs, err := controlplane.Start(len(names))
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		d.say("%s API server is up at %s", name, envs[i].Config.Host)
	}
	return envs, nil
}

// register writes one native registration Secret per member on the hub,
// each holding the kubeconfig of an admin of that member.
func (d *demo) register(ctx context.Context, hubCfg *rest.Config, members []*envtest.Environment) error {
	hub, err := client.New(hubCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("connecting to the hub: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultNamespace}}
	if err := hub.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s on the hub: %w", fleet.DefaultNamespace, err)
	}
	for i, env := range members {
		name := demoMembers[i]
		kubeconfig, err := controlplane.AdminKubeconfig(env, demoUser)
		if err != nil {
			return fmt.Errorf("making an admin of %s: %w", name, err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: fleet.DefaultNamespace,
				Name:      name,
				Labels:    map[string]string{registry.KubeconfigLabel: "true"},
			},
			Data: map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if err := hub.Create(ctx, secret); err != nil {
			return fmt.Errorf("registering %s: %w", name, err)
		}
		d.say("registered %s (Secret %s/%s on the hub)", name, secret.Namespace, secret.Name)
	}
	return nil
}

// newManager returns a fleet manager for the hub, without metrics or
// probes, running the ConfigMap reporter on namespace demo.
func (d *demo) newManager(hubCfg *rest.Config) (*fleet.Manager, error) {
	mgr, err := fleet.New(hubCfg, fleet.Options{Options: manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}})
	if err != nil {
		return nil, fmt.Errorf("creating the fleet manager: %w", err)
	}
	if err := membercluster.Add(mgr); err != nil {
		return nil, fmt.Errorf("adding the MemberCluster controller: %w", err)
	}
	reporter := &configmapreport.Reconciler{Fleet: mgr, Report: d.report}
	inDemo := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == demoNamespace })
	if err := reporter.SetupWithManager(mgr, inDemo); err != nil {
		return nil, fmt.Errorf("adding the ConfigMap reporter: %w", err)
	}
	return mgr, nil
}

// report is the reporter's Report: it says which ConfigMap was reconciled
// where, and closes done once every member reported one.
func (d *demo) report(clusterName string, cm *corev1.ConfigMap) {
	d.say("reconciled %s/%s in %s: %q", cm.Namespace, cm.Name, clusterName, cm.Data["greeting"])
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[clusterName] {
		delete(d.pending, clusterName)
		if len(d.pending) == 0 {
			close(d.done)
		}
	}
}

// createConfigMap creates namespace demo and ConfigMap demo/hello in a
// member, with a greeting that names the member.
func (d *demo) createConfigMap(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s in %s: %w", demoNamespace, name, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoConfigMap},
		Data:       map[string]string{"greeting": "hello from " + name},
	}
	if err := c.Create(ctx, cm); err != nil {
		return fmt.Errorf("creating ConfigMap %s/%s in %s: %w", demoNamespace, demoConfigMap, name, err)
	}
	d.say("created ConfigMap %s/%s in %s", demoNamespace, demoConfigMap, name)
	return nil
}

// wait waits until every member reported its ConfigMap, then, unless
// exitWhenDone is set, until ctx ends. A manager that stops on its own
// ends the wait with an error.
func (d *demo) wait(ctx context.Context, mgr *fleet.Manager, mgrStopped <-chan struct{}) error {
	errStopped := errors.New("the fleet manager stopped on its own")
	var timeout <-chan time.Time
	if d.flags.exitWhenDone {
		t := time.NewTimer(d.flags.timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		return nil
	case <-timeout:
		return fmt.Errorf("the ConfigMaps were not all reconciled within %s", d.flags.timeout)
	case <-mgrStopped:
		return errStopped
	}
	if err := d.showMemberClusters(ctx, mgr); err != nil {
		return err
	}
	if d.flags.exitWhenDone {
		d.say("every member reported %s/%s", demoNamespace, demoConfigMap)
		return nil
	}
	d.say("every member reported %s/%s; the fleet manager keeps running, press Ctrl-C to stop", demoNamespace, demoConfigMap)
	select {
	case <-ctx.Done():
		return nil
	case <-mgrStopped:
		return errStopped
	}
}
