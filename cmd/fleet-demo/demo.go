package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/fleetkube/fleet-manager/pkg/controllers"
	"github.com/fleetkube/fleet-manager/pkg/controllers/configmapreport"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// What the demo creates.
const (
	demoNamespace = "demo"
	demoConfigMap = "hello"
	demoUser      = "fleet-manager"
	// adminUser is the user of the kubeconfigs the demo writes for people.
	adminUser = "demo-admin"
)

// How long a stop waits for the fleet to be quiet (see quiesce): for a
// manager still starting, for one that has started, and for the Events of
// the last state changes to reach the hub.
const (
	startupGrace    = 30 * time.Second
	quiesceTimeout  = 5 * time.Second
	eventWriteGrace = time.Second
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

// demoCommand parses args, runs the demo until Ctrl-C or SIGTERM (or until
// it is done with -exit-when-done) and returns its error: nil when it was
// stopped by a signal. Usage errors go to stderr; the demo's sentences go
// to stdout.
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
	fs.BoolVar(&f.exitWhenDone, "exit-when-done", false, "Exit once every member's ConfigMap was reconciled and the Propagation walk-through is done, instead of waiting for Ctrl-C.")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "Fail if the fleet is not up (every member's ConfigMap reconciled, every MemberCluster Ready), or a step of the Propagation walk-through not done, within this time.")
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
	return newDemo(os.Stdout, f).run(ctx)
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

	// reportCopies is set once the Propagation walk-through is over.
	reportCopies atomic.Bool
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

// cluster is one of the demo's API servers.
type cluster struct {
	name string
	env  *envtest.Environment
	// kubeconfig is the path of a cluster admin's kubeconfig.
	kubeconfig string
	// pid is the kube-apiserver's process ID, 0 if unknown.
	pid int
}

// run runs the demo until ctx ends, or until the fleet is up if
// exitWhenDone is set. Then it stops the manager, then the API servers,
// and removes the kubeconfigs it wrote. An end of ctx is no error.
func (d *demo) run(ctx context.Context) (err error) {
	dir, err := os.MkdirTemp("", "fleet-demo-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()

	names := append([]string{"hub"}, demoMembers...)
	envs, err := d.startAPIServers(names)
	clusters := make([]*cluster, len(envs))
	for i, env := range envs {
		clusters[i] = &cluster{name: names[i], env: env}
	}
	defer func() {
		thaw(clusters)
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
	err = d.runFleet(ctx, dir, clusters)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // stopped by a signal: not a failure
	}
	return err
}

// runFleet registers the members on the hub, runs the fleet manager until
// ctx ends (or until the fleet is up with exitWhenDone), and stops it.
func (d *demo) runFleet(ctx context.Context, dir string, clusters []*cluster) (err error) {
	if err := ctx.Err(); err != nil {
		return err // interrupted while the API servers started
	}
	hub, members := clusters[0], clusters[1:]
	if err := controlplane.InstallCRDs(hub.env); err != nil {
		return fmt.Errorf("installing the CRDs on the hub: %w", err)
	}
	if err := d.writeKubeconfigs(dir, clusters); err != nil {
		return err
	}
	if err := d.register(ctx, hub.env.Config, members); err != nil {
		return err
	}
	j, err := journal.Open(filepath.Join(dir, "state"), journal.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, j.Close()) }()
	mgr, err := d.newManager(hub.env.Config, j)
	if err != nil {
		return err
	}

	d.say("starting the fleet manager…")
	// The manager outlives ctx: it is stopped only once it has started
	// (see quiesce), then the API servers after it.
	mgrCtx, stopMgr := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { d.sayStates(mgrCtx, mgr.Registry()) })
	var mgrErr error
	mgrStopped := make(chan struct{})
	go func() {
		defer close(mgrStopped)
		mgrErr = mgr.Start(mgrCtx)
	}()
	up := false
	defer func() {
		timeout := quiesceTimeout
		if !up {
			d.say("letting the fleet manager finish starting before it stops…")
			timeout = startupGrace
		}
		d.quiesce(mgr, mgrStopped, timeout)
		d.say("stopping the fleet manager…")
		stopMgr()
		<-mgrStopped
		background.Wait()
		if mgrErr != nil {
			err = errors.Join(err, fmt.Errorf("fleet manager: %w", mgrErr))
		}
	}()

	for _, m := range members {
		if err := d.createConfigMap(ctx, m.env.Config, m.name); err != nil {
			return err
		}
	}
	if err := d.awaitUp(ctx, mgr, mgrStopped); err != nil {
		return err
	}
	up = true
	if err := d.showPropagation(ctx, hub, members); err != nil {
		return err
	}
	if d.flags.exitWhenDone {
		d.say("every member reported %s/%s", demoNamespace, demoConfigMap)
		return nil
	}
	d.showTryIt(dir, clusters)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-mgrStopped:
		return errors.New("the fleet manager stopped on its own")
	}
}

// awaitUp waits until every member reported its ConfigMap and every
// MemberCluster on the hub is Ready, within the timeout flag.
func (d *demo) awaitUp(ctx context.Context, mgr *fleet.Manager, mgrStopped <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, d.flags.timeout)
	defer cancel()
	select {
	case <-d.done:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("the ConfigMaps were not all reconciled within %s", d.flags.timeout)
		}
		return ctx.Err()
	case <-mgrStopped:
		return errors.New("the fleet manager stopped on its own")
	}
	return d.awaitMemberClusters(ctx, mgr)
}

// quiesce waits, within timeout, until every MemberCluster on the hub
// shows its member's current state, then lets the Events of those
// transitions reach the hub. By then the manager has started (its
// controllers have synced their informers) and writes nothing: stopping it
// earlier cancels informer syncs and Event writes midway, which
// controller-runtime and client-go log as errors.
func (d *demo) quiesce(mgr *fleet.Manager, mgrStopped <-chan struct{}, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-mgrStopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range demoMembers {
			c, registered := mgr.Registry().Get(name)
			mc := &fleetv1alpha1.MemberCluster{}
			if err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, mc); err != nil || !registered || string(mc.Status.State) != string(c.State) {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil {
		time.Sleep(eventWriteGrace)
	}
}

// awaitMemberClusters waits until every member's MemberCluster on the hub
// is Ready.
func (d *demo) awaitMemberClusters(ctx context.Context, mgr *fleet.Manager) error {
	for _, name := range demoMembers {
		mc := &fleetv1alpha1.MemberCluster{}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, mc)
			return err == nil && mc.Status.State == fleetv1alpha1.MemberStateReady, nil
		})
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("MemberCluster %s is not Ready: %w", name, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startAPIServers starts one control plane per name, in parallel.
func (d *demo) startAPIServers(names []string) ([]*envtest.Environment, error) {
	d.say("starting the API servers of %s…", strings.Join(names, ", "))
	envs, err := controlplane.Start(len(names))
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		d.say("%s API server is up at %s", name, envs[i].Config.Host)
	}
	return envs, nil
}

// writeKubeconfigs writes a cluster admin's kubeconfig of each cluster into
// dir, and finds each member's kube-apiserver process.
func (d *demo) writeKubeconfigs(dir string, clusters []*cluster) error {
	for i, c := range clusters {
		kubeconfig, err := controlplane.AdminKubeconfig(c.env, adminUser)
		if err != nil {
			return fmt.Errorf("making an admin of %s: %w", c.name, err)
		}
		c.kubeconfig = filepath.Join(dir, c.name+".kubeconfig")
		if err := os.WriteFile(c.kubeconfig, kubeconfig, 0o600); err != nil {
			return err
		}
		if i == 0 {
			continue // the hub is not frozen: the demo needs it
		}
		if c.pid, err = controlplane.APIServerPID(c.env); err != nil {
			d.say("cannot tell the PID of %s's API server: %v", c.name, err)
		}
	}
	return nil
}

// register writes one native registration Secret per member on the hub,
// each holding the kubeconfig of an admin of that member.
func (d *demo) register(ctx context.Context, hubCfg *rest.Config, members []*cluster) error {
	hub, err := client.New(hubCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("connecting to the hub: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultNamespace}}
	if err := hub.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s on the hub: %w", fleet.DefaultNamespace, err)
	}
	for _, m := range members {
		kubeconfig, err := controlplane.AdminKubeconfig(m.env, demoUser)
		if err != nil {
			return fmt.Errorf("making an admin of %s: %w", m.name, err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: fleet.DefaultNamespace,
				Name:      m.name,
				Labels:    map[string]string{registry.KubeconfigLabel: "true"},
			},
			Data: map[string][]byte{registry.KubeconfigKey: kubeconfig},
		}
		if err := hub.Create(ctx, secret); err != nil {
			return fmt.Errorf("registering %s: %w", m.name, err)
		}
		d.say("registered %s (Secret %s/%s on the hub)", m.name, secret.Namespace, secret.Name)
	}
	return nil
}

// newManager returns a fleet manager for the hub, without metrics or
// probes, running the ConfigMap reporter on namespace demo.
func (d *demo) newManager(hubCfg *rest.Config, j *journal.Journal) (*fleet.Manager, error) {
	mgr, err := fleet.New(hubCfg, fleet.Options{Options: manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}})
	if err != nil {
		return nil, fmt.Errorf("creating the fleet manager: %w", err)
	}
	// The built-in controllers that fleet-manager run starts by default.
	if err := controllers.Start(mgr, controllers.Initializers(), controllers.Settings{Selection: []string{"*"}, Journal: j}); err != nil {
		return nil, err
	}
	reporter := &configmapreport.Reconciler{Fleet: mgr, Report: d.report}
	// During the walk-through, copies a Propagation made are shown by its
	// own lines, not the reporter's, so that the output stays short; after
	// it, the reporter shows what a newcomer does to them.
	inDemo := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, isCopy := o.GetLabels()[fleetv1alpha1.PropagationLabel]
		return o.GetNamespace() == demoNamespace && (!isCopy || d.reportCopies.Load())
	})
	if err := reporter.SetupWithManager(mgr, inDemo); err != nil {
		return nil, fmt.Errorf("adding the ConfigMap reporter: %w", err)
	}
	return mgr, nil
}

// sayStates says each member's state as the registry changes it, until
// ctx ends.
func (d *demo) sayStates(ctx context.Context, reg *registry.Registry) {
	reg.Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) {
		switch {
		case e.Removed():
			d.say("member %s left the fleet", e.Name)
		case e.Refused():
			d.say("member %s is refused: %v", e.Name, e.New.Refusal)
		case e.StateChanged():
			d.say("member %s is %s (was %s)", e.Name, e.New.State, e.Old.State)
		case e.Registered() && e.New.State != "":
			d.say("member %s is %s", e.Name, e.New.State)
		}
	})
}

// report is the reporter's Report: it says which ConfigMap was reconciled
// where, and closes done once every member reported the demo's own.
func (d *demo) report(clusterName string, cm *corev1.ConfigMap) {
	d.say("reconciled %s/%s in %s: %s", cm.Namespace, cm.Name, clusterName, summary(cm.Data))
	if cm.Name != demoConfigMap {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[clusterName] {
		delete(d.pending, clusterName)
		if len(d.pending) == 0 {
			close(d.done)
		}
	}
}

// summary shows a ConfigMap's data on one short line.
func summary(data map[string]string) string {
	if len(data) == 0 {
		return "no data"
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(data)) {
		v := data[k]
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		kv = append(kv, fmt.Sprintf("%s=%q", k, v))
	}
	return strings.Join(kv, " ")
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

// showTryIt says where the kubeconfigs are and what to try with them.
func (d *demo) showTryIt(dir string, clusters []*cluster) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	w := d.out
	fmt.Fprintf(w, "\nthe fleet is up: every member reported %s/%s and its MemberCluster is Ready.\n", demoNamespace, demoConfigMap)
	fmt.Fprintf(w, "kubeconfigs of a cluster admin, in %s (removed when the demo stops):\n", dir)
	for _, c := range clusters {
		pid := ""
		if c.pid != 0 {
			pid = fmt.Sprintf("  (kube-apiserver PID %d)", c.pid)
		}
		fmt.Fprintf(w, "  %-9s %s%s\n", c.name, c.kubeconfig, pid)
	}
	kubectl := kubectlPath()
	hub, member := clusters[0], clusters[1]
	fmt.Fprintf(w, "try, from another terminal:\n")
	fmt.Fprintf(w, "  %s --kubeconfig %s get memberclusters\n", kubectl, hub.kubeconfig)
	fmt.Fprintf(w, "  %s --kubeconfig %s -n %s get propagations\n", kubectl, hub.kubeconfig, demoNamespace)
	fmt.Fprintf(w, "  %s --kubeconfig %s -n %s label configmap %s %s=demo   # propagate it again\n", kubectl, hub.kubeconfig, demoNamespace, demoPropagation, demoAppLabel)
	fmt.Fprintf(w, "  %s --kubeconfig %s -n %s edit configmap %s   # change its color: the manager sets it back\n", kubectl, member.kubeconfig, demoNamespace, demoPropagation)
	if cli := fleetManagerPath(); cli != "" {
		fmt.Fprintf(w, "  %s --hub-kubeconfig %s status %s\n", cli, hub.kubeconfig, member.name)
	}
	fmt.Fprintf(w, "  %s --kubeconfig %s -n %s create configmap try-me --from-literal=greeting=hi\n", kubectl, member.kubeconfig, demoNamespace)
	if member.pid != 0 {
		fmt.Fprintf(w, "  kill -STOP %d   # freeze %s's API server: %s turns Unhealthy within about 10 s\n", member.pid, member.name, member.name)
		fmt.Fprintf(w, "  kill -CONT %d   # thaw it: %s is Ready again within a few seconds\n", member.pid, member.name)
	}
	fmt.Fprintf(w, "each reconcile and each member's state change shows below; press Ctrl-C to stop.\n\n")
}

// kubectlPath returns the absolute path of the kubectl `make envtest`
// built next to the API servers, or "kubectl" if there is none.
func kubectlPath() string {
	p, err := filepath.Abs(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"))
	if err != nil {
		return "kubectl"
	}
	if _, err := os.Stat(p); err != nil {
		return "kubectl"
	}
	return p
}

// fleetManagerPath returns the path of the fleet-manager binary that
// `make demo` builds beside this one, or "" if there is none.
func fleetManagerPath() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), "fleet-manager")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// thaw resumes the members' API servers, in case one was left frozen:
// a stopped process does not stop on SIGTERM.
func thaw(clusters []*cluster) {
	for _, c := range clusters {
		if c.pid != 0 {
			_ = syscall.Kill(c.pid, syscall.SIGCONT)
		}
	}
}
