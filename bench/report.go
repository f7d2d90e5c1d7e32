package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// writeReport writes every table to path as Markdown, with the machine
// and the commit, and echoes the verdicts to stderr.
func (b *bench) writeReport(path string, took time.Duration) error {
	var s strings.Builder
	mode := fmt.Sprintf("full: %d runs", b.runs)
	if b.quick {
		mode = "quick (BENCH_QUICK=1): 1 run"
	}
	fmt.Fprintf(&s, "# fleet-manager benchmarks\n\n")
	fmt.Fprintf(&s, "Written by `make bench` (%s, members %s), which took %s.\n\n", mode, joinInts(b.members), took.Round(time.Second))
	fmt.Fprintf(&s, "- Commit: %s (when the run started)\n", b.commitAtStart)
	fmt.Fprintf(&s, "- Date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&s, "- Machine: %s\n", machine())
	var gogcs []string
	for _, m := range b.memorySettings() {
		gogcs = append(gogcs, gogcLabel(m.gogc))
	}
	fmt.Fprintf(&s, "- Go: %s %s/%s; the measured processes run with %s, except where a table says otherwise (the memory scenario's: %s)\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, gogcLabel(""), strings.Join(gogcs, ", then "))
	fmt.Fprintf(&s, "Each figure is the median of the runs, with their minimum and maximum; a run that could not measure a figure under the scenario's conditions reports it as failed, with the reason under the table. A target shows PASS or MISS; it is met only if every run measured its figure. Targets never fail the run: a shared 2-core machine is noisy. Comparisons measured in the same run are rows of their own (÷). In brackets after a target, marked *outside*: %s.\n", outsideMeasurement)

	for _, t := range b.res.tables {
		fmt.Fprintf(&s, "\n## %s\n\n", t.title)
		if t.note != "" {
			fmt.Fprintf(&s, "%s\n\n", t.note)
		}
		if t.hasReference() {
			fmt.Fprintf(&s, "In brackets, *outside*: %s.\n\n", outsideMeasurement)
		}
		fmt.Fprintf(&s, "| figure | median | min | max | target | |\n|---|--:|--:|--:|---|---|\n")
		var failures []string
		for _, f := range t.figures {
			ok := measured(f.runs)
			m, low, high := "failed", "failed", "failed"
			if len(ok) > 0 {
				m, low, high = format(median(ok), f.unit), format(minOf(ok), f.unit), format(maxOf(ok), f.unit)
			}
			if failed := len(f.runs) - len(ok); failed > 0 && len(ok) > 0 {
				m += fmt.Sprintf(" (%d of %d runs failed)", failed, len(f.runs))
			}
			goal, verdict := "", ""
			if f.target != nil {
				op := "≤"
				if f.target.atLeast {
					op = "≥"
				}
				goal = fmt.Sprintf("%s %s", op, format(f.target.limit, f.unit))
				if f.target.reference != "" {
					goal += fmt.Sprintf(" [*outside*: %s]", f.target.reference)
				}
				verdict = "MISS"
				if len(ok) == len(f.runs) && f.target.met(median(ok)) {
					verdict = "PASS"
				}
				b.progress("%-4s %s: %s: %s (target %s)", verdict, t.title, f.name, m, goal)
			}
			fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", f.name, m, low, high, goal, verdict)
			for _, why := range f.failures {
				failures = append(failures, fmt.Sprintf("- %s, %s\n", f.name, why))
			}
		}
		if len(failures) > 0 {
			fmt.Fprintf(&s, "\nFailed measurements:\n\n%s", strings.Join(failures, ""))
		}
		for _, name := range sortedKeys(b.res.curves) {
			if b.res.curves[name].title != "" && plotTable(name) == t.title {
				fmt.Fprintf(&s, "\n![%s](%s.png)\n", b.res.curves[name].title, name)
			}
		}
	}
	return os.WriteFile(path, []byte(s.String()), 0o644)
}

// format prints v in unit with three significant digits or so.
func format(v float64, unit string) string {
	var num string
	switch a := math.Abs(v); {
	case a == 0:
		num = "0"
	case a >= 100:
		num = fmt.Sprintf("%.0f", v)
	case a >= 10:
		num = fmt.Sprintf("%.1f", v)
	default:
		num = fmt.Sprintf("%.2f", v)
	}
	if unit == "×" {
		return num + "×"
	}
	return num + " " + unit
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// commit names the repository's commit, marked when the tree has changes.
// commit describes the repository's commit now, and whether the tree has
// changes beyond it.
func (b *bench) commit() string {
	out, err := exec.Command("git", "-C", b.repo, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	commit := strings.TrimSpace(string(out))
	if status, err := exec.Command("git", "-C", b.repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(status) > 0 {
		commit += " with uncommitted changes"
	}
	return "`" + commit + "`"
}

// machine describes the CPU, its cores and the memory.
func machine() string {
	cpu, mem := "unknown CPU", "unknown memory"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if kib, err := procStatusKiB("/proc/meminfo", "MemTotal"); err == nil {
		mem = fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
	}
	return fmt.Sprintf("%s, %d cores, %s", cpu, runtime.NumCPU(), mem)
}

// procStatusKiB reads a "Key: N kB" line of a /proc file.
func procStatusKiB(path, key string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			var kib int64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib)
			return kib, err
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}
