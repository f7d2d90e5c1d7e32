package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

const shardTable = "Replicas that share the fleet"

const (
	// shardChildEnv, set in a child's environment, makes it run
	// runShardChild: one replica of a shared fleet.
	shardChildEnv = "BENCH_SHARD_CHILD"
	// replicaUserAgent starts the user agent of every replica's hub
	// requests, by which the hub's audit log tells its writes apart.
	replicaUserAgent = "fleet-bench-replica/"
	// tickNamespace holds the ConfigMap tickName that every member server
	// updates every tickInterval in the handoff part, so that each member
	// of its fleet is reconciled all the time.
	tickNamespace = "bench-shard"
	tickName      = "tick"
	tickInterval  = 100 * time.Millisecond
	// steadyWindow is how long the hub's writes are counted, from
	// steadyAfterSettled after the fleet settled.
	steadyWindow       = 30 * time.Second
	steadyAfterSettled = 5 * time.Second
)

// handoffTimings are the handoff part's shard timings, shorter than the
// defaults so that a killed replica's Lease expires soon.
var handoffTimings = shard.Options{LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}

// shardSizes are the member counts of the scenario's parts: the
// handoffs, the fleets of three replicas (the first also counts the steady
// writes and has a fourth replica join) and the memory comparison.
type shardSizes struct {
	handoff int
	fleets  []int
	memory  int
}

var (
	fullShard  = shardSizes{handoff: 60, fleets: []int{1000, 3000}, memory: 300}
	quickShard = shardSizes{handoff: 30, fleets: []int{300}, memory: 150}
)

// shardNote explains the shard figures of a run of sizes.
func shardNote(sizes shardSizes, quick bool) string {
	note := fmt.Sprintf("Replicas of one fleet (fleet.Options.Shard, the library with the MemberCluster controller and a ConfigMap controller of 2 workers, each in a child process of its own) on a hub of the scenario's own, which logs every write request (audit policy at Metadata level); members are names over the %d member servers. "+
		"Handoffs: %d members, Lease %s, renew deadline %s, retry %s (run's defaults are 15 s, 10 s, 2 s); every member server updates a ConfigMap every %s, so that each member is reconciled all the time by its owner, which reports each reconcile with its time: the figures' resolution. "+
		"Three replicas settle (each member owned, by Manager.Owns, by exactly one running replica, and its MemberCluster Ready naming that replica in status.replica); a fourth joins; then one is stopped (SIGTERM: it hands its members over); then one is killed (SIGKILL). "+
		"A moved member's pause is from its old owner's last reconcile to its new owner's first after the event. After SIGKILL, the clock starts at the kill and stops when every member the killed replica owned was reconciled by another replica; the target is the Lease duration + 2 s. "+
		"Fleets of %s members, run's default timings, members caching %d ConfigMaps: three replicas start at once, the members registered before; start to all settled as above. "+
		"Most members run at once: the peak, read every 50 ms by each replica, of the members it runs, owned or incoming (taken over: connected, caches syncing, work held), whatever their owner once settled. "+
		"Steady hub writes, on the first of these fleets: the audit log's write requests by the replicas' user agent over %s, from %s after the fleet settled. "+
		"Then a fourth replica joins the first of these fleets: the share of members whose owner changed. "+
		"Memory: %d members caching %d ConfigMaps of %d KiB each, as in the Memory table; one replica with all of them, then three replicas started at once, each a process; once every member is owned by one replica that reconciled each of its objects, every process reads its RSS %s later, then its live heap after two collections; the largest replica against the one, at each GOGC of the Memory tables, and the share of the members that replica owns (rendezvous hashing is not an even split).",
		memberServers, sizes.handoff, handoffTimings.LeaseDuration, handoffTimings.RenewDeadline, handoffTimings.RetryPeriod, tickInterval,
		joinInts(sizes.fleets), thousandObjects, steadyWindow, steadyAfterSettled, sizes.memory, loadObjects, loadBytes>>10, childIdle)
	if quick {
		note += fmt.Sprintf(" Quick mode runs fewer members than a full run (handoffs of %d, fleets of %s, memory of %d): the steady writes and the fourth replica on %d members, not %d; memory with %d, where a process's fixed cost weighs more in the ratio.",
			fullShard.handoff, joinInts(fullShard.fleets), fullShard.memory, sizes.fleets[0], fullShard.fleets[0], sizes.memory)
	}
	return note
}

// benchShard runs replicas that share one fleet: handoffs (a replica
// joining, leaving, killed), fleets of many members on three replicas
// (time to settle, steady hub writes, the members a fourth replica
// moves), and the memory of a replica against one replica of the whole
// fleet.
func (b *bench) benchShard(ctx context.Context) error {
	sizes := fullShard
	if b.quick {
		sizes = quickShard
	}
	t := b.res.table(shardTable, shardNote(sizes, b.quick))
	hub, err := startShardHub(b.lab.scheme)
	if err != nil {
		return fmt.Errorf("starting an audited hub: %w", err)
	}
	defer func() {
		if err := hub.stop(); err != nil {
			b.progress("stopping the audited hub: %v", err)
		}
	}()
	b.progress("  handoffs, %d members", sizes.handoff)
	if err := b.shardHandoffs(ctx, t, hub, sizes.handoff); err != nil {
		return fmt.Errorf("handoffs: %w", err)
	}
	for i, n := range sizes.fleets {
		b.progress("  %d members on 3 replicas", n)
		if err := b.shardFleetOf(ctx, t, hub, n, i == 0); err != nil {
			return fmt.Errorf("%d members: %w", n, err)
		}
	}
	for _, m := range b.memorySettings() {
		b.progress("  memory, %d members, %s", sizes.memory, gogcLabel(m.gogc))
		if err := b.shardMemory(ctx, t, hub, sizes.memory, m.gogc); err != nil {
			return fmt.Errorf("memory, %s: %w", gogcLabel(m.gogc), err)
		}
	}
	return nil
}

// shardFigure is a figure of the shard table, declared before it is
// measured so that a part that cannot go on fails the rest.
type shardFigure struct {
	name, unit string
	target     *target
}

func (f shardFigure) add(t *table, v float64) { t.add(f.name, f.unit, v, f.target) }

// failFigures records a failed run of each of figs.
func failFigures(t *table, why error, figs ...shardFigure) {
	for _, f := range figs {
		t.fail(f.name, f.unit, why.Error(), f.target)
	}
}

// shardHandoffs runs three replicas with short Leases on n members that
// are reconciled all the time, then a fourth joins, one is stopped and
// one is killed: the reconcile pauses of the members that move, and the
// time until another replica reconciles the killed one's members.
func (b *bench) shardHandoffs(ctx context.Context, t *table, hub *shardHub, n int) error {
	failoverLimit := handoffTimings.LeaseDuration + 2*time.Second
	joinPause := shardFigure{"a 4th replica joins 3: reconcile pause per moved member, p99", "ms", atMost(1000, "")}
	joinStray := shardFigure{"a 4th replica joins 3: members moved to another replica than it", "members", atMost(0, "")}
	leavePause := shardFigure{"a replica stopped (SIGTERM): reconcile pause per moved member, p99", "ms", atMost(1000, "")}
	leaveStray := shardFigure{"a replica stopped (SIGTERM): members moved that it did not own", "members", atMost(0, "")}
	failover := shardFigure{"a replica killed (SIGKILL): kill to each of its members reconciled by another replica", "ms", atMost(ms(failoverLimit), "")}

	stopTicks, err := b.tick(ctx)
	if err != nil {
		return err
	}
	defer stopTicks()
	f, err := newShardFleet(ctx, hub, b.lab, n, replicaConfig{watch: tickNamespace, events: true, timings: handoffTimings})
	if err != nil {
		return err
	}
	defer b.closeShardFleet(ctx, f)
	for i := range 3 {
		if err := f.start(fmt.Sprintf("replica-%d", i)); err != nil {
			return err
		}
	}
	owner, _, err := f.settled(time.Minute)
	if err != nil {
		failFigures(t, err, joinPause, joinStray, leavePause, leaveStray, failover)
		return nil
	}

	// A fourth joins: only its share moves, all to it.
	joined := time.Now()
	if err := f.start("replica-3"); err != nil {
		return err
	}
	after, _, err := f.settled(time.Minute)
	if err != nil {
		failFigures(t, err, joinPause, joinStray, leavePause, leaveStray, failover)
		return nil
	}
	moved := movedMembers(owner, after)
	joinStray.add(t, float64(countIf(moved, func(m string) bool { return after[m] != "replica-3" })))
	if err := f.addPauses(t, joinPause, moved, owner, joined); err != nil {
		failFigures(t, err, leavePause, leaveStray, failover)
		return nil
	}

	// replica-1 leaves: it hands its members over, make-before-break.
	owner = after
	leaving := f.replica("replica-1")
	left := time.Now()
	if err := leaving.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := await("replica-1 to exit", time.Minute, leaving.exited); err != nil {
		failFigures(t, err, leavePause, leaveStray, failover)
		return nil
	}
	if after, _, err = f.settled(time.Minute); err != nil {
		failFigures(t, err, leavePause, leaveStray, failover)
		return nil
	}
	moved = movedMembers(owner, after)
	leaveStray.add(t, float64(countIf(moved, func(m string) bool { return owner[m] != "replica-1" })))
	if err := f.addPauses(t, leavePause, moved, owner, left); err != nil {
		failFigures(t, err, failover)
		return nil
	}

	// replica-2 is killed: the others take its members once its Lease
	// expires.
	victim := f.replica("replica-2")
	lost := victim.ownedMembers()
	if len(lost) == 0 {
		failFigures(t, errors.New("the replica to kill owns no member"), failover)
		return nil
	}
	killed := time.Now()
	victim.kill()
	var last time.Time
	for _, m := range lost {
		err := await(m+" reconciled by another replica", failoverLimit+time.Minute, func() bool {
			at, ok := f.log.firstElsewhere(m, victim.name, killed)
			last = maxTime(last, at)
			return ok
		})
		if err != nil {
			failFigures(t, err, failover)
			return nil
		}
	}
	failover.add(t, ms(last.Sub(killed)))
	return nil
}

// addPauses waits until each moved member was reconciled by a replica
// other than its owner in before, after since, and adds the p99 of their
// pauses to fig.
func (f *shardFleet) addPauses(t *table, fig shardFigure, moved []string, before map[string]string, since time.Time) error {
	if len(moved) == 0 {
		return errors.New("no member moved")
	}
	var pauses []time.Duration
	for _, m := range moved {
		var pause time.Duration
		err := await(m+" reconciled by its new owner", time.Minute, func() bool {
			var ok bool
			pause, ok = f.log.pause(m, before[m], since)
			return ok
		})
		if err != nil {
			return err
		}
		pauses = append(pauses, pause)
	}
	fig.add(t, ms(percentile(pauses, 99)))
	return nil
}

// movedMembers lists the members whose owner differs in after.
func movedMembers(before, after map[string]string) []string {
	var moved []string
	for _, m := range sortedKeys(before) {
		if after[m] != before[m] {
			moved = append(moved, m)
		}
	}
	return moved
}

// countIf counts the members for which cond holds.
func countIf(members []string, cond func(string) bool) int {
	n := 0
	for _, m := range members {
		if cond(m) {
			n++
		}
	}
	return n
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// shardFleetOf runs three replicas, started at once, on n members
// registered before: the time until all settled; with steady, the hub
// writes over steadyWindow and the members a fourth replica moves.
func (b *bench) shardFleetOf(ctx context.Context, t *table, hub *shardHub, n int, steady bool) error {
	deadline := settleDeadline + time.Duration(n/1000)*time.Minute
	settledIn := shardFigure{fmt.Sprintf("%d members on 3 replicas: start to all owned and Ready", n), "s", nil}
	settledCount := shardFigure{fmt.Sprintf("%d members on 3 replicas: owned and Ready within %s", n, deadline), "members", atLeast(float64(n), "")}
	mostRun := shardFigure{fmt.Sprintf("%d members on 3 replicas: most members one ran at once, incoming or owned", n), "members", nil}
	writes := shardFigure{fmt.Sprintf("%d members on 3 replicas: steady hub writes", n), "/s", atMost(3, "")}
	leaseWrites := shardFigure{fmt.Sprintf("%d members on 3 replicas: steady hub writes of Leases", n), "/s", nil}
	moved := shardFigure{fmt.Sprintf("%d members, a 4th replica joins 3: members moved", n), "%", atMost(30, "")}
	stray := shardFigure{fmt.Sprintf("%d members, a 4th replica joins 3: members moved to another replica than it", n), "members", atMost(0, "")}
	later := []shardFigure{writes, leaseWrites, moved, stray}
	if !steady {
		later = nil
	}

	f, err := newShardFleet(ctx, hub, b.lab, n, replicaConfig{watch: thousandNamespace})
	if err != nil {
		return err
	}
	defer b.closeShardFleet(ctx, f)
	started := time.Now()
	for i := range 3 {
		if err := f.start(fmt.Sprintf("replica-%d", i)); err != nil {
			return err
		}
	}
	owner, good, err := f.settled(deadline)
	settledCount.add(t, float64(good))
	if err != nil {
		failFigures(t, err, append([]shardFigure{settledIn, mostRun}, later...)...)
		return nil
	}
	settledIn.add(t, time.Since(started).Seconds())
	mostRun.add(t, float64(slices.Max(f.mostRun())))
	if !steady {
		return nil
	}

	time.Sleep(steadyAfterSettled)
	from := time.Now()
	time.Sleep(steadyWindow)
	all, err := hub.writes(from, time.Now())
	if err != nil {
		return err
	}
	byKind := map[string]int{}
	for _, w := range all {
		byKind[w.Verb+" "+w.Resource]++
	}
	b.progress("  hub writes in %s: %v", steadyWindow, byKind)
	writes.add(t, float64(len(all))/steadyWindow.Seconds())
	leaseWrites.add(t, float64(byKind["update leases"])/steadyWindow.Seconds())

	if err := f.start("replica-3"); err != nil {
		return err
	}
	after, _, err := f.settled(deadline)
	if err != nil {
		failFigures(t, err, moved, stray)
		return nil
	}
	changed := movedMembers(owner, after)
	moved.add(t, 100*float64(len(changed))/float64(n))
	stray.add(t, float64(countIf(changed, func(m string) bool { return after[m] != "replica-3" })))
	return nil
}

// shardMemory runs one replica of n members caching loadObjects
// ConfigMaps each, then three replicas of them, with gogc, and compares
// the largest replica's RSS with the one's.
func (b *bench) shardMemory(ctx context.Context, t *table, hub *shardHub, n int, gogc string) error {
	of := fmt.Sprintf("%d members, %s", n, gogcLabel(gogc))
	oneRSS := shardFigure{of + ": one replica's RSS", "MiB", nil}
	largestRSS := shardFigure{of + ": largest of 3 replicas' RSS", "MiB", nil}
	rssRatio := shardFigure{of + ": largest of 3 replicas ÷ one replica, RSS", "×", atMost(0.4, "")}
	heapRatio := shardFigure{of + ": largest of 3 replicas ÷ one replica, live heap", "×", nil}
	share := shardFigure{of + ": share of the members owned by the replica of largest RSS", "%", nil}
	mostRun := shardFigure{of + ": most members one of 3 replicas ran at once, incoming or owned", "members", nil}

	var unsettled *settleError
	one, err := b.shardMemoryOf(ctx, hub, n, gogc, 1)
	if errors.As(err, &unsettled) {
		failFigures(t, fmt.Errorf("one replica: %w", err), oneRSS, largestRSS, rssRatio, heapRatio, share, mostRun)
		return nil
	}
	if err != nil {
		return err
	}
	oneRSS.add(t, float64(one[0].RSSBytes)/mib)
	three, err := b.shardMemoryOf(ctx, hub, n, gogc, 3)
	if errors.As(err, &unsettled) {
		failFigures(t, fmt.Errorf("three replicas: %w", err), largestRSS, rssRatio, heapRatio, share, mostRun)
		return nil
	}
	if err != nil {
		return err
	}
	largest := slices.MaxFunc(three, func(a, b replicaMemory) int { return int(a.RSSBytes - b.RSSBytes) })
	largestHeap := slices.MaxFunc(three, func(a, b replicaMemory) int { return int(a.HeapBytes) - int(b.HeapBytes) })
	largestRSS.add(t, float64(largest.RSSBytes)/mib)
	rssRatio.add(t, float64(largest.RSSBytes)/float64(one[0].RSSBytes))
	heapRatio.add(t, float64(largestHeap.HeapBytes)/float64(one[0].HeapBytes))
	share.add(t, 100*float64(largest.owned)/float64(n))
	mostRun.add(t, float64(slices.MaxFunc(three, func(a, b replicaMemory) int { return a.mostRun - b.mostRun }).mostRun))
	return nil
}

// replicaMemory is a replica's memory report, the members it owned and
// the most it ran at once.
type replicaMemory struct {
	childReport
	owned, mostRun int
}

// shardMemoryOf runs replicas processes with gogc on n members caching
// loadObjects ConfigMaps each, and returns their memory once every member
// settled; a *settleError if they did not within settleDeadline.
func (b *bench) shardMemoryOf(ctx context.Context, hub *shardHub, n int, gogc string, replicas int) ([]replicaMemory, error) {
	f, err := newShardFleet(ctx, hub, b.lab, n, replicaConfig{env: gogcEnv(gogc), watch: loadNamespace, objects: loadObjects})
	if err != nil {
		return nil, err
	}
	defer b.closeShardFleet(ctx, f)
	for i := range replicas {
		if err := f.start(fmt.Sprintf("replica-%d", i)); err != nil {
			return nil, err
		}
	}
	owner, _, err := f.settled(settleDeadline)
	if err != nil {
		return nil, err
	}
	for _, r := range f.replicas {
		if _, err := io.WriteString(r.stdin, "memory\n"); err != nil {
			return nil, err
		}
	}
	var reports []replicaMemory
	for _, r := range f.replicas {
		select {
		case m := <-r.memory:
			owned := countIf(slices.Collect(maps.Values(owner)), func(o string) bool { return o == r.name })
			reports = append(reports, replicaMemory{m, owned, r.mostRun()})
		case <-r.done:
			return nil, fmt.Errorf("%s exited: %s", r.name, r.stderr.String())
		case <-time.After(childIdle + time.Minute):
			return nil, fmt.Errorf("%s reported no memory", r.name)
		}
	}
	return reports, nil
}

// tick updates ConfigMap tickName in tickNamespace on every member server
// every tickInterval until the returned function is called.
func (b *bench) tick(ctx context.Context) (stop func(), err error) {
	for _, c := range b.lab.clients {
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tickNamespace}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tickNamespace, Name: tickName}},
		} {
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, err
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range b.lab.clients {
		wg.Go(func() {
			ticker := time.NewTicker(tickInterval)
			defer ticker.Stop()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tickNamespace, Name: tickName}}
			for n := 0; ; n++ {
				patch := fmt.Appendf(nil, `{"data":{"n":"%d"}}`, n)
				if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil && ctx.Err() == nil {
					b.progress("  ticking: %v", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }, nil
}

// shardHub is the scenario's hub, which logs every write request.
type shardHub struct {
	env        *envtest.Environment
	dir        string
	client     client.Client
	kubeconfig string // a file
	nextID     atomic.Int32
}

func startShardHub(scheme *runtime.Scheme) (*shardHub, error) {
	dir, err := os.MkdirTemp("", "fleet-bench-shard-")
	if err != nil {
		return nil, err
	}
	envs, err := controlplane.StartAudited(1, dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	h := &shardHub{env: envs[0], dir: dir, kubeconfig: filepath.Join(dir, "hub")}
	if err := h.setUp(scheme); err != nil {
		return nil, errors.Join(err, h.stop())
	}
	return h, nil
}

func (h *shardHub) setUp(scheme *runtime.Scheme) error {
	if err := controlplane.InstallCRDs(h.env); err != nil {
		return err
	}
	var err error
	if h.client, err = client.New(h.env.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	kubeconfig, err := controlplane.AdminKubeconfig(h.env, "bench")
	if err != nil {
		return err
	}
	return os.WriteFile(h.kubeconfig, kubeconfig, 0o600)
}

func (h *shardHub) stop() error {
	return errors.Join(controlplane.Stop([]*envtest.Environment{h.env}), os.RemoveAll(h.dir))
}

// writes returns the replicas' write requests that completed between
// from and to.
func (h *shardHub) writes(from, to time.Time) ([]controlplane.Write, error) {
	all, err := controlplane.Writes(controlplane.AuditLog(h.dir, 0), replicaUserAgent, from)
	return slices.DeleteFunc(all, func(w controlplane.Write) bool { return w.Time.After(to) }), err
}

// shardFleet is one fleet namespace on the shard hub, its members and the
// replica processes that share it.
type shardFleet struct {
	hub      *shardHub
	ns       string
	names    []string
	config   replicaConfig
	replicas []*shardReplica
	log      *reconcileLog
}

// replicaConfig is what the replicas of a shard fleet run with.
type replicaConfig struct {
	// env is added to the bench's environment.
	env []string
	// watch is the namespace whose ConfigMaps members cache.
	watch string
	// objects is how many reconciles settle an owned member; 0: members
	// settle once owned.
	objects int
	// events reports every reconcile.
	events bool
	// timings are the Lease timings; zero: shard's defaults.
	timings shard.Options
}

// args are the child's arguments of replica name of fleet namespace ns.
func (c replicaConfig) args(hubKubeconfig, ns, name string) []string {
	return []string{"-hub=" + hubKubeconfig, "-namespace=" + ns, "-name=" + name, "-watch=" + c.watch,
		fmt.Sprintf("-objects=%d", c.objects), fmt.Sprintf("-events=%t", c.events),
		"-lease-duration=" + c.timings.LeaseDuration.String(),
		"-renew-deadline=" + c.timings.RenewDeadline.String(),
		"-retry-period=" + c.timings.RetryPeriod.String()}
}

// newShardFleet registers n members in a new fleet namespace of hub,
// spread over the lab's member servers, for replicas of config.
func newShardFleet(ctx context.Context, hub *shardHub, l *lab, n int, config replicaConfig) (*shardFleet, error) {
	ns := fmt.Sprintf("shard-%d", hub.nextID.Add(1))
	if err := hub.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	f := &shardFleet{hub: hub, ns: ns, config: config, log: &reconcileLog{runs: map[string][]reconcileRun{}}}
	for i := range n {
		f.names = append(f.names, fmt.Sprintf("%s-m%04d", ns, i))
	}
	err := parallel(ctx, n, func(i int) error {
		return hub.client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.names[i], Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: l.serverKubeconfig(i)},
		})
	})
	return f, err
}

// closeShardFleet kills f's replicas and deletes its Secrets and
// MemberClusters, which later fleets' replicas would otherwise cache;
// failures are reported.
func (b *bench) closeShardFleet(ctx context.Context, f *shardFleet) {
	for _, r := range f.replicas {
		r.kill()
	}
	err := errors.Join(
		f.hub.client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(f.ns)),
		f.hub.client.DeleteAllOf(ctx, &fleetv1alpha1.MemberCluster{}, client.MatchingLabels{fleetv1alpha1.FleetLabel: f.ns}))
	if err != nil {
		b.progress("cleaning up %s: %v", f.ns, err)
	}
}

// start starts replica name.
func (f *shardFleet) start(name string) error {
	r, err := startShardReplica(f.config.env, f.log, name, f.config.objects > 0, f.config.args(f.hub.kubeconfig, f.ns, name)...)
	if err != nil {
		return err
	}
	f.replicas = append(f.replicas, r)
	return nil
}

// mostRun returns the most members each replica has run at once.
func (f *shardFleet) mostRun() []int {
	var most []int
	for _, r := range f.replicas {
		most = append(most, r.mostRun())
	}
	return most
}

func (f *shardFleet) replica(name string) *shardReplica {
	i := slices.IndexFunc(f.replicas, func(r *shardReplica) bool { return r.name == name })
	return f.replicas[i]
}

// settled waits until every member is owned by exactly one running
// replica, which reported it settled if its replicas count objects, and
// its MemberCluster is Ready and names that replica; and every running
// replica owns one at least. It returns each member's owner, and how
// many members were so when it returned.
func (f *shardFleet) settled(timeout time.Duration) (owner map[string]string, good int, err error) {
	var owns map[string]int
	var ready, running int
	err = await("every member owned by one replica and Ready", timeout, func() bool {
		time.Sleep(200 * time.Millisecond)
		owner, owns = f.owners()
		var list fleetv1alpha1.MemberClusterList
		if f.hub.client.List(context.Background(), &list, client.MatchingLabels{fleetv1alpha1.FleetLabel: f.ns}) != nil {
			return false
		}
		good, ready = 0, 0
		for _, mc := range list.Items {
			if mc.Status.State == fleetv1alpha1.MemberStateReady {
				ready++
				if o := owner[mc.Name]; o != "" && mc.Status.Replica == o {
					good++
				}
			}
		}
		running = 0
		for _, r := range f.replicas {
			if !r.exited() {
				running++
			}
		}
		return good == len(f.names) && len(owns) == running
	})
	if err != nil {
		what := "owned by one replica"
		if f.config.objects > 0 {
			what += " that reconciled its objects"
		}
		err = &settleError{fmt.Errorf("%w: of %d members, %d %s (%d replicas of %d running own some), %d Ready, %d both",
			err, len(f.names), len(owner), what, len(owns), running, ready, good)}
	}
	return owner, good, err
}

// settleError is a fleet that did not settle in time: the figures that
// need it fail in this run.
type settleError struct{ error }

// owners returns the owner of each member that exactly one running
// replica owns (and reported settled, if it counts objects), and how
// many of them each running replica owns.
func (f *shardFleet) owners() (map[string]string, map[string]int) {
	count := map[string]int{}
	by := map[string]string{}
	for _, r := range f.replicas {
		if r.exited() {
			continue
		}
		r.mu.Lock()
		for m := range r.owned {
			count[m]++
			if r.settled == nil || r.settled[m] {
				by[m] = r.name
			}
		}
		r.mu.Unlock()
	}
	owns := map[string]int{}
	for m, o := range by {
		if count[m] != 1 {
			delete(by, m)
			continue
		}
		owns[o]++
	}
	return by, owns
}

// reconcileLog records, per member, which replica reconciled it when.
type reconcileLog struct {
	mu   sync.Mutex
	runs map[string][]reconcileRun
}

type reconcileRun struct {
	replica string
	at      time.Time
}

func (l *reconcileLog) add(member, replica string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[member] = append(l.runs[member], reconcileRun{replica, at})
}

// firstElsewhere returns the first reconcile of member after since by a
// replica other than from.
func (l *reconcileLog) firstElsewhere(member, from string, since time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.runs[member] {
		if r.replica != from && r.at.After(since) {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// pause returns the time from the last reconcile of member by from to
// the first by another replica after since.
func (l *reconcileLog) pause(member, from string, since time.Time) (time.Duration, bool) {
	first, ok := l.firstElsewhere(member, from, since)
	if !ok {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, r := range l.runs[member] {
		if r.replica == from {
			last = maxTime(last, r.at)
		}
	}
	return first.Sub(last), true
}

// shardReplica is a replica's child process, whose reports the bench
// reads as they come.
type shardReplica struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	stderr strings.Builder
	memory chan childReport

	mu    sync.Mutex
	owned map[string]bool
	// peak is the most members the replica has run at once, owned or
	// incoming.
	peak int
	// settled holds the owned members whose objects were all reconciled;
	// nil if the replica does not count them.
	settled map[string]bool
}

// shardLine is a line a replica's child writes: "own" when it starts or
// stops owning a member, "settled" when it has reconciled an owned
// member's objects, "running" with the most members it has run at once,
// "reconcile" for each reconcile (-events), and its "memory" when asked.
type shardLine struct {
	childReport
	Member string `json:"member,omitempty"`
	Owned  bool   `json:"owned,omitempty"`
	At     int64  `json:"at,omitempty"` // Unix nanoseconds
}

// startShardReplica runs the shard child named name with args, adding
// env to the bench's environment less its GOGC, and records its
// reconciles in log; settles says it reports its members settled.
func startShardReplica(env []string, log *reconcileLog, name string, settles bool, args ...string) (*shardReplica, error) {
	r := &shardReplica{name: name, done: make(chan struct{}), memory: make(chan childReport, 1), owned: map[string]bool{}}
	if settles {
		r.settled = map[string]bool{}
	}
	var err error
	if r.cmd, err = childCmd(append(env, shardChildEnv+"=1"), &r.stderr, args...); err != nil {
		return nil, err
	}
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line shardLine
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				r.read(line, log)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = r.cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

func (r *shardReplica) read(line shardLine, log *reconcileLog) {
	switch line.Event {
	case "reconcile":
		log.add(line.Member, r.name, time.Unix(0, line.At))
	case "memory":
		r.memory <- line.childReport
	case "running", "own", "settled":
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case line.Event == "running":
			r.peak = line.Members
		case line.Event == "settled":
			r.settled[line.Member] = true
		case line.Owned:
			r.owned[line.Member] = true
		default:
			delete(r.owned, line.Member)
		}
	}
}

// mostRun returns the most members the replica has run at once.
func (r *shardReplica) mostRun() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// ownedMembers lists the members the replica last said it owns.
func (r *shardReplica) ownedMembers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.owned))
}

func (r *shardReplica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// kill kills the process, if it still runs, and waits until it exited.
func (r *shardReplica) kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// runShardChild is the shard child's main: one replica of a shared fleet.
func runShardChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	hub := fs.String("hub", "", "hub kubeconfig file")
	namespace := fs.String("namespace", "", "the fleet namespace")
	watch := fs.String("watch", "", "the namespace whose ConfigMaps members cache and reconcile")
	objects := fs.Int("objects", 0, "reconciles of an owned member after which it is reported settled (0: none reported)")
	events := fs.Bool("events", false, "report every reconcile")
	opts := shard.Options{}
	fs.StringVar(&opts.Name, "name", "", "the replica's name")
	fs.DurationVar(&opts.LeaseDuration, "lease-duration", 0, "shard.Options.LeaseDuration (0: its default)")
	fs.DurationVar(&opts.RenewDeadline, "renew-deadline", 0, "shard.Options.RenewDeadline (0: its default)")
	fs.DurationVar(&opts.RetryPeriod, "retry-period", 0, "shard.Options.RetryPeriod (0: its default)")
	_ = fs.Parse(args)
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := shardChild(ctx, *hub, *namespace, *watch, *objects, *events, opts); err != nil {
		fmt.Fprintln(os.Stderr, "bench shard child:", err)
		return 1
	}
	return 0
}

// shardChild runs a replica until ctx ends, reporting the members it owns
// and settles, its reconciles if events, and its memory when its stdin
// says "memory".
func shardChild(ctx context.Context, hubKubeconfig, namespace, watch string, objects int, events bool, opts shard.Options) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return err
	}
	hub.UserAgent = replicaUserAgent + opts.Name
	mgrOpts := managerOptions(namespace)
	mgrOpts.Shard = &opts
	mgrOpts.ConfigureMember = func(_ string, o *cluster.Options) { cacheOnly(&o.Cache, watch, true) }
	mgr, err := fleet.New(hub, mgrOpts)
	if err != nil {
		return err
	}
	if err := membercluster.Add(mgr, membercluster.Options{}); err != nil {
		return err
	}
	rec := &shardRecorder{events: events, counts: map[string]int{}}
	controllerOpts := fleet.ControllerOptions{}
	controllerOpts.MaxConcurrentReconciles = 2
	err = fleet.NewControllerManagedBy(mgr).
		Named("bench-shard").
		For(&corev1.ConfigMap{}).
		WithOptions(controllerOpts).
		Complete(rec)
	if err != nil {
		return err
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "memory" {
				go func() {
					if err := (memoryReadings{idle: childIdle}).report(ctx); err != nil {
						fmt.Fprintln(os.Stderr, "bench shard child: reading memory:", err)
					}
				}()
			}
		}
	}()
	go reportOwnership(ctx, mgr, rec, objects)
	return mgr.Start(ctx)
}

// reportOwnership reports, every 50 ms until ctx ends, the members this
// replica started or stopped owning, those it owns that have had objects
// reconciles since it started, and each new peak of the members it runs,
// owned or incoming.
func reportOwnership(ctx context.Context, mgr *fleet.Manager, rec *shardRecorder, objects int) {
	owned, settled := map[string]bool{}, map[string]bool{}
	peak := 0
	for {
		clusters := mgr.Registry().List()
		running := 0
		for _, c := range clusters {
			if c.RunsHere() {
				running++
			}
		}
		if running > peak {
			peak = running
			writeShardLine(shardLine{childReport: childReport{Event: "running", Members: peak}})
		}
		for _, c := range clusters {
			if owns := mgr.Owns(c.Name); owns != owned[c.Name] {
				owned[c.Name] = owns
				writeShardLine(shardLine{childReport: childReport{Event: "own"}, Member: c.Name, Owned: owns})
			}
			if owned[c.Name] && objects > 0 && !settled[c.Name] && rec.count(c.Name) >= objects {
				settled[c.Name] = true
				writeShardLine(shardLine{childReport: childReport{Event: "settled"}, Member: c.Name})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeShardLine writes one line: short enough for one write, so that
// lines from goroutines do not mix.
func writeShardLine(l shardLine) {
	line, _ := json.Marshal(l)
	fmt.Println(string(line))
}

// shardRecorder counts each member's reconciles, and reports each if
// events.
type shardRecorder struct {
	events bool
	mu     sync.Mutex
	counts map[string]int
}

func (r *shardRecorder) Reconcile(_ context.Context, req fleet.Request) (reconcile.Result, error) {
	at := time.Now()
	r.mu.Lock()
	r.counts[req.ClusterName]++
	r.mu.Unlock()
	if r.events {
		writeShardLine(shardLine{childReport: childReport{Event: "reconcile"}, Member: req.ClusterName, At: at.UnixNano()})
	}
	return reconcile.Result{}, nil
}

func (r *shardRecorder) count(member string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[member]
}
