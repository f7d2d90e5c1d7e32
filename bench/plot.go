package main

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotTables says under which table each plot is shown.
var plotTables = map[string]string{
	"engage-latency":             engageTable,
	"memory":                     memoryTable,
	"memory-goroutines":          memoryTable,
	"memory-gogc-100":            gogc100MemoryTable,
	"memory-gogc-100-goroutines": gogc100MemoryTable,
}

func plotTable(name string) string { return plotTables[name] }

// writePlots draws each curve against the number of members, the median
// of the runs that measured each point, as <name>.png in the output
// directory.
func (b *bench) writePlots() error {
	for _, name := range sortedKeys(b.res.curves) {
		c := b.res.curves[name]
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "members"
		p.Y.Label.Text = c.yLabel
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		var lines []any
		for _, series := range c.series {
			points := c.points[series]
			xys := make(plotter.XYs, 0, len(points))
			for _, n := range sortedKeys(points) {
				if ok := measured(points[n]); len(ok) > 0 {
					xys = append(xys, plotter.XY{X: float64(n), Y: median(ok)})
				}
			}
			lines = append(lines, series, xys)
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return fmt.Errorf("plotting %s: %w", name, err)
		}
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(b.out, name+".png")); err != nil {
			return fmt.Errorf("saving %s: %w", name, err)
		}
	}
	return nil
}
