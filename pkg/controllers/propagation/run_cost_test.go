package propagation_test

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// TestMemberRunCost measures what a member run costs the manager after a
// change of one of 30 selected ConfigMaps of 10 KiB: the process's CPU
// and allocations per member reconcile (the API servers run in processes
// of their own). It runs only with FLEET_RUN_COST set to the number of
// changes, a developer's aid: with FLEET_RUN_COST_PROFILE set to a
// directory it writes there the CPU profile of the changes alone
// (cpu.out) and the allocation profiles before and after them
// (allocs-before.out, allocs-after.out: `go tool pprof -base`).
func TestMemberRunCost(t *testing.T) {
	changes, _ := strconv.Atoi(os.Getenv("FLEET_RUN_COST"))
	if changes <= 0 {
		t.Skip("FLEET_RUN_COST is not set")
	}
	f := newFleet(t)
	members := []string{"east", "west", "north"}
	for i, name := range members {
		f.register(i, name, map[string]string{"env": "prod"})
	}
	const objects, size = 30, 10 << 10
	for j := range objects {
		f.configMap("cm"+strconv.Itoa(j), map[string]string{"v": "0", "pad": strings.Repeat("x", size)}, map[string]string{"app": "web"})
	}
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in every member", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Applied == int32(len(members))
	})
	quiet := func() {
		last := memberReconciles(t, members...)
		// Polled seldom: each poll gathers every metric, in the measured
		// process.
		for still := time.Now(); time.Since(still) < 500*time.Millisecond; {
			time.Sleep(250 * time.Millisecond)
			if n := memberReconciles(t, members...); n != last {
				last, still = n, time.Now()
			}
		}
	}
	quiet()
	runs := memberReconciles(t, members...)
	stopProfiles := profileChanges(t, os.Getenv("FLEET_RUN_COST_PROFILE"))
	cpu, mem := cpuTime(t), memStats()
	var took time.Duration // from a change to every member holding it
	for i := range changes {
		v := strconv.Itoa(i + 1)
		cm := f.hubConfigMap("cm0")
		cm.Data["v"] = v
		start := time.Now()
		if err := f.hub.Client.Update(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		for m := range members {
			f.waitCopy(m, "cm0", "holds change "+v, dataIs("v", v))
		}
		took += time.Since(start)
		quiet()
	}
	runs = memberReconciles(t, members...) - runs
	cpu, after := cpuTime(t)-cpu, memStats()
	stopProfiles()
	t.Logf("%d changes, %.0f member runs: %.2f ms CPU, %.2f MiB and %.0f allocations per member run (the test's own polling included)",
		changes, runs, float64(cpu.Microseconds())/1000/runs, float64(after.TotalAlloc-mem.TotalAlloc)/(1<<20)/runs, float64(after.Mallocs-mem.Mallocs)/runs)
	t.Logf("%s from a change to every member holding it, on average", (took / time.Duration(changes)).Round(time.Millisecond))
}

// profileChanges starts the CPU profile into dir, and writes the
// allocation profile there, if dir is set; the function it returns stops
// the CPU profile and writes the allocation profile again.
func profileChanges(t *testing.T, dir string) func() {
	if dir == "" {
		return func() {}
	}
	writeAllocs := func(name string) {
		runtime.GC() // the profile shows allocations as of the last GC
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	writeAllocs("allocs-before.out")
	cpu, err := os.Create(filepath.Join(dir, "cpu.out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			t.Fatal(err)
		}
		writeAllocs("allocs-after.out")
	}
}

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}
