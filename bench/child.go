package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// childCommand runs one fleet manager, or a set of bare controller-runtime
// clusters, in a process of its own, so that its memory and its shutdown
// are its own. It reports on stdout, one JSON object a line.
const childCommand = "child"

// childReport is a line a child writes: first when it settled, or its
// settle deadline passed, then its memory once it has idled.
type childReport struct {
	Event          string  `json:"event"`             // "settled" or "memory"
	Members        int     `json:"members,omitempty"` // settled
	SettledSeconds float64 `json:"settledSeconds,omitempty"`
	Throughput     float64 `json:"throughput,omitempty"`
	CPUSeconds     float64 `json:"cpuSeconds,omitempty"`
	RSSBytes       int64   `json:"rssBytes,omitempty"`
	HeapBytes      uint64  `json:"heapBytes,omitempty"`
}

// runChild is the child's main.
func runChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	mode := fs.String("mode", "fleet", `"fleet": a fleet manager with a ConfigMap controller; "bare": a controller-runtime cluster per member`)
	hub := fs.String("hub", "", "hub kubeconfig file (fleet)")
	namespace := fs.String("namespace", "", "hub namespace of the registration Secrets (fleet)")
	kubeconfigs := fs.String("kubeconfigs", "", "comma-separated member server kubeconfig files, used in turn (bare)")
	watch := fs.String("watch", loadNamespace, "the namespace members cache")
	members := fs.Int("members", 1, "members to wait for")
	objects := fs.Int("objects", 1, "objects each member holds")
	idle := fs.Duration("idle", 3*time.Second, "idle time after settling before memory is read")
	settle := fs.Duration("settle", settleDeadline, "how long members have to settle (fleet)")
	_ = fs.Parse(args)
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch *mode {
	case "fleet":
		err = childFleet(ctx, *hub, *namespace, *watch, *members, *objects, *idle, *settle)
	case "bare":
		err = childBare(ctx, strings.Split(*kubeconfigs, ","), *watch, *members, *idle)
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
func childFleet(ctx context.Context, hubKubeconfig, namespace, watch string, members, objects int, idle, settle time.Duration) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return err
	}
	f, err := startFleet(hub, fleetConfig{namespace: namespace, watch: watch, workers: 2})
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
		r := childReport{Event: "settled", Members: n, SettledSeconds: last.Sub(started).Seconds(), CPUSeconds: cpuSeconds()}
		if n >= members {
			r.Throughput = float64(members*objects) / last.Sub(first).Seconds()
		}
		report(r)
		err = reportMemory(ctx, idle)
	}
	<-ctx.Done()
	return errors.Join(err, f.stop())
}

// childBare starts a controller-runtime cluster per member, all at once
// as the fleet's members are registered, each caching ConfigMaps with the
// fleet's default transform and a connection of its own, as members on
// different servers would have.
func childBare(ctx context.Context, kubeconfigs []string, watch string, members int, idle time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	clusters := make([]crcluster.Cluster, members)
	for i := range clusters {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigs[i%len(kubeconfigs)])
		if err != nil {
			return err
		}
		cfg.Dial = (&net.Dialer{}).DialContext // a transport of its own
		if clusters[i], err = crcluster.New(cfg, func(o *crcluster.Options) {
			o.Cache.DefaultNamespaces = map[string]cache.Config{watch: {}}
			o.Cache.DefaultTransform = cache.TransformStripManagedFields()
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
		err = reportMemory(ctx, idle)
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

// reportMemory idles, then reports the process's RSS and, after a
// collection, its live heap.
func reportMemory(ctx context.Context, idle time.Duration) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(idle):
	}
	rss, err := procStatusKiB("/proc/self/status", "VmRSS")
	if err != nil {
		return err
	}
	runtime.GC()
	runtime.GC() // the second frees what sync.Pools kept through the first
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	report(childReport{Event: "memory", RSSBytes: rss << 10, HeapBytes: m.HeapAlloc})
	return writeHeapProfile()
}

// writeHeapProfile writes the heap profile to $BENCH_HEAP_PROFILE, if set,
// named after the process: a developer's aid for finding what a member
// costs.
func writeHeapProfile() error {
	dir := os.Getenv("BENCH_HEAP_PROFILE")
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pprof", strings.Join(os.Args[2:3], ""), os.Getpid())))
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
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
	exited  chan error
	stderr  strings.Builder
}

// startChild runs this program's child command with args, adding env to
// the bench's environment. The child is killed if the bench dies.
func startChild(env []string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{reports: make(chan childReport, 4), exited: make(chan error, 1)}
	c.cmd = exec.Command(self, append([]string{childCommand}, args...)...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Stderr = &c.stderr
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
		c.exited <- c.cmd.Wait()
	}()
	return c, nil
}

// next waits for the child's next report.
func (c *child) next(timeout time.Duration) (childReport, error) {
	select {
	case r := <-c.reports:
		return r, nil
	case err := <-c.exited:
		return childReport{}, fmt.Errorf("child exited: %v: %s", err, c.stderr.String())
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
	case err := <-c.exited:
		if err != nil {
			return 0, fmt.Errorf("child: %v: %s", err, c.stderr.String())
		}
		return time.Since(start), nil
	case <-time.After(timeout):
		c.kill()
		return 0, fmt.Errorf("child still running %s after SIGTERM", timeout)
	}
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}
