package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

const (
	outageTable  = "Detection and recovery"
	outageServer = 2 // the member server the outages happen to
)

// benchOutage kills a member's API server and starts it again, then
// freezes it (SIGSTOP) and thaws it, and measures the time from each
// outage to the member being Unhealthy, and from each restoration of the
// member's server to the first reconcile of a ConfigMap created on it at
// that moment. The member reaches its server through a proxy, down while
// the killed server starts again, so that the restoration is one moment:
// the proxy coming up.
func (b *bench) benchOutage(ctx context.Context) error {
	server, err := b.lab.apiServer(outageServer)
	if err != nil {
		return err
	}
	kubeconfig, proxy, err := controlplane.ViaProxy(b.lab.kubeconfig[outageServer])
	if err != nil {
		return err
	}
	defer proxy.Close()
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2, trackRequests: true, health: member.HealthOptions{DisconnectAfter: time.Minute}})
	if err != nil {
		return err
	}
	defer b.stopFleet(f)
	name := ns + "-victim"
	if err := b.lab.register(ctx, ns, name, kubeconfig); err != nil {
		return err
	}
	if _, err := f.awaitEngaged(name, time.Minute); err != nil {
		return err
	}

	t := b.res.table(outageTable, "A member's kube-apiserver is killed (SIGKILL) and started again with the same flags, or frozen (SIGSTOP) and thawed (SIGCONT), once as soon as the member is Unhealthy and once only after it was Disconnected (a minute of failed probes: DisconnectAfter is set to 1m here, its default is 3m), when the manager has torn its connection down; its etcd keeps running. The member reaches it through a TCP proxy. Detection: from the outage until the member is Unhealthy (default probe settings). Recovery: from the member's server being restored until the first reconcile of a ConfigMap created at that moment. A killed server is restored when the proxy, down (refusing connections) from the kill until the restarted server serves, comes up again; a frozen one when it gets SIGCONT.")
	killed := func() error {
		err := server.kill()
		proxy.Down()
		return err
	}
	restarted := func() (time.Time, error) {
		if err := server.restart(); err != nil {
			return time.Time{}, err
		}
		if err := b.lab.awaitServing(ctx, outageServer); err != nil {
			return time.Time{}, err
		}
		restored := time.Now() // the clock starts as the member can reach its server, not after
		return restored, proxy.Up()
	}
	thawed := func() (time.Time, error) {
		restored := time.Now()
		return restored, server.thaw()
	}
	outages := []struct {
		name    string
		stop    func() error
		restore func() (time.Time, error)
		// until is the state the outage lasts until.
		until fleetv1alpha1.MemberState
		// recovery is multicluster-runtime's, from the outside measurement.
		recovery string
	}{
		{"killed", killed, restarted, fleetv1alpha1.MemberStateUnhealthy, ""},
		{"frozen", server.freeze, thawed, fleetv1alpha1.MemberStateUnhealthy, "18 ms"},
		{"frozen until Disconnected", server.freeze, thawed, fleetv1alpha1.MemberStateDisconnected, ""},
	}
	for i, o := range outages {
		detected, recovered, err := b.outage(ctx, f, name, fmt.Sprintf("%s-%d", ns, i), o.stop, o.restore, o.until)
		if err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
		if o.until == fleetv1alpha1.MemberStateUnhealthy {
			t.addDuration(fmt.Sprintf("%s: outage to Unhealthy", o.name), detected, atMost(5000, "never noticed"))
		}
		t.addDuration(fmt.Sprintf("%s: restored to first reconcile", o.name), recovered, atMost(100, o.recovery))
	}
	return nil
}

// outage stops the member's server, waits until the member is in state
// until, restores the server, which returns when it did, and creates a
// ConfigMap.
func (b *bench) outage(ctx context.Context, f *benchFleet, name, object string, stop func() error, restore func() (time.Time, error), until fleetv1alpha1.MemberState) (detected, recovered time.Duration, err error) {
	down := time.Now()
	if err := stop(); err != nil {
		return 0, 0, err
	}
	if err := await(fmt.Sprintf("%s %s", name, until), 2*time.Minute, func() bool {
		state, _ := f.mgr.MemberState(name)
		return state == until
	}); err != nil {
		_, restoreErr := restore()
		return 0, 0, errors.Join(err, restoreErr)
	}
	detected = time.Since(down)
	restored, err := restore()
	if err != nil {
		return 0, 0, err
	}
	if err := b.lab.clients[outageServer].Create(ctx, configMap(engageNamespace, object, 16)); err != nil {
		return 0, 0, err
	}
	reconciled, err := f.awaitReconciled(fleet.Request{ClusterName: name, NamespacedName: types.NamespacedName{Namespace: engageNamespace, Name: object}}, 2*time.Minute)
	if err != nil {
		return 0, 0, err
	}
	return detected, reconciled.Sub(restored), nil
}

// awaitServing waits until member server i answers /readyz.
func (l *lab) awaitServing(ctx context.Context, i int) error {
	cfg := rest.CopyConfig(l.servers[i].Config)
	cfg.Timeout = 200 * time.Millisecond
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return await("the API server serving", time.Minute, func() bool {
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil
	})
}

// apiServerProcess is a member server's kube-apiserver process, which the
// bench kills, starts again with the same command line, freezes and thaws.
type apiServerProcess struct {
	args []string
	env  []string
	dir  string
	pid  int
	cmd  *exec.Cmd // set once the bench started it
}

// apiServer finds member server i's kube-apiserver by its secure port.
func (l *lab) apiServer(i int) (*apiServerProcess, error) {
	if p := l.apiServers[i]; p != nil {
		return p, nil
	}
	u, err := url.Parse(l.servers[i].Config.Host)
	if err != nil {
		return nil, err
	}
	flag := []byte("--secure-port=" + u.Port())
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		cmdline, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if filepath.Base(string(args[0])) != "kube-apiserver" || !containsArg(args, flag) {
			continue
		}
		dir := filepath.Dir(f)
		pid, _ := strconv.Atoi(filepath.Base(dir))
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		p := &apiServerProcess{pid: pid, dir: cwd, env: strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")}
		for _, a := range args {
			p.args = append(p.args, string(a))
		}
		l.apiServers[i] = p
		return p, nil
	}
	return nil, fmt.Errorf("no kube-apiserver process with %s", flag)
}

func containsArg(args [][]byte, arg []byte) bool {
	for _, a := range args {
		if bytes.Equal(a, arg) {
			return true
		}
	}
	return false
}

// kill kills the process and waits until it is gone.
func (p *apiServerProcess) kill() error {
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		return err
	}
	if p.cmd != nil {
		_ = p.cmd.Wait()
		p.cmd = nil
		return nil
	}
	// envtest started it and reaps it.
	return await("kube-apiserver gone", time.Minute, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid))
		return err != nil
	})
}

// restart starts the process again with the same command line; it dies
// with the bench.
func (p *apiServerProcess) restart() error {
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	return nil
}

func (p *apiServerProcess) freeze() error { return syscall.Kill(p.pid, syscall.SIGSTOP) }
func (p *apiServerProcess) thaw() error   { return syscall.Kill(p.pid, syscall.SIGCONT) }

// stop kills the process if the bench started it; envtest stops its own.
func (p *apiServerProcess) stop() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}
