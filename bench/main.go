// Command bench measures fleet-manager: the project's Go benchmarks, and
// end-to-end scenarios that drive the fleet manager library against real
// API servers (one hub and a few member servers, many members sharing each
// member server under different Secret names). It writes results.md and
// PNG plots to -out. Targets are printed as PASS or MISS and never fail
// the run: figures from a shared machine are noisy. A run that cannot
// measure a figure under its scenario's conditions reports it as failed;
// a scenario that cannot run at all fails the run.
//
// `make bench` runs it in full (five runs, about 75 minutes on 2 cores;
// BENCH_RUNS=n runs n); BENCH_QUICK=1 runs fewer members and one run of
// each (about 12 minutes).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// bench is one invocation: its settings, API servers and results.
type bench struct {
	quick   bool
	runs    int
	members []int
	// freeze is how long the thaw scenario freezes a member's server.
	freeze time.Duration
	out    string
	repo   string
	only   map[string]bool
	lab    *lab
	res    *results
	// commitAtStart is the commit measured: the tree when the run began,
	// which is what go run built.
	commitAtStart string
}

// scenarioNames are the scenarios -only selects from.
var scenarioNames = []string{"go", "engage", "memory", "fairness", "headofline", "connections", "shutdown", "startup", "hub-outage", "failover", "bigsecrets", "propagation", "baseline", "rollout", "churn", "journal", "kubefleet", "pipeline", "thousand", "shard", "thaw", "outage"}

// selected reports whether scenario is selected.
func (b *bench) selected(scenario string) bool { return len(b.only) == 0 || b.only[scenario] }

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		if os.Getenv(propagationChildEnv) != "" {
			os.Exit(runPropagationChild(os.Args[2:]))
		}
		if os.Getenv(meteredChildEnv) != "" {
			os.Exit(runMeteredChild(os.Args[2:]))
		}
		if os.Getenv(shardChildEnv) != "" {
			os.Exit(runShardChild(os.Args[2:]))
		}
		os.Exit(runChild(os.Args[2:]))
	}
	b := &bench{res: newResults()}
	flag.BoolVar(&b.quick, "quick", os.Getenv("BENCH_QUICK") == "1", "fewer members and one run of each scenario")
	flag.StringVar(&b.out, "out", ".", "directory for results.md and the plots (with -only, default a temporary directory: a part of the bench never replaces the whole's results)")
	flag.StringVar(&b.repo, "repo", "..", "the fleet-manager repository, whose Go benchmarks run")
	only := flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames, ","))
	members := flag.String("members", "", "comma-separated member counts, overriding the mode's")
	freeze := flag.Duration("freeze", 0, "how long the thaw scenario freezes a member's API server (default: full 90s, quick 20s)")
	runs := flag.Int("runs", 0, "runs of each scenario, overriding the mode's (full: 5, quick: 1)")
	flag.Parse()
	b.runs, b.members, b.freeze = 5, []int{10, 50, 100, 200}, 90*time.Second
	if b.quick {
		b.runs, b.members, b.freeze = 1, []int{10, 50}, 20*time.Second
	}
	if *freeze > 0 {
		b.freeze = *freeze
	}
	if *runs > 0 {
		b.runs = *runs
	}
	b.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s != "" {
			b.only[s] = true
		}
	}
	outGiven := false
	flag.Visit(func(f *flag.Flag) { outGiven = outGiven || f.Name == "out" })
	if len(b.only) > 0 && !outGiven {
		dir, err := os.MkdirTemp("", "fleet-bench-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		b.out = dir
	}
	if *members != "" {
		b.members = nil
		for _, s := range strings.Split(*members, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: -members:", err)
				os.Exit(2)
			}
			b.members = append(b.members, n)
		}
	}
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (b *bench) run(ctx context.Context) (err error) {
	started := time.Now()
	b.commitAtStart = b.commit()
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	if b.selected("go") {
		b.progress("Go benchmarks")
		if err := b.goBenchmarks(ctx); err != nil {
			return fmt.Errorf("Go benchmarks: %w", err)
		}
	}

	b.progress("starting a hub and %d member API servers", memberServers)
	if b.lab, err = startLab(memberServers); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.lab.stop()) }()

	for run := 1; run <= b.runs; run++ {
		if err := b.scenarios(ctx, run); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
	}
	b.addMemorySlopes()
	b.progress("writing results to %s", b.out)
	if err := b.writePlots(); err != nil {
		return err
	}
	return b.writeReport(filepath.Join(b.out, "results.md"), time.Since(started))
}

// memberServers is how many member API servers the lab starts: the
// fairness scenario needs two, the outage scenario kills a third.
const memberServers = 3

// scenarios runs every end-to-end scenario once.
func (b *bench) scenarios(ctx context.Context, run int) error {
	perMembers := []struct {
		name string
		run  func(context.Context, int) error
	}{
		{"engage", b.benchEngage},
		{"memory", b.benchMemory},
	}
	for _, s := range perMembers {
		if !b.selected(s.name) {
			continue
		}
		for _, n := range b.members {
			b.progress("run %d: %s, %d members", run, s.name, n)
			if err := s.run(ctx, n); err != nil {
				return fmt.Errorf("%s, %d members: %w", s.name, n, err)
			}
		}
	}
	once := []struct {
		name string
		run  func(context.Context) error
	}{
		{"fairness", b.benchFairness},
		{"headofline", b.benchHeadOfLine},
		{"connections", b.benchConnections},
		{"shutdown", b.benchShutdown},
		{"startup", b.benchStartup},
		{"hub-outage", b.benchHubOutage},
		{"failover", b.benchFailover},
		{"bigsecrets", b.benchBigSecrets},
		{"propagation", b.benchPropagation},
		{"baseline", b.benchBaseline},
		{"rollout", b.benchRollout},
		{"churn", b.benchChurn},
		{"journal", b.benchJournal},
		{"kubefleet", b.benchKubeFleet},
		{"pipeline", b.benchPipeline},
		{"thousand", b.benchThousand},
		{"shard", b.benchShard},
		{"thaw", b.benchThaw},
		{"outage", b.benchOutage}, // last: it restarts a member server
	}
	for _, s := range once {
		if !b.selected(s.name) {
			continue
		}
		b.progress("run %d: %s", run, s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return ctx.Err()
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// cleanUp deletes what a fleet left on the hub; failures are reported, as
// they would skew later scenarios.
func (b *bench) cleanUp(ctx context.Context, ns string) {
	if err := b.lab.cleanUp(ctx, ns); err != nil {
		b.progress("cleaning up %s: %v", ns, err)
	}
}

// stopFleet stops a fleet manager, reporting an error it returned.
func (b *bench) stopFleet(f *benchFleet) {
	if err := f.stop(); err != nil {
		b.progress("stopping fleet: %v", err)
	}
}
