package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The failover test's leader election: a Lease that expires 3 s after its
// last renewal, and replicas that try every 500 ms.
const (
	failoverLease  = 3 * time.Second
	failoverRenew  = 2 * time.Second
	failoverRetry  = 500 * time.Millisecond
	failoverMember = "failover-member"
)

// TestLeaderFailover runs replicas of the fleet-manager binary with
// --leader-elect on one hub, reached through a proxy. A SIGKILLed
// leader's Lease is taken over once it expires; a SIGTERMed leader
// releases it, so another replica leads within about a second; a hub
// that goes away makes the leader exit 1 about RenewDeadline into the
// outage. Each new leader engages the member.
func TestLeaderFailover(t *testing.T) {
	needAPIServers(t)
	bin := buildFleetManager(t)
	ctx := t.Context()
	admin, err := client.New(testHub.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := "failover"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	memberKubeconfig, err := controlplane.AdminKubeconfig(testMember, "fleet-manager")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: failoverMember, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{registry.KubeconfigKey: memberKubeconfig},
	}); err != nil {
		t.Fatal(err)
	}
	hubKubeconfig, err := controlplane.AdminKubeconfig(testHub, "fleet-manager")
	if err != nil {
		t.Fatal(err)
	}
	hubKubeconfig, proxy, err := controlplane.ViaProxy(hubKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	hubFile := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := os.WriteFile(hubFile, hubKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *replica { return startReplica(t, bin, hubFile, ns) }
	leaseHolder := func() string {
		var lease coordinationv1.Lease
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaderElectionID}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}

	a, b := start(), start()
	leader := awaitLeader(t, a, b)
	leader.awaitEngaged(t)
	follower := map[*replica]*replica{a: b, b: a}[leader]
	holder := leaseHolder()

	// SIGKILL: nothing releases the Lease, so it is taken over once it
	// has expired.
	killed := time.Now()
	leader.signal(t, syscall.SIGKILL)
	poll.Until(t, "the follower leading", follower.leading)
	took := time.Since(killed)
	t.Logf("SIGKILL: the follower led %s after the kill", took.Round(time.Millisecond))
	if took < failoverLease-3*failoverRetry { // the follower last saw it renewed up to 2.2 retries before
		t.Errorf("the follower led %s after the kill, before the Lease of %s expired", took, failoverLease)
	}
	if h := leaseHolder(); h == holder || h == "" {
		t.Errorf("the Lease is held by %q after the kill, want a new holder", h)
	}
	follower.awaitEngaged(t)

	// SIGTERM: the leader releases the Lease as it stops.
	leader, follower = follower, start()
	time.Sleep(2 * failoverRetry) // the new replica is following
	terminated := time.Now()
	leader.signal(t, syscall.SIGTERM)
	poll.Until(t, "the new replica leading", follower.leading)
	took = time.Since(terminated)
	t.Logf("SIGTERM: the other replica led %s after the signal", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the other replica led %s after SIGTERM, want about a second: the Lease was not released", took)
	}
	if code := leader.exitCode(t); code != 0 {
		t.Errorf("the SIGTERMed leader exited %d, want 0\n%s", code, leader.logs)
	}
	follower.awaitEngaged(t)

	// A hub outage: the leader cannot renew and exits 1 at RenewDeadline,
	// for its Deployment to restart it.
	down := time.Now()
	proxy.Down()
	code := follower.exitCode(t)
	took = time.Since(down)
	t.Logf("hub outage: the leader exited %d after %s", code, took.Round(time.Millisecond))
	if code != 1 {
		t.Errorf("the leader exited %d in a hub outage, want 1", code)
	}
	if took > failoverRenew+5*time.Second {
		t.Errorf("the leader exited %s into the hub outage, want about its renew deadline of %s", took, failoverRenew)
	}
}

// replica is a fleet-manager process and what it logged.
type replica struct {
	cmd  *exec.Cmd
	logs *syncbuffer.Buffer
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startReplica starts a replica with leader election on the fleet
// namespace ns; it is killed, if still running, when the test ends.
func startReplica(t *testing.T, bin, hubKubeconfig, ns string) *replica {
	t.Helper()
	r := &replica{logs: &syncbuffer.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin,
		"--hub-kubeconfig="+hubKubeconfig, "--namespace="+ns,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--leader-elect",
		"--leader-elect-lease-duration="+failoverLease.String(),
		"--leader-elect-renew-deadline="+failoverRenew.String(),
		"--leader-elect-retry-period="+failoverRetry.String(),
		"--probe-interval=500ms")
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if t.Failed() {
			t.Logf("replica %d logged:\n%s", r.cmd.Process.Pid, r.logs)
		}
	})
	return r
}

// leading reports whether r has acquired the Lease.
func (r *replica) leading() bool { return hasLine(r.logs.String(), "Successfully acquired lease") }

// awaitEngaged waits until r logs the member Ready: only a leader runs
// members, so r engaged it as it led.
func (r *replica) awaitEngaged(t *testing.T) {
	t.Helper()
	poll.Until(t, "the member Ready in the leader's log", func() bool {
		return hasLine(r.logs.String(), "Member state changed", `"cluster":"`+failoverMember+`"`, `"to":"Ready"`)
	})
}

func (r *replica) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// exitCode waits for r to exit and returns its exit status.
func (r *replica) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(poll.Timeout):
		t.Fatalf("replica %d did not exit", r.cmd.Process.Pid)
	}
	return r.cmd.ProcessState.ExitCode()
}

// awaitLeader waits until one of replicas leads, and returns it.
func awaitLeader(t *testing.T, replicas ...*replica) *replica {
	t.Helper()
	var leader *replica
	poll.Until(t, "a leader", func() bool {
		for _, r := range replicas {
			if r.leading() {
				leader = r
				return true
			}
		}
		return false
	})
	return leader
}

// buildFleetManager builds the fleet-manager binary into the test's
// temporary directory, as the tests are built (-race shares their build
// cache: a cold CI builds the dependencies once, not twice).
func buildFleetManager(t *testing.T) string {
	t.Helper()
	bin, err := fleetbinary.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// hasLine reports whether one line of log holds every part.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
