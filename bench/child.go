package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// childCommand runs one fleet manager, or a set of bare controller-runtime
// clusters, in a process of its own, so that its memory and its shutdown
// are its own. It reports on stdout, one JSON object a line.
const childCommand = "child"

// childReport is a line a child writes: first when it settled, or its
// settle deadline passed, then its memory once it has idled; a fleet child
// told so then reports its CPU over an idle window ("idle"), and its
// goroutines and sockets once its last member was removed ("removed").
type childReport struct {
	Event          string  `json:"event"`             // "settled" or "memory"
	Members        int     `json:"members,omitempty"` // settled
	SettledSeconds float64 `json:"settledSeconds,omitempty"`
	Throughput     float64 `json:"throughput,omitempty"`
	CPUSeconds     float64 `json:"cpuSeconds,omitempty"`
	// UnhealthyTransitions counts the members' changes to Unhealthy
	// until they settled ("settled", fleet).
	UnhealthyTransitions int64  `json:"unhealthyTransitions,omitempty"`
	RSSBytes             int64  `json:"rssBytes,omitempty"`
	SteadyRSSBytes       int64  `json:"steadyRSSBytes,omitempty"`
	HeapBytes            uint64 `json:"heapBytes,omitempty"`
	// PeakHeapBytes is the highest live heap a collection found, and
	// PeakRSSBytes the highest RSS, from the start until the memory
	// readings ("memory").
	PeakHeapBytes uint64 `json:"peakHeapBytes,omitempty"`
	PeakRSSBytes  int64  `json:"peakRSSBytes,omitempty"`
	Goroutines    int    `json:"goroutines,omitempty"`
	StackBytes    uint64 `json:"stackBytes,omitempty"`
	Sockets       int    `json:"sockets,omitempty"`
	// CPUFraction is the CPU time over a window, as a fraction of one
	// core ("idle").
	CPUFraction float64 `json:"cpuFraction,omitempty"`
	// AllocBytesPerSecond is what the process allocated per second over
	// the same window, and Collections the collections that ran in it
	// ("idle"): what the collector's share of the idle CPU follows.
	AllocBytesPerSecond float64 `json:"allocBytesPerSecond,omitempty"`
	Collections         int     `json:"collections,omitempty"`
	// Address is where a metered child serves its readings ("serving").
	Address string `json:"address,omitempty"`
}

// runChild is the child's main.
func runChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	mode := fs.String("mode", "fleet", `"fleet": a fleet manager with a ConfigMap controller; "mcr": multicluster-runtime's kubeconfig provider with a ConfigMap controller; "bare": a controller-runtime cluster per member`)
	hub := fs.String("hub", "", "hub kubeconfig file (fleet, mcr)")
	namespace := fs.String("namespace", "", "hub namespace of the registration Secrets (fleet, mcr)")
	kubeconfigs := fs.String("kubeconfigs", "", "comma-separated member server kubeconfig files, used in turn (bare)")
	watch := fs.String("watch", loadNamespace, "the namespace whose objects members cache, with a field selector in a cache of every namespace")
	members := fs.Int("members", 1, "members to wait for")
	objects := fs.Int("objects", 1, "objects each member holds")
	idle := fs.Duration("idle", childIdle, "idle time after settling before RSS is read")
	steady := fs.Duration("steady", 0, "time after settling before the steady-state RSS is read (0: not read)")
	settle := fs.Duration("settle", settleDeadline, "how long members have to settle (fleet)")
	idleCPU := fs.Duration("idle-cpu", 0, "after the memory readings, the window whose CPU time is reported (fleet; 0: none)")
	removal := fs.Bool("removal", false, "after the idle window, wait until every member is removed, then report goroutines and sockets (fleet)")
	_ = fs.Parse(args)
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	readings := memoryReadings{idle: *idle, steady: *steady, peak: followPeakHeap(ctx)}
	var err error
	switch *mode {
	case "fleet":
		err = childFleet(ctx, *hub, *namespace, *watch, *members, *objects, readings, *settle, *idleCPU, *removal)
	case "mcr":
		err = childMCR(ctx, *hub, *namespace, *watch, *members, *objects, readings, *settle)
	case "bare":
		err = childBare(ctx, strings.Split(*kubeconfigs, ","), *watch, *members, readings)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

// childFleet reports how many members settled, once all did or the
// settle deadline passed; the throughput only if all did.
func childFleet(ctx context.Context, hubKubeconfig, namespace, watch string, members, objects int, readings memoryReadings, settle, idleCPU time.Duration, removal bool) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return err
	}
	f, err := startFleet(hub, fleetConfig{namespace: namespace, watch: watch, clusterWide: true, workers: 2})
	if err != nil {
		return err
	}
	started := time.Now()
	deadline := started.Add(settle)
	var n int
	var first, last time.Time
	err = awaitCtx(ctx, "members settled", func() bool {
		n, first, last = f.rec.settledClusters(objects)
		return n >= members || time.Now().After(deadline)
	})
	if err == nil {
		r := childReport{Event: "settled", Members: n, SettledSeconds: last.Sub(started).Seconds(), CPUSeconds: cpuSeconds(), UnhealthyTransitions: unhealthyTransitions.Load()}
		if n >= members && members > 0 {
			r.Throughput = float64(members*objects) / last.Sub(first).Seconds()
		}
		report(r)
		err = readings.report(ctx)
	}
	if err == nil && idleCPU > 0 {
		err = reportIdleCPU(ctx, idleCPU)
	}
	if err == nil && removal {
		err = reportRemoval(ctx, f)
	}
	<-ctx.Done()
	return errors.Join(err, f.stop())
}

// reportIdleCPU reports the CPU time the process takes over window, and
// writes its CPU profile to $BENCH_PROFILES, if set.
func reportIdleCPU(ctx context.Context, window time.Duration) error {
	stopProfile, err := startCPUProfile()
	if err != nil {
		return err
	}
	gc := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(gc)
	allocated, cycles := gc[0].Value.Uint64(), gc[1].Value.Uint64()
	start, began := cpuSeconds(), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(window):
		seconds := time.Since(began).Seconds()
		cpu := cpuSeconds() - start
		metrics.Read(gc)
		report(childReport{Event: "idle", CPUFraction: cpu / seconds, AllocBytesPerSecond: float64(gc[0].Value.Uint64()-allocated) / seconds, Collections: int(gc[1].Value.Uint64() - cycles)})
	}
	return stopProfile()
}

// startCPUProfile starts a CPU profile into $BENCH_PROFILES, if set, and
// returns what stops it.
func startCPUProfile() (stop func() error, err error) {
	dir := os.Getenv("BENCH_PROFILES")
	if dir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-idle-%s-%d.pprof", strings.Join(os.Args[2:3], ""), os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// reportRemoval waits until the fleet serves no member, then until its
// goroutines and sockets have not changed for a second, and reports them.
func reportRemoval(ctx context.Context, f *benchFleet) error {
	if err := awaitCtx(ctx, "every member removed", func() bool { return len(f.mgr.ClusterNames()) == 0 }); err != nil {
		return err
	}
	goroutines, sockets, since := -1, -1, time.Now()
	err := awaitCtx(ctx, "goroutines and sockets to settle", func() bool {
		g, s := runtime.NumGoroutine(), openSockets()
		if g != goroutines || s != sockets {
			goroutines, sockets, since = g, s, time.Now()
		}
		return time.Since(since) >= time.Second
	})
	if err == nil {
		report(childReport{Event: "removed", Goroutines: goroutines, Sockets: sockets})
		err = writeProfile("goroutine", 1, "removed")
	}
	return err
}

// openSockets counts the process's open sockets.
func openSockets() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

// childBare starts a controller-runtime cluster per member, all at once
// as the fleet's members are registered, built as a plain library user
// (or multicluster-runtime) builds one: cluster.New with its defaults,
// from the member's kubeconfig, with only the cache's selection of the
// objects. No transform: the objects keep their managedFields. No
// transport of its own: client-go's transport cache gives the clusters of
// one kubeconfig one transport, so those of a member server share its
// connection.
func childBare(ctx context.Context, kubeconfigs []string, watch string, members int, readings memoryReadings) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	clusters := make([]cluster.Cluster, members)
	for i := range clusters {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigs[i%len(kubeconfigs)])
		if err != nil {
			return err
		}
		if clusters[i], err = cluster.New(cfg, func(o *cluster.Options) {
			cacheOnly(&o.Cache, watch, true)
		}); err != nil {
			return err
		}
	}
	done := make(chan error, members)
	synced := make(chan error, members)
	for _, cl := range clusters {
		go func() { done <- cl.Start(ctx) }()
		go func() {
			_, err := cl.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
			synced <- err
		}()
	}
	var err error
	for range members {
		err = errors.Join(err, <-synced)
	}
	if err == nil {
		report(childReport{Event: "settled", Members: members, SettledSeconds: time.Since(started).Seconds(), CPUSeconds: cpuSeconds()})
		err = readings.report(ctx)
		<-ctx.Done()
	}
	cancel()
	for range members {
		err = errors.Join(err, <-done)
	}
	return err
}

// cpuSeconds returns the user and system CPU time the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// memoryReadings are when a child reads its memory, from the moment it
// settled: its RSS and goroutines after idle, its RSS again after steady
// (unless 0), its peak live heap (if peak is set) and RSS since it started,
// then its live heap after two collections, which must come last: a forced
// collection returns memory the readings are meant to see.
type memoryReadings struct {
	idle, steady time.Duration
	peak         *peakHeap
}

// report takes the readings and reports them.
func (r memoryReadings) report(ctx context.Context) error {
	settled := time.Now()
	if err := writeMemoryClasses("at-settle"); err != nil {
		return err
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(settled.Add(d))):
			return true
		}
	}
	if !wait(r.idle) {
		return nil
	}
	rss, err := procStatusKiB("/proc/self/status", "VmRSS")
	if err != nil {
		return err
	}
	peakRSS, err := procStatusKiB("/proc/self/status", "VmHWM")
	if err != nil {
		return err
	}
	mem := childReport{Event: "memory", RSSBytes: rss << 10, PeakRSSBytes: peakRSS << 10, PeakHeapBytes: r.peak.peak(), Goroutines: runtime.NumGoroutine(), Sockets: openSockets()}
	if err := writeMemoryClasses("settled"); err != nil {
		return err
	}
	if err := r.peak.writeProfile(); err != nil {
		return err
	}
	if err := writeProfile("goroutine", 1, "settled"); err != nil {
		return err
	}
	if r.steady > 0 {
		if !wait(r.steady) {
			return nil
		}
		if rss, err = procStatusKiB("/proc/self/status", "VmRSS"); err != nil {
			return err
		}
		mem.SteadyRSSBytes = rss << 10
	}
	runtime.GC()
	runtime.GC() // the second frees what sync.Pools kept through the first
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	mem.HeapBytes, mem.StackBytes = m.HeapAlloc, m.StackInuse
	report(mem)
	return writeProfile("heap", 0, "settled")
}

// writeMemoryClasses writes the runtime's memory classes and GC figures
// (runtime/metrics) to $BENCH_PROFILES, if set: where the RSS beyond the
// live heap goes.
func writeMemoryClasses(when string) error {
	dir := os.Getenv("BENCH_PROFILES")
	if dir == "" {
		return nil
	}
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if d.Kind == metrics.KindUint64 && (strings.HasPrefix(d.Name, "/memory/classes/") || strings.HasPrefix(d.Name, "/gc/heap/") || strings.HasPrefix(d.Name, "/gc/cycles/") || strings.HasPrefix(d.Name, "/gc/scan/")) {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	var b strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&b, "%s %d\n", s.Name, s.Value.Uint64())
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("memclasses-%s-%s-%d.txt", when, strings.Join(os.Args[2:3], ""), os.Getpid())), []byte(b.String()), 0o644)
}

// writeProfile writes the named profile to $BENCH_PROFILES, if set, named
// after the process and when: a developer's aid for finding what a member
// costs.
func writeProfile(name string, debug int, when string) error {
	dir := os.Getenv("BENCH_PROFILES")
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%s-%d.pprof", name, when, strings.Join(os.Args[2:3], ""), os.Getpid())))
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, debug), f.Close())
}

// gogcEnv is the environment of a child with gogc, or with no GOGC if "".
func gogcEnv(gogc string) []string {
	if gogc == "" {
		return nil
	}
	return []string{"GOGC=" + gogc}
}

func report(r childReport) {
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
}

// awaitCtx polls done every 10 ms until it reports true or ctx ends.
func awaitCtx(ctx context.Context, what string, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// child is a running child process.
type child struct {
	cmd     *exec.Cmd
	reports chan childReport
	// exited closes once the child has exited, with exitErr.
	exited  chan struct{}
	exitErr error
	stderr  strings.Builder
}

// startChild runs this program's child command with args, adding env to
// the bench's environment less its GOGC: a child's GOGC is its scenario's
// choice (gogcEnv). The child is killed if the bench dies.
func startChild(env []string, args ...string) (*child, error) {
	c := &child{reports: make(chan childReport, 4), exited: make(chan struct{})}
	var err error
	if c.cmd, err = childCmd(env, &c.stderr, args...); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r childReport
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				c.reports <- r
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// next waits for the child's next report.
func (c *child) next(timeout time.Duration) (childReport, error) {
	select {
	case r := <-c.reports:
		return r, nil
	case <-c.exited:
		return childReport{}, fmt.Errorf("child exited: %v: %s", c.exitErr, c.stderr.String())
	case <-time.After(timeout):
		c.kill()
		return childReport{}, fmt.Errorf("child reported nothing within %s", timeout)
	}
}

// stop sends SIGTERM and returns how long the child took to exit.
func (c *child) stop(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-c.exited:
		if c.exitErr != nil {
			return 0, fmt.Errorf("child: %v: %s", c.exitErr, c.stderr.String())
		}
		return time.Since(start), nil
	case <-time.After(timeout):
		c.kill()
		return 0, fmt.Errorf("child still running %s after SIGTERM", timeout)
	}
}

// kill kills the child, if it still runs, and waits until it exited.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// childCmd is the command of a bench child with args: the bench's own
// binary, in its environment without GOGC plus env, killed with the
// bench, its stderr kept in stderr (and shown too with BENCH_LOG).
func childCmd(env []string, stderr io.Writer, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{childCommand}, args...)...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") }), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = stderr
	if os.Getenv("BENCH_LOG") != "" {
		cmd.Stderr = io.MultiWriter(stderr, os.Stderr)
	}
	return cmd, nil
}
