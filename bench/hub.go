package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

const (
	hubOutageTable = "Hub outage"
	failoverTable  = "Leader failover"
	startupTable   = "Start-up"
)

// benchHubOutage takes the hub away from a running fleet manager, which
// reaches it through a TCP proxy, for a while, then brings it back and
// creates a registration Secret at that moment: the time from the hub's
// return until the new member is engaged.
func (b *bench) benchHubOutage(ctx context.Context) error {
	outage := 20 * time.Second
	if b.quick {
		outage = 8 * time.Second
	}
	hub, proxy, err := controlplane.ProxyConfig(b.lab.hub.Config)
	if err != nil {
		return err
	}
	defer proxy.Close()
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(hub, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2})
	if err != nil {
		return err
	}
	defer b.stopFleet(f)
	if err := b.lab.register(ctx, ns, ns+"-before", b.lab.serverKubeconfig(0)); err != nil {
		return err
	}
	if _, err := f.awaitEngaged(ns+"-before", time.Minute); err != nil {
		return err
	}

	t := b.res.table(hubOutageTable, fmt.Sprintf("A fleet manager (the library, in the bench's process) reaches its hub through a TCP proxy, which refuses connections for %s; as it listens again, a registration Secret is created. From the hub's return until the new member's first reconcile.", outage))
	name := fmt.Sprintf("hub down %s: return to new member engaged", outage)
	proxy.Down()
	select {
	case <-ctx.Done():
		return errors.Join(ctx.Err(), proxy.Up())
	case <-time.After(outage):
	}
	returned := time.Now() // the clock starts as the hub listens, not after
	if err := proxy.Up(); err != nil {
		return err
	}
	if err := b.lab.register(ctx, ns, ns+"-after", b.lab.serverKubeconfig(1)); err != nil {
		return err
	}
	engaged, err := f.awaitEngaged(ns+"-after", 2*time.Minute)
	if err != nil {
		t.fail(name, "ms", err.Error(), atMost(5000, ""))
		return nil
	}
	t.addDuration(name, engaged.Sub(returned), atMost(5000, ""))
	return nil
}

// benchFailover runs two fleet-manager processes with --leader-elect on
// one fleet, kills the leader (SIGKILL), then stops the next leader
// (SIGTERM): the time from each signal until the other replica holds the
// Lease, and until it has engaged every member.
func (b *bench) benchFailover(ctx context.Context) error {
	members := 20
	lease, renew, retry := 15*time.Second, 10*time.Second, 2*time.Second // run's defaults
	if b.quick {
		members = 5
		lease, renew, retry = 5*time.Second, 4*time.Second, time.Second
	}
	bin, err := b.fleetManagerBinary()
	if err != nil {
		return err
	}
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	names := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%d", ns, i)
	}
	if _, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	start := func() (*replica, error) {
		return startReplica(bin, "--hub-kubeconfig="+b.lab.hubFile, "--namespace="+ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--allow-duplicate-clusters", "--leader-elect",
			"--leader-elect-lease-duration="+lease.String(),
			"--leader-elect-renew-deadline="+renew.String(),
			"--leader-elect-retry-period="+retry.String())
	}
	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.kill()
		}
	}()
	for range 2 {
		r, err := start()
		if err != nil {
			return err
		}
		replicas = append(replicas, r)
	}
	leader, err := awaitReplica(time.Minute, func(r *replica) bool { return r.ready(members) }, replicas...)
	if err != nil {
		return err
	}

	t := b.res.table(failoverTable, fmt.Sprintf("Two fleet-manager processes with --leader-elect (Lease %s, renew deadline %s, retry %s) on one fleet of %d members; the leader is killed (SIGKILL), then the next leader is stopped (SIGTERM), a third replica following. From the signal until the other replica logs that it acquired the Lease, and until it has logged every member Ready.", lease, renew, retry, members))
	for _, sig := range []struct {
		name   string
		signal syscall.Signal
		limit  time.Duration
	}{
		// Nothing releases a killed leader's Lease: it expires.
		{"SIGKILL", syscall.SIGKILL, lease + 5*time.Second},
		// A stopped leader releases it, for the follower's next retry.
		{"SIGTERM", syscall.SIGTERM, 3 * time.Second},
	} {
		var follower *replica
		for _, r := range replicas {
			if r != leader && !r.exited() {
				follower = r
			}
		}
		signalled := time.Now()
		if err := leader.cmd.Process.Signal(sig.signal); err != nil {
			return err
		}
		acquiredName := fmt.Sprintf("%s: signal to Lease acquired", sig.name)
		engagedName := fmt.Sprintf("%s: signal to %d members engaged", sig.name, members)
		if err := await("the follower leading", lease+time.Minute, follower.leading); err != nil {
			t.fail(acquiredName, "ms", err.Error(), atMost(ms(sig.limit), ""))
			return nil
		}
		acquired := follower.acquiredAt()
		if err := await("the follower's members Ready", 2*time.Minute, func() bool { return follower.ready(members) }); err != nil {
			t.fail(engagedName, "ms", err.Error(), nil)
			return nil
		}
		t.addDuration(acquiredName, acquired.Sub(signalled), atMost(ms(sig.limit), ""))
		t.addDuration(engagedName, follower.readyAt().Sub(signalled), nil)
		leader = follower
		if sig.signal == syscall.SIGKILL {
			r, err := start() // the one to take over from the SIGTERMed leader
			if err != nil {
				return err
			}
			replicas = append(replicas, r)
			time.Sleep(2 * retry) // it follows
		}
	}
	return nil
}

// fleetManagerBinary builds the fleet-manager command into the lab's
// files, once.
func (b *bench) fleetManagerBinary() (string, error) {
	bin := filepath.Join(b.lab.files, "fleet-manager")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fleet-manager")
	cmd.Dir = b.repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building fleet-manager: %w\n%s", err, out)
	}
	return bin, nil
}

// replica is a fleet-manager process, whose JSON log lines the bench
// reads as they come: when it acquired the Lease, and when each member
// was first Ready.
type replica struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu         sync.Mutex
	acquired   time.Time
	firstReady map[string]time.Time // by member
	lastReady  time.Time            // the latest of firstReady
}

func startReplica(bin string, args ...string) (*replica, error) {
	r := &replica{cmd: exec.Command(bin, args...), done: make(chan struct{}), firstReady: map[string]time.Time{}}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.read(sc.Bytes(), time.Now())
		}
		_ = r.cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

// read takes one log line, read at now.
func (r *replica) read(line []byte, now time.Time) {
	var entry struct {
		Msg     string `json:"msg"`
		Cluster string `json:"cluster"`
		To      string `json:"to"`
	}
	if json.Unmarshal(line, &entry) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case entry.Msg == "Successfully acquired lease" && r.acquired.IsZero():
		r.acquired = now
	case entry.Msg == "Member state changed" && entry.To == "Ready":
		if _, ok := r.firstReady[entry.Cluster]; !ok {
			r.firstReady[entry.Cluster] = now
			r.lastReady = now
		}
	}
}

func (r *replica) leading() bool { return !r.acquiredAt().IsZero() }

func (r *replica) acquiredAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acquired
}

// ready reports whether r logged members Ready.
func (r *replica) ready(members int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.firstReady) >= members
}

// readyAt returns when r logged its latest member Ready for the first
// time.
func (r *replica) readyAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastReady
}

func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *replica) kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// awaitReplica waits until one of replicas satisfies cond.
func awaitReplica(timeout time.Duration, cond func(*replica) bool, replicas ...*replica) (*replica, error) {
	var found *replica
	err := await("a replica", timeout, func() bool {
		for _, r := range replicas {
			if cond(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found, err
}

// benchStartup registers Secrets, members sharing the member servers,
// then starts a fleet manager as a library user runs one (fleet.New and
// the MemberCluster controller): the time from its start until every
// MemberCluster has a status.
func (b *bench) benchStartup(ctx context.Context) error {
	secrets := 500
	if b.quick {
		secrets = 100
	}
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	names := make([]string, secrets)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%d", ns, i)
	}
	if _, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
		return err
	}

	t := b.res.table(startupTable, fmt.Sprintf("%d registration Secrets exist (members sharing the %d member servers); a fleet manager starts (fleet.New and membercluster.Add, default options but AllowDuplicateClusters, in the bench's process). From its start until every MemberCluster has status.state set, polled every 100 ms.", secrets, len(b.lab.servers)))
	name := fmt.Sprintf("%d Secrets: start to every MemberCluster with status", secrets)
	started := time.Now()
	mgr, err := fleet.New(b.lab.hub.Config, managerOptions(ns))
	if err != nil {
		return err
	}
	if err := membercluster.Add(mgr, membercluster.Options{}); err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.progress("stopping fleet: %v", err)
		}
	}()
	err = await("every MemberCluster with status", 2*time.Minute, func() bool {
		time.Sleep(100 * time.Millisecond)
		var list fleetv1alpha1.MemberClusterList
		if b.lab.hubClient.List(ctx, &list) != nil {
			return false
		}
		withStatus := 0
		for _, mc := range list.Items {
			if mc.Status.State != "" && mc.Spec.SecretRef.Namespace == ns {
				withStatus++
			}
		}
		return withStatus >= secrets
	})
	if err != nil {
		t.fail(name, "ms", err.Error(), atMost(10000, ""))
		return nil
	}
	t.addDuration(name, time.Since(started), atMost(10000, ""))
	return nil
}
