package content

import (
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time, user and system, this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkChange measures the content side of one change of a
// Propagation of 30 ConfigMaps of 10 KB under strategy All: each member
// run asks for the content (and its hash), and so does one status
// request. "rebuilt" builds and encodes it at each ask, as every run did
// before the Cache; "cached" asks the Cache. One op is one change;
// cpu-s/change (user and system CPU of the process, GC included) and
// MB/change are its cost, µs/member-run and KB/member-run their share
// per member run; builds/change counts the Cache's builds (0 when
// rebuilt, which bypasses it).
func BenchmarkChange(b *testing.B) {
	for _, members := range []int{100, 1000} {
		for _, mode := range []string{"rebuilt", "cached"} {
			b.Run(fmt.Sprintf("members=%d/%s", members, mode), func(b *testing.B) {
				h := &hub{}
				h.configMaps(30, 10<<10)
				c := newCache(h)
				p := webPropagation()
				ask := func() {
					if mode == "cached" {
						if _, _, err := c.Get(b.Context(), p); err != nil {
							b.Fatal(err)
						}
						return
					}
					built, err := c.Build(b.Context(), p)
					if err != nil {
						b.Fatal(err)
					}
					if _, _, err := built.Encode(); err != nil {
						b.Fatal(err)
					}
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				cpuBefore := cpuTime(b)
				changes := 0
				b.ReportAllocs()
				for b.Loop() {
					h.change(changes%30, strconv.Itoa(changes))
					changes++
					for range members {
						ask() // the member runs
					}
					ask() // the status request
				}
				perChange := (cpuTime(b) - cpuBefore).Seconds() / float64(changes)
				runtime.ReadMemStats(&after)
				bytes := float64(after.TotalAlloc-before.TotalAlloc) / float64(changes)
				b.ReportMetric(perChange, "cpu-s/change")
				b.ReportMetric(bytes/1e6, "MB/change")
				b.ReportMetric(perChange/float64(members)*1e6, "µs/member-run")
				b.ReportMetric(bytes/float64(members)/1e3, "KB/member-run")
				b.ReportMetric(float64(c.Builds())/float64(changes), "builds/change")
			})
		}
	}
}
