package propagation

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// liveMembers is the registry's view that newMetrics is given.
type liveMembers struct {
	mu    sync.Mutex
	names map[string]bool
}

func (l *liveMembers) live(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names[name]
}

func (l *liveMembers) leave(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.names, name)
}

var perMemberSeries = []string{
	"fleet_propagation_applies_total", "fleet_propagation_apply_duration_seconds",
	"fleet_propagation_drift_detected_total", "fleet_propagation_drift_corrected_total", "fleet_propagation_owed_deletions",
	"fleet_propagation_member_watches", "fleet_propagation_member_watch_starts_total",
}

// writeAll writes every per-member series of cluster, as a reconcile and
// countOwed do.
func writeAll(m *propagationMetrics, cluster string) {
	m.applies.WithLabelValues(cluster, apply.ApplySucceeded).Inc()
	m.applyDuration.WithLabelValues(cluster).Observe(0.01)
	m.driftDetected.WithLabelValues(cluster).Inc()
	m.driftCorrected.WithLabelValues(cluster).Inc()
	m.owedDeletions.WithLabelValues(cluster).Set(1)
	m.memberWatches.WithLabelValues(cluster).Set(3)
	m.memberWatchStarts.WithLabelValues(cluster).Inc()
}

func TestMetricsLintAndForgetAMember(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	members := &liveMembers{names: map[string]bool{"east": true, "west": true}}
	m, err := newMetrics(reg, members.live)
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []string{"east", "west"} {
		writeAll(m, cluster)
	}
	m.setReadiness(map[string]int{"True": 2})
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	members.leave("east")
	m.forget("east")
	// A reconcile still running and an owed removal counted after the
	// member left write its series again.
	writeAll(m, "east")
	for _, name := range perMemberSeries {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("%s has %d series once east left and was written again, want west's 1 (%v)", name, n, err)
		}
	}
	if n := testutil.CollectAndCount(m.propagationsBy); n != 3 {
		t.Errorf("fleet_propagations has %d series, want one per Ready status", n)
	}
}

// TestMetricsOfAMemberThatLeftStayGone writes a member's series from
// reconciles running while it leaves: none is left once it is forgotten.
func TestMetricsOfAMemberThatLeftStayGone(t *testing.T) {
	for range 200 {
		members := &liveMembers{names: map[string]bool{"east": true}}
		reg := prometheus.NewRegistry()
		m, err := newMetrics(reg, members.live)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var writes atomic.Int64
		for range 4 {
			wg.Go(func() {
				for range 50 {
					writeAll(m, "east")
					writes.Add(1)
				}
			})
		}
		for writes.Load() < 4 {
			runtime.Gosched()
		}
		members.leave("east")
		m.forget("east")
		wg.Wait()
		if n, err := testutil.GatherAndCount(reg, perMemberSeries...); err != nil || n != 0 {
			t.Fatalf("%d series of east are left once it was forgotten (%v)", n, err)
		}
	}
}

// TestMetricsOfAMemberHandedOffGo hands a member off to another replica:
// its series go, and a reconcile or owed count still running here writes
// none again; the new owner's are the only ones.
func TestMetricsOfAMemberHandedOffGo(t *testing.T) {
	owned := &registry.Cluster{Name: "east", Claims: []registry.Claim{{}}}
	moved := &registry.Cluster{Name: "east", Claims: []registry.Claim{{}}, Ownership: registry.NotOwned}
	var mu sync.Mutex
	now := owned
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, func(string) bool {
		mu.Lock()
		defer mu.Unlock()
		return writesSeries(now, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(m, "east")
	if n, err := testutil.GatherAndCount(reg, perMemberSeries...); err != nil || n != len(perMemberSeries) {
		t.Fatalf("%d series of east while it is owned here (%v), want %d", n, err, len(perMemberSeries))
	}
	mu.Lock()
	now = moved
	mu.Unlock()
	if e := (registry.Event{Name: "east", Old: owned, New: moved}); handedOff(e) {
		m.forget(e.Name)
	}
	writeAll(m, "east")
	if n, err := testutil.GatherAndCount(reg, perMemberSeries...); err != nil || n != 0 {
		t.Errorf("%d series of east are left once it was handed off (%v): the owed-removals alert would fire here for good", n, err)
	}
}
