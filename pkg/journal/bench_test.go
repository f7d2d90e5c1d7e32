package journal_test

import (
	"fmt"
	"testing"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// BenchmarkSettle settles a Propagation that keeps all its copies: its
// time per copy stays flat as the copies grow (it grew with them when each
// copy was looked up in the slice of those kept).
func BenchmarkSettle(b *testing.B) {
	for _, n := range []int{250, 4000} {
		b.Run(fmt.Sprintf("copies=%d", n), func(b *testing.B) {
			j := open(b, b.TempDir())
			copies := make([]journal.Copy, n)
			kept := make([]journal.Object, n)
			for i := range copies {
				copies[i] = copyOf("web", fmt.Sprintf("object-%d", i), "h")
				kept[i] = copies[i].Object
			}
			if err := j.Record("east", copies); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := j.Settle("east", "team", "web", kept); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/copy")
		})
	}
}
