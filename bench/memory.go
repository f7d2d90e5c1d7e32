package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

const (
	memoryTable        = "Memory"
	gogc100MemoryTable = "Memory with GOGC=100"
	throughputTable    = "Throughput"
)

const mib = 1 << 20

// rssPerMemberTarget is the fleet manager's RSS per member target at Go's
// default, which issue 16 sets.
const rssPerMemberTarget = 2.5

// objectsPerMember is what the objects a member caches take, issue 16's
// estimate: the physical floor of its memory.
const objectsPerMember = 1.4

// settleDeadline is how long a measured process has for its members to
// settle.
const settleDeadline = 2 * time.Minute

// memorySetting is a GOGC the memory scenario runs its processes with ("":
// none in their environment), and the table, plot and targets of that GOGC.
type memorySetting struct {
	gogc, table, note, plot string
	rssPerMember, ratio     *target
	// steady: the processes of the smallest and the largest N read their
	// RSS again after steadyAfter.
	steady bool
	// mcr: a multicluster-runtime process is measured too, and mcrRatio
	// is the target of the fleet manager's RSS per member over its.
	mcr      bool
	mcrRatio *target
}

// outsideMCR names the outside benchmark against multicluster-runtime
// (MCR) whose figures the targets quote.
const outsideMCR = "outside benchmark against MCR d7413ad, reported 2026-11"

// gogcLabel names a GOGC setting.
func gogcLabel(gogc string) string {
	if gogc == "" {
		return "GOGC unset"
	}
	return "GOGC=" + gogc
}

// memorySettings are GOGC unset, as a library user's process and the
// Deployment run, then GOGC=100 set, Go's default collector for both; only
// the one of $BENCH_MEMORY_GOGC if set ("unset" or "100"), a developer's
// shortcut to one table.
func (b *bench) memorySettings() []memorySetting {
	settings := b.allMemorySettings()
	only, ok := os.LookupEnv("BENCH_MEMORY_GOGC")
	if !ok {
		return settings
	}
	return slices.DeleteFunc(settings, func(m memorySetting) bool {
		return m.gogc != strings.TrimPrefix(only, "unset")
	})
}

func (b *bench) allMemorySettings() []memorySetting {
	return []memorySetting{{
		table: memoryTable,
		note: fmt.Sprintf("A fleet-manager process (ConfigMap controller, 2 workers) whose members each cache %d ConfigMaps of %d KiB, selected by a field selector on their namespace in a cache of every namespace, as a controller of every namespace caches them, read %s after settling: RSS and goroutines; then, at the smallest and the largest N, RSS again %s after settling, whose slope between the two is the steady RSS per member; then the live heap after two collections. No collection is forced before the RSS readings. Baseline: a process of bare controller-runtime clusters, started all at once, caching the same objects, built as a plain library user or multicluster-runtime builds them: cluster.New with its defaults from the member server's kubeconfig, and only the cache's selection of the objects; so no transform (the objects keep their managedFields, which the fleet's members strip), and, through client-go's transport cache, one transport and connection per member server (%d servers) shared by its clusters, where each member has a connection of its own. Both run with no GOGC in their environment, as a library user's process and the Deployment do: the bare process collects at Go's default, 100; the fleet manager at %d, which fleet.New sets when GOGC is unset (fleet.DefaultGCPercent). A member has settled once each of its ConfigMaps was reconciled; the figures of a fleet-manager process whose members did not all settle within %s fail in that run. Slopes are least-squares fits over N, run by run. The objects ratio divides the RSS per member by %s, issue 16's estimate of what the objects themselves take.",
			loadObjects, loadBytes>>10, childIdle, steadyAfter, memberServers, fleet.DefaultGCPercent, settleDeadline, format(objectsPerMember, "MiB")),
		plot:         "memory",
		rssPerMember: atMost(rssPerMemberTarget, "3.17–3.19 MiB"),
		ratio:        atMost(0.9, ""),
		steady:       true,
	}, {
		gogc:     "100",
		table:    gogc100MemoryTable,
		note:     "The processes of the Memory table, in the same run, with GOGC=100 in their environment: Go's default collector for both, since the fleet manager leaves a GOGC its operator set alone. This compares the two at the same collector settings. Beside them, in the same run and at the same GOGC, a multicluster-runtime (MCR v0.24.1) process as a controller author runs it, as the " + outsideMCR + " did: MCR's kubeconfig provider reading MCR-format Secrets of the same members, and a ConfigMap controller built with mcbuilder (2 workers), its members' caches selecting the same objects; it runs at GOGC=100 only, which is also its default. The outside benchmark found fleet-manager 3.52 MiB per member against MCR's 3.25 (1.08×) at GOGC=100 for both. For reference, not measured in this run: issue 28's outside measurement (reported 2026-11; members of 500 ConfigMaps, GOGC=100 for both, 25 to 100 members, 2 runs) found an RSS slope of 3.80 MiB per member [3.41..4.19] for fleet-manager, against multicluster-runtime's 3.19 [3.10..3.28] in the same session; the ratio's target is issue 28's. Peak heap: the highest live heap a collection of the process found before the readings; peak RSS: the most the process was resident (VmHWM); at GOGC=100 a process's RSS is about its heap's high-water mark, the live heap at its last collection while its members settled plus what it allocated after.",
		plot:     "memory-gogc-100",
		ratio:    atMost(0.9, ""),
		mcr:      true,
		mcrRatio: atMost(0.9, "1.08×, "+outsideMCR),
	}}
}

// benchMemory measures, at each memory setting, a fleet manager process
// whose n members each cache loadObjects ConfigMaps of loadBytes, once
// settled, and a process of n bare controller-runtime clusters caching
// the same objects, built with cluster.New's defaults. The fleet's
// reconciles per second over the initial lists, at the Deployment's GOGC,
// go to the throughput table.
func (b *bench) benchMemory(ctx context.Context, n int) error {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%03d", ns, i)
	}
	// A refused registration makes every fleet-manager process record an
	// Event as it starts, so that the Event machinery's goroutines are
	// part of every reading, not of those taken after a first Event only.
	if err := b.registerRefused(ctx, ns); err != nil {
		return err
	}
	if _, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	mcrNamespace, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, mcrNamespace)
	if err := b.lab.registerMCR(ctx, mcrNamespace, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	var fleetSettled, bareSettled childReport
	settings := b.memorySettings()
	if len(settings) == 0 {
		return fmt.Errorf("BENCH_MEMORY_GOGC=%s: not unset or 100", os.Getenv("BENCH_MEMORY_GOGC"))
	}
	for i, m := range settings {
		fleetRun, bareRun, err := b.memory(ctx, ns, mcrNamespace, n, m)
		if err != nil {
			return fmt.Errorf("GOGC=%s: %w", m.gogc, err)
		}
		if i == 0 {
			fleetSettled, bareSettled = fleetRun, bareRun
		}
	}
	if settings[0].gogc != "" {
		return nil // the throughput is that of GOGC unset
	}
	tp := b.res.table(throughputTable, fmt.Sprintf("Reconciles per second over the initial lists of all members (%d ConfigMaps each), from the first reconcile to the last, 2 workers doing no work; the time from the manager's start until every member had settled; and the CPU time that took, beside the bare clusters' CPU time to sync their caches (GOGC unset). The settle time's target is 1.5× the median of the full run of 2026-11-23 (commit d084897, GOGC=25 set, this machine's kind), which issue 16 asks to keep.", loadObjects))
	settled := fleetFigures(tp, fleetSettled, n)
	settled(fmt.Sprintf("N=%d, reconciles per second", n), "/s", fleetSettled.Throughput)
	settledFigure := fmt.Sprintf("N=%d, start to all settled", n)
	if limit, ok := settleBefore[n]; ok && fleetSettled.Members >= n {
		tp.add(settledFigure, "s", fleetSettled.SettledSeconds, atMost(1.5*limit, ""))
	} else {
		settled(settledFigure, "s", fleetSettled.SettledSeconds)
	}
	settled(fmt.Sprintf("N=%d, fleet-manager CPU to settle", n), "s", fleetSettled.CPUSeconds)
	tp.add(fmt.Sprintf("N=%d, bare clusters CPU to sync", n), "s", bareSettled.CPUSeconds, nil)
	return nil
}

// settleBefore is the median time from start to all settled, by N, of
// the full run of 2026-11-23 (bench/results.md at commit d084897).
var settleBefore = map[int]float64{10: 0.66, 50: 2.74, 100: 6.24, 200: 13.7}

// memory runs a fleet manager process and a bare clusters process of n
// members with m's GOGC, adds their memory to m's table and plot, and
// returns the reports of their settling.
func (b *bench) memory(ctx context.Context, ns, mcrNamespace string, n int, m memorySetting) (fleetSettled, bareSettled childReport, err error) {
	var steady time.Duration
	if m.steady && (n == slices.Min(b.members) || n == slices.Max(b.members)) {
		steady = steadyAfter
	}
	fleetSettled, fleetMem, err := b.measureChild("fleet", n, m.gogc, steady,
		"-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns)
	if err != nil {
		return fleetSettled, bareSettled, fmt.Errorf("fleet manager: %w", err)
	}
	bareSettled, bareMem, err := b.measureChild("bare", n, m.gogc, steady,
		"-mode=bare", "-kubeconfigs="+strings.Join(b.lab.serverFiles, ","))
	if err != nil {
		return fleetSettled, bareSettled, fmt.Errorf("bare clusters: %w", err)
	}

	t := b.res.table(m.table, m.note)
	title := fmt.Sprintf("Memory against members (%d ConfigMaps of %d KiB each), %s", loadObjects, loadBytes>>10, gogcLabel(m.gogc))
	goroutinesTitle := "Goroutines against members, " + gogcLabel(m.gogc)
	if m.mcr {
		// MCR engages its members one at a time: it is given longer to
		// settle, since its memory, not its settling, is compared.
		mcrSettled, mcrMem, err := b.measureChildWithin("mcr", n, m.gogc, steady, mcrSettleDeadline,
			"-mode=mcr", "-hub="+b.lab.hubFile, "-namespace="+mcrNamespace)
		if err != nil {
			return fleetSettled, bareSettled, fmt.Errorf("multicluster-runtime: %w", err)
		}
		mcrFigure := settledWithin(t, mcrSettled, n, mcrSettleDeadline)
		mcrFigure(fmt.Sprintf("multicluster-runtime start to all settled, N=%d", n), "s", mcrSettled.SettledSeconds)
		b.res.plot(m.plot, title, "MiB", "multicluster-runtime RSS", n, mcrFigure(fmt.Sprintf("multicluster-runtime RSS, N=%d", n), "MiB", float64(mcrMem.RSSBytes)/mib))
		b.res.plot(m.plot, title, "MiB", "multicluster-runtime heap", n, mcrFigure(fmt.Sprintf("multicluster-runtime heap, N=%d", n), "MiB", float64(mcrMem.HeapBytes)/mib))
		b.res.plot(m.plot+"-goroutines", goroutinesTitle, "goroutines", "multicluster-runtime", n, mcrFigure(fmt.Sprintf("multicluster-runtime goroutines, N=%d", n), "goroutines", float64(mcrMem.Goroutines)))
		b.res.plot(m.plot, title, "MiB", "multicluster-runtime peak heap", n, mcrFigure(fmt.Sprintf("multicluster-runtime peak heap, N=%d", n), "MiB", float64(mcrMem.PeakHeapBytes)/mib))
		b.res.plot(m.plot, title, "MiB", "multicluster-runtime peak RSS", n, mcrFigure(fmt.Sprintf("multicluster-runtime peak RSS, N=%d", n), "MiB", float64(mcrMem.PeakRSSBytes)/mib))
	}
	settled := fleetFigures(t, fleetSettled, n)
	fleetRSS := settled(fmt.Sprintf("fleet-manager RSS, N=%d", n), "MiB", float64(fleetMem.RSSBytes)/mib)
	fleetHeap := settled(fmt.Sprintf("fleet-manager heap, N=%d", n), "MiB", float64(fleetMem.HeapBytes)/mib)
	fleetGoroutines := settled(fmt.Sprintf("fleet-manager goroutines, N=%d", n), "goroutines", float64(fleetMem.Goroutines))
	fleetStacks := settled(fmt.Sprintf("fleet-manager goroutine stacks, N=%d", n), "MiB", float64(fleetMem.StackBytes)/mib)
	b.res.plot(m.plot, title, "MiB", "fleet-manager peak heap", n, settled(fmt.Sprintf("fleet-manager peak heap, N=%d", n), "MiB", float64(fleetMem.PeakHeapBytes)/mib))
	b.res.plot(m.plot, title, "MiB", "fleet-manager peak RSS", n, settled(fmt.Sprintf("fleet-manager peak RSS, N=%d", n), "MiB", float64(fleetMem.PeakRSSBytes)/mib))
	t.add(fmt.Sprintf("bare clusters RSS, N=%d", n), "MiB", float64(bareMem.RSSBytes)/mib, nil)
	t.add(fmt.Sprintf("bare clusters heap, N=%d", n), "MiB", float64(bareMem.HeapBytes)/mib, nil)
	t.add(fmt.Sprintf("bare clusters goroutines, N=%d", n), "goroutines", float64(bareMem.Goroutines), nil)
	t.add(fmt.Sprintf("members settled in one process within %s, N=%d", settleDeadline, n), "members", float64(fleetSettled.Members), atLeast(float64(n), ""))
	if steady > 0 {
		after := fmt.Sprintf("after %s, N=%d", steadyAfter, n)
		fleetSteady := settled("fleet-manager RSS "+after, "MiB", float64(fleetMem.SteadyRSSBytes)/mib)
		bareSteady := float64(bareMem.SteadyRSSBytes) / mib
		t.add("bare clusters RSS "+after, "MiB", bareSteady, nil)
		if n == slices.Max(b.members) {
			if fleetSettled.Members < n {
				settled("fleet-manager ÷ bare, RSS "+after, "×", fleetSteady/bareSteady)
			} else {
				t.add("fleet-manager ÷ bare, RSS "+after, "×", fleetSteady/bareSteady, m.ratio)
			}
		}
		b.res.plot(m.plot, title, "MiB", steadySeries("fleet-manager"), n, fleetSteady)
		b.res.plot(m.plot, title, "MiB", steadySeries("bare controller-runtime"), n, bareSteady)
	}

	b.res.plot(m.plot, title, "MiB", "fleet-manager RSS", n, fleetRSS)
	b.res.plot(m.plot, title, "MiB", "bare controller-runtime RSS", n, float64(bareMem.RSSBytes)/mib)
	b.res.plot(m.plot, title, "MiB", "fleet-manager heap", n, fleetHeap)
	b.res.plot(m.plot, title, "MiB", "bare controller-runtime heap", n, float64(bareMem.HeapBytes)/mib)
	b.res.plot(m.plot+"-goroutines", goroutinesTitle, "goroutines", "fleet-manager", n, fleetGoroutines)
	b.res.plot(m.plot+"-goroutines", goroutinesTitle, "goroutines", "bare controller-runtime", n, float64(bareMem.Goroutines))
	b.res.plot(m.plot, title, "MiB", "fleet-manager goroutine stacks", n, fleetStacks)
	return fleetSettled, bareSettled, nil
}

// fleetFigures returns a function that adds a figure of a fleet manager
// process with n members to t and returns its value: a failed measurement
// (NaN) unless all of its members settled.
func fleetFigures(t *table, settled childReport, n int) func(name, unit string, value float64) float64 {
	return settledWithin(t, settled, n, settleDeadline)
}

// settledWithin is fleetFigures for a process given deadline to settle.
func settledWithin(t *table, settled childReport, n int, deadline time.Duration) func(name, unit string, value float64) float64 {
	return func(name, unit string, value float64) float64 {
		if settled.Members < n {
			t.fail(name, unit, fmt.Sprintf("%d of %d members settled within %s", settled.Members, n, deadline), nil)
			return math.NaN()
		}
		t.add(name, unit, value, nil)
		return value
	}
}

// steadySeries names the plot series of process's RSS after steadyAfter.
func steadySeries(process string) string {
	return fmt.Sprintf("%s RSS after %s", process, steadyAfter)
}

// mcrSettleDeadline is how long the multicluster-runtime process has for
// its members to settle.
const mcrSettleDeadline = 6 * time.Minute

// childIdle is how long a child idles after settling before its RSS is
// read, as issue 16's outside measurement read it.
const childIdle = 5 * time.Second

// steadyAfter is when, after settling, a child's steady-state RSS is read.
const steadyAfter = 2 * time.Minute

// measureChild runs a child with gogc until it settled, or its settle
// deadline passed, and reported its memory.
func (b *bench) measureChild(what string, n int, gogc string, steady time.Duration, args ...string) (settled, memory childReport, err error) {
	return b.measureChildWithin(what, n, gogc, steady, settleDeadline, args...)
}

// measureChildWithin is measureChild with settle as the settle deadline.
func (b *bench) measureChildWithin(what string, n int, gogc string, steady, settle time.Duration, args ...string) (settled, memory childReport, err error) {
	args = append(args, fmt.Sprintf("-members=%d", n), fmt.Sprintf("-objects=%d", loadObjects),
		"-watch="+loadNamespace, "-idle="+childIdle.String(), "-steady="+steady.String(), "-settle="+settle.String())
	c, err := startChild(gogcEnv(gogc), args...)
	if err != nil {
		return settled, memory, err
	}
	if settled, err = c.next(settle + time.Minute); err != nil {
		return settled, memory, err
	}
	if memory, err = c.next(steady + time.Minute); err != nil {
		return settled, memory, err
	}
	if _, err := c.stop(time.Minute); err != nil {
		return settled, memory, fmt.Errorf("stopping %s child: %w", what, err)
	}
	return settled, memory, nil
}

// addMemorySlopes fits, at each memory setting, MiB per member over N for
// each run and series, and the fleet manager's RSS slope over the bare
// clusters'.
func (b *bench) addMemorySlopes() {
	if len(b.members) < 2 {
		return
	}
	xs := make([]float64, len(b.members))
	for i, n := range b.members {
		xs[i] = float64(n)
	}
	for _, m := range b.memorySettings() {
		c := b.res.curves[m.plot]
		if c == nil {
			continue
		}
		t := b.res.table(m.table, "")
		goroutines := b.res.curves[m.plot+"-goroutines"]
		for run := range b.runs {
			slopeOf := func(c *curve, series string) float64 {
				ys := make([]float64, len(b.members))
				for i, n := range b.members {
					ys[i] = c.points[series][n][run]
				}
				return slope(xs, ys)
			}
			fleetRSS := slopeOf(c, "fleet-manager RSS")
			bareRSS := slopeOf(c, "bare controller-runtime RSS")
			t.add("fleet-manager RSS per member", "MiB", fleetRSS, m.rssPerMember)
			t.add("fleet-manager heap per member", "MiB", slopeOf(c, "fleet-manager heap"), nil)
			t.add("fleet-manager goroutine stacks per member", "MiB", slopeOf(c, "fleet-manager goroutine stacks"), nil)
			t.add("bare clusters RSS per member", "MiB", bareRSS, nil)
			t.add("bare clusters heap per member", "MiB", slopeOf(c, "bare controller-runtime heap"), nil)
			t.add("fleet-manager ÷ bare, RSS per member", "×", fleetRSS/bareRSS, m.ratio)
			t.add(fmt.Sprintf("fleet-manager RSS per member ÷ the objects (%s)", format(objectsPerMember, "MiB")), "×", fleetRSS/objectsPerMember, nil)
			t.add("fleet-manager goroutines per member", "goroutines", slopeOf(goroutines, "fleet-manager"), atMost(13, ""))
			t.add("bare clusters goroutines per member", "goroutines", slopeOf(goroutines, "bare controller-runtime"), nil)
			if m.mcr {
				mcrRSS := slopeOf(c, "multicluster-runtime RSS")
				t.add("multicluster-runtime RSS per member", "MiB", mcrRSS, nil)
				t.add("multicluster-runtime heap per member", "MiB", slopeOf(c, "multicluster-runtime heap"), nil)
				t.add("multicluster-runtime goroutines per member", "goroutines", slopeOf(goroutines, "multicluster-runtime"), nil)
				t.add("fleet-manager ÷ multicluster-runtime, RSS per member, GOGC=100", "×", fleetRSS/mcrRSS, m.mcrRatio)
				t.add("fleet-manager peak heap per member", "MiB", slopeOf(c, "fleet-manager peak heap"), nil)
				t.add("multicluster-runtime peak heap per member", "MiB", slopeOf(c, "multicluster-runtime peak heap"), nil)
				t.add("fleet-manager peak RSS per member", "MiB", slopeOf(c, "fleet-manager peak RSS"), nil)
				t.add("multicluster-runtime peak RSS per member", "MiB", slopeOf(c, "multicluster-runtime peak RSS"), nil)
			}
			b.addSteadySlopes(t, m, c, run)
		}
	}
}

// addSteadySlopes adds run's RSS per member after steadyAfter, the slope
// between the smallest and the largest N, if both were read.
func (b *bench) addSteadySlopes(t *table, m memorySetting, c *curve, run int) {
	lo, hi := slices.Min(b.members), slices.Max(b.members)
	slopeOf := func(series string) (float64, bool) {
		points := c.points[steadySeries(series)]
		if len(points[lo]) <= run || len(points[hi]) <= run {
			return 0, false
		}
		return (points[hi][run] - points[lo][run]) / float64(hi-lo), true
	}
	fleetRSS, ok := slopeOf("fleet-manager")
	bareRSS, bareOK := slopeOf("bare controller-runtime")
	if !ok || !bareOK {
		return
	}
	per := fmt.Sprintf("RSS per member after %s (N=%d to %d)", steadyAfter, lo, hi)
	t.add("fleet-manager "+per, "MiB", fleetRSS, m.rssPerMember)
	t.add("bare clusters "+per, "MiB", bareRSS, nil)
	t.add("fleet-manager ÷ bare, "+per, "×", fleetRSS/bareRSS, m.ratio)
}
