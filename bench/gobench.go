package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// goBenchmarkPattern selects the project's Go benchmarks.
const goBenchmarkPattern = "^(BenchmarkQueue|BenchmarkParse|BenchmarkRouting|BenchmarkSettle|BenchmarkOverride)$"

// goBenchmarks runs the project's Go benchmarks (queue, kubeconfig
// parsing, request routing, journal settling, overrides) once per run, without API servers, and adds a
// table per benchmark; the fair queue is compared with controller-runtime's
// priority queue measured in the same run.
func (b *bench) goBenchmarks(ctx context.Context) error {
	benchtime := "1s"
	if b.quick {
		benchtime = "100ms"
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", goBenchmarkPattern, "-benchmem",
		"-count", strconv.Itoa(b.runs), "-benchtime", benchtime, "./pkg/kubeconfig", "./pkg/fairqueue", "./pkg/fleet", "./pkg/journal", "./pkg/controllers/propagation")
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS=") // no API servers for these
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%w: %s%s", err, out, stderr.Bytes())
	}
	return b.addGoBenchmarks(out)
}

// benchLine matches a result line: name-GOMAXPROCS, iterations, then
// value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// goBenchmarkNotes explain each benchmark's table.
var goBenchmarkNotes = map[string]string{
	"BenchmarkQueue":   "Add, Get and Done of 1,000 requests spread over the named number of clusters, on the fair queue and on controller-runtime's priority queue, both without metrics. Ratio: the fair queue's ns/item over controller-runtime's, in the same run.",
	"BenchmarkParse":   "Policy.Parse, which every member kubeconfig passes before any client exists.",
	"BenchmarkRouting": "One informer event through a member's handler, tagged with its cluster, into the shared queue and out again.",
	"BenchmarkSettle":  "journal.Settle of a Propagation that keeps all its copies, once per reconcile of a member: ns/copy stays flat as the copies grow (it grew with them before issue 26).",
	"BenchmarkOverride": "A Propagation's overrides of one copy, as each member run applies them to each copy it wants: a Deployment of two containers and three rules, " +
		"one that selects another member, a JSON patch and a merge patch with a variable (${MEMBER_LABEL:region}). An op is one copy. " +
		"Target ≤ 1 ms per copy, about three times the first runs on this machine (0.35 ms, loaded by other test suites): 50 copies overridden in each of 100 members would take 5 s of a core.",
}

// goBenchmarkFigures name the figure of a benchmark without
// sub-benchmarks.
var goBenchmarkFigures = map[string]string{
	"BenchmarkOverride": "one copy, three rules (two apply)",
}

// goBenchmarkTargets are targets of benchmarks' figures, by benchmark
// and unit.
var goBenchmarkTargets = map[string]map[string]*target{
	"BenchmarkOverride": {"ns/op": atMost(1e6, "")},
}

func (b *bench) addGoBenchmarks(out []byte) error {
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		found++
		name := m[1]
		top, sub, _ := strings.Cut(name, "/")
		if sub == "" {
			sub = goBenchmarkFigures[top]
		}
		t := b.res.table("Go benchmark "+top, goBenchmarkNotes[top])
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("parsing %q: %w", sc.Text(), err)
			}
			unit := fields[i+1]
			if unit == "ns/op" && strings.Contains(m[2], "ns/item") {
				continue // the per-item figure says it better
			}
			t.add(sub, unit, v, goBenchmarkTargets[top][unit])
		}
	}
	if found == 0 {
		return fmt.Errorf("no benchmark results in:\n%s", out)
	}
	b.addQueueRatios()
	return nil
}

// addQueueRatios adds, for each cluster count, the fair queue's ns/item
// over controller-runtime's, run by run.
func (b *bench) addQueueRatios() {
	t := b.res.table("Go benchmark BenchmarkQueue", "")
	perItem := map[string]*figure{}
	for _, f := range t.figures {
		if f.unit == "ns/item" {
			perItem[f.name] = f
		}
	}
	for _, name := range sortedKeys(perItem) {
		fair := perItem[name]
		clusters, ok := strings.CutPrefix(name, "fair/")
		if !ok {
			continue
		}
		cr := perItem["controller-runtime/"+clusters]
		if cr == nil {
			continue
		}
		for i := range min(len(fair.runs), len(cr.runs)) {
			t.add("fair ÷ controller-runtime, "+clusters, "×", fair.runs[i]/cr.runs[i], nil)
		}
	}
}
