package propagation

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// TestOwedCountIsTheJournalsLast has one countOwed read a member's owed
// removal and stall before telling it, as memberEngaged's may while the
// member's replay carries the removal out and counts again: what is told
// last, to the MemberCluster and the metric, is what the journal holds
// last, none owed.
func TestOwedCountIsTheJournalsLast(t *testing.T) {
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	if err := j.Owe("east", journal.Owed{Namespace: "team", Propagation: "web", Reason: "the member is Unhealthy"}); err != nil {
		t.Fatal(err)
	}
	// The first count stalls where it sets the metric, having read the
	// journal: until release is closed.
	stalled, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	live := func(string) bool {
		first := false
		once.Do(func() { first = true })
		if first {
			close(stalled)
			<-release
		}
		return true
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, live)
	if err != nil {
		t.Fatal(err)
	}
	r := &reconciler{journal: j, metrics: m, owed: newOwedKeeper(nil, 0), owedRemovals: NewOwedRemovals()}

	var wg sync.WaitGroup
	wg.Go(func() { r.countOwed("east") })
	<-stalled
	if err := j.Settle("east", "team", "web", nil); err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{})
	wg.Go(func() { defer close(settled); r.countOwed("east") })
	// The count after the removal may finish while the first stalls (it
	// must not: the stale count would then be told last); it is given a
	// second to, then the first goes on.
	select {
	case <-settled:
	case <-time.After(time.Second):
	}
	close(release)
	wg.Wait()

	if owed, _ := r.owedRemovals.Get("east"); len(owed) != 0 {
		t.Errorf("published as owed by east: %+v; the journal owes nothing", owed)
	}
	if v := testutil.ToFloat64(m.owedDeletions.with("east")); v != 0 {
		t.Errorf("fleet_propagation_owed_deletions{cluster=east} = %v; the journal owes nothing", v)
	}
}
