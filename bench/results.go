package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// results collects the figures of every run, in the order scenarios
// first report them.
type results struct {
	tables []*table
	curves map[string]*curve
}

// table is one scenario's figures.
type table struct {
	title   string
	note    string
	figures []*figure
}

// figure is one measured quantity, with a value from each run: NaN for a
// run that failed to measure it, whose reason is in failures.
type figure struct {
	name     string
	unit     string
	runs     []float64
	failures []string
	target   *target
}

// target is a figure's goal: at most (or at least) limit, and, for
// reference, multicluster-runtime's figure from the outside measurement
// (see outsideMeasurement); the bench does not measure it.
type target struct {
	limit     float64
	atLeast   bool
	reference string
}

// outsideMeasurement is where the targets' reference figures come from.
const outsideMeasurement = "multicluster-runtime on comparable work, from an outside measurement on a comparable 2-core machine, reported 2026-11; typed into the bench, not measured in this run"

// curve is a plot: series of values per number of members, a value per
// run at each point (NaN for a run that failed to measure it).
type curve struct {
	title, yLabel string
	series        []string
	points        map[string]map[int][]float64
}

func newResults() *results { return &results{curves: map[string]*curve{}} }

// table returns the table of a scenario, adding it if new.
func (r *results) table(title, note string) *table {
	for _, t := range r.tables {
		if t.title == title {
			return t
		}
	}
	t := &table{title: title, note: note}
	r.tables = append(r.tables, t)
	return t
}

// add records one run's value of a figure, adding the figure if new.
// Figures are told apart by name and unit. NaN records a failed run of a
// figure derived from one that failed.
func (t *table) add(name, unit string, value float64, tg *target) {
	if math.IsNaN(value) {
		t.fail(name, unit, "a figure it derives from failed", tg)
		return
	}
	f := t.figure(name, unit, tg)
	f.runs = append(f.runs, value)
}

// fail records a run that could not measure a figure, and why. A target
// is met only if every run measured its figure.
func (t *table) fail(name, unit, why string, tg *target) {
	f := t.figure(name, unit, tg)
	f.runs = append(f.runs, math.NaN())
	f.failures = append(f.failures, fmt.Sprintf("run %d: %s", len(f.runs), why))
}

// figure returns the figure of name and unit, adding it if new.
func (t *table) figure(name, unit string, tg *target) *figure {
	for _, f := range t.figures {
		if f.name == name && f.unit == unit {
			return f
		}
	}
	f := &figure{name: name, unit: unit, target: tg}
	t.figures = append(t.figures, f)
	return f
}

// hasReference reports whether a figure of t has a target with a
// reference figure.
func (t *table) hasReference() bool {
	return slices.ContainsFunc(t.figures, func(f *figure) bool { return f.target != nil && f.target.reference != "" })
}

// addDuration records a duration in milliseconds.
func (t *table) addDuration(name string, d time.Duration, tg *target) {
	t.add(name, "ms", ms(d), tg)
}

// plot records one run's value of a series at n members.
func (r *results) plot(name, title, yLabel, series string, n int, value float64) {
	c, ok := r.curves[name]
	if !ok {
		c = &curve{title: title, yLabel: yLabel, points: map[string]map[int][]float64{}}
		r.curves[name] = c
	}
	if _, ok := c.points[series]; !ok {
		c.series = append(c.series, series)
		c.points[series] = map[int][]float64{}
	}
	c.points[series][n] = append(c.points[series][n], value)
}

// atMost and atLeast make targets.
func atMost(limit float64, reference string) *target {
	return &target{limit: limit, reference: reference}
}

func atLeast(limit float64, reference string) *target {
	return &target{limit: limit, atLeast: true, reference: reference}
}

// met reports whether v reaches the target.
func (t *target) met(v float64) bool {
	if t.atLeast {
		return v >= t.limit
	}
	return v <= t.limit
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measured returns the values of the runs that measured a figure.
func measured(values []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(values), math.IsNaN)
}

// median, minimum and maximum of values, which must not be empty.
func median(values []float64) float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the nearest-rank p-th percentile of durations.
func percentile(durations []time.Duration, p float64) time.Duration {
	s := slices.Clone(durations)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(rank, 0)]
}

// slope fits y = a + b·x by least squares and returns b.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	return num / den
}

// sortedKeys returns m's keys in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
