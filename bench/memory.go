package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

const (
	memoryTable            = "Memory"
	defaultGOGCMemoryTable = "Memory at Go's default GOGC"
	throughputTable        = "Throughput"
)

const mib = 1 << 20

// defaultGOGC is Go's GOGC when the environment sets none, as a library
// user's process runs.
const defaultGOGC = "100"

// rssPerMemberTarget is the fleet manager's RSS per member target, at
// the Deployment's GOGC and, as issue 16 sets it, at Go's default.
const rssPerMemberTarget = 2.5

// settleDeadline is how long a measured process has for its members to
// settle.
const settleDeadline = 2 * time.Minute

// memorySetting is a GOGC the memory scenario runs its processes with,
// and the table, plot and RSS per member target of that GOGC.
type memorySetting struct {
	gogc, table, note, plot string
	rssPerMember            *target
}

// memorySettings are the Deployment's GOGC and, unless it is the same,
// Go's default.
func (b *bench) memorySettings() []memorySetting {
	settings := []memorySetting{{
		gogc:  b.gogc,
		table: memoryTable,
		note: fmt.Sprintf("A fleet-manager process (ConfigMap controller, 2 workers) whose members each cache %d ConfigMaps of %d KiB, read after settling and %s idle: RSS, then the live heap after two collections. Baseline: a process of bare controller-runtime clusters, started all at once, caching the same objects, each with a connection of its own and the same transform (managedFields stripped). Both run with GOGC=%s, as deploy/deployment.yaml sets (BENCH_GOGC overrides it); the next table runs them at Go's default. A member has settled once each of its ConfigMaps was reconciled; the figures of a fleet-manager process whose members did not all settle within %s fail in that run. Slopes are least-squares fits over N, run by run.",
			loadObjects, loadBytes>>10, childIdle, b.gogc, settleDeadline),
		plot:         "memory",
		rssPerMember: atMost(rssPerMemberTarget, "3.3 MiB"),
	}}
	if b.gogc != defaultGOGC {
		settings = append(settings, memorySetting{
			gogc:  defaultGOGC,
			table: defaultGOGCMemoryTable,
			note: fmt.Sprintf("The processes of the Memory table, in the same run, with Go's default GOGC=%s, which a library user's process gets. The RSS per member target, ≤ %s, is the one issue 16 sets at Go's default, as the Memory table's at the Deployment's GOGC.",
				defaultGOGC, format(rssPerMemberTarget, "MiB")),
			plot:         "memory-default-gogc",
			rssPerMember: atMost(rssPerMemberTarget, "3.17–3.19 MiB"),
		})
	}
	return settings
}

// benchMemory measures, at each memory setting, a fleet manager process
// whose n members each cache loadObjects ConfigMaps of loadBytes, once
// settled, and a process of n bare controller-runtime clusters caching
// the same objects with the same transform. The fleet's reconciles per
// second over the initial lists, at the Deployment's GOGC, go to the
// throughput table.
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
	if _, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	var fleetSettled, bareSettled childReport
	for i, m := range b.memorySettings() {
		fleetRun, bareRun, err := b.memory(ctx, ns, n, m)
		if err != nil {
			return fmt.Errorf("GOGC=%s: %w", m.gogc, err)
		}
		if i == 0 {
			fleetSettled, bareSettled = fleetRun, bareRun
		}
	}
	tp := b.res.table(throughputTable, fmt.Sprintf("Reconciles per second over the initial lists of all members (%d ConfigMaps each), from the first reconcile to the last, 2 workers doing no work; the time from the manager's start until every member had settled; and the CPU time that took, beside the bare clusters' CPU time to sync their caches (GOGC=%s).", loadObjects, b.gogc))
	settled := fleetFigures(tp, fleetSettled, n)
	settled(fmt.Sprintf("N=%d, reconciles per second", n), "/s", fleetSettled.Throughput)
	settled(fmt.Sprintf("N=%d, start to all settled", n), "s", fleetSettled.SettledSeconds)
	settled(fmt.Sprintf("N=%d, fleet-manager CPU to settle", n), "s", fleetSettled.CPUSeconds)
	tp.add(fmt.Sprintf("N=%d, bare clusters CPU to sync", n), "s", bareSettled.CPUSeconds, nil)
	return nil
}

// memory runs a fleet manager process and a bare clusters process of n
// members with m's GOGC, adds their memory to m's table and plot, and
// returns the reports of their settling.
func (b *bench) memory(ctx context.Context, ns string, n int, m memorySetting) (fleetSettled, bareSettled childReport, err error) {
	fleetSettled, fleetMem, err := b.measureChild("fleet", n, m.gogc,
		"-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns)
	if err != nil {
		return fleetSettled, bareSettled, fmt.Errorf("fleet manager: %w", err)
	}
	bareSettled, bareMem, err := b.measureChild("bare", n, m.gogc,
		"-mode=bare", "-kubeconfigs="+strings.Join(b.lab.serverFiles, ","))
	if err != nil {
		return fleetSettled, bareSettled, fmt.Errorf("bare clusters: %w", err)
	}

	t := b.res.table(m.table, m.note)
	settled := fleetFigures(t, fleetSettled, n)
	fleetRSS := settled(fmt.Sprintf("fleet-manager RSS, N=%d", n), "MiB", float64(fleetMem.RSSBytes)/mib)
	fleetHeap := settled(fmt.Sprintf("fleet-manager heap, N=%d", n), "MiB", float64(fleetMem.HeapBytes)/mib)
	t.add(fmt.Sprintf("bare clusters RSS, N=%d", n), "MiB", float64(bareMem.RSSBytes)/mib, nil)
	t.add(fmt.Sprintf("bare clusters heap, N=%d", n), "MiB", float64(bareMem.HeapBytes)/mib, nil)
	t.add(fmt.Sprintf("members settled in one process within %s, N=%d", settleDeadline, n), "members", float64(fleetSettled.Members), atLeast(float64(n), ""))

	title := fmt.Sprintf("Memory against members (%d ConfigMaps of %d KiB each), GOGC=%s", loadObjects, loadBytes>>10, m.gogc)
	b.res.plot(m.plot, title, "MiB", "fleet-manager RSS", n, fleetRSS)
	b.res.plot(m.plot, title, "MiB", "bare controller-runtime RSS", n, float64(bareMem.RSSBytes)/mib)
	b.res.plot(m.plot, title, "MiB", "fleet-manager heap", n, fleetHeap)
	b.res.plot(m.plot, title, "MiB", "bare controller-runtime heap", n, float64(bareMem.HeapBytes)/mib)
	return fleetSettled, bareSettled, nil
}

// fleetFigures returns a function that adds a figure of a fleet manager
// process with n members to t and returns its value: a failed measurement
// (NaN) unless all of its members settled.
func fleetFigures(t *table, settled childReport, n int) func(name, unit string, value float64) float64 {
	return func(name, unit string, value float64) float64 {
		if settled.Members < n {
			t.fail(name, unit, fmt.Sprintf("%d of %d members settled within %s", settled.Members, n, settleDeadline), nil)
			return math.NaN()
		}
		t.add(name, unit, value, nil)
		return value
	}
}

// memoryGOGC is the Deployment's GOGC, the memory scenario's first:
// $BENCH_GOGC, or else the one deploy/deployment.yaml sets.
func (b *bench) memoryGOGC() (string, error) {
	if gogc := os.Getenv("BENCH_GOGC"); gogc != "" {
		return gogc, nil
	}
	data, err := os.ReadFile(filepath.Join(b.repo, "deploy", "deployment.yaml"))
	if err != nil {
		return "", err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return "", fmt.Errorf("deploy/deployment.yaml: %w", err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "GOGC" {
				return e.Value, nil
			}
		}
	}
	return "100", nil
}

// childIdle is how long a child idles after settling before its memory is
// read.
const childIdle = 3 * time.Second

// measureChild runs a child with gogc until it settled, or its settle
// deadline passed, and reported its memory.
func (b *bench) measureChild(what string, n int, gogc string, args ...string) (settled, memory childReport, err error) {
	args = append(args, fmt.Sprintf("-members=%d", n), fmt.Sprintf("-objects=%d", loadObjects),
		"-watch="+loadNamespace, "-idle="+childIdle.String(), "-settle="+settleDeadline.String())
	c, err := startChild([]string{"GOGC=" + gogc}, args...)
	if err != nil {
		return settled, memory, err
	}
	if settled, err = c.next(settleDeadline + time.Minute); err != nil {
		return settled, memory, err
	}
	if memory, err = c.next(time.Minute); err != nil {
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
		runSlope := func(series string, run int) float64 {
			ys := make([]float64, len(b.members))
			for i, n := range b.members {
				ys[i] = c.points[series][n][run]
			}
			return slope(xs, ys)
		}
		for run := range b.runs {
			fleetRSS := runSlope("fleet-manager RSS", run)
			bareRSS := runSlope("bare controller-runtime RSS", run)
			t.add("fleet-manager RSS per member", "MiB", fleetRSS, m.rssPerMember)
			t.add("fleet-manager heap per member", "MiB", runSlope("fleet-manager heap", run), nil)
			t.add("bare clusters RSS per member", "MiB", bareRSS, nil)
			t.add("bare clusters heap per member", "MiB", runSlope("bare controller-runtime heap", run), nil)
			t.add("fleet-manager ÷ bare, RSS per member", "×", fleetRSS/bareRSS, atMost(1.2, ""))
		}
	}
}
