package fleettest_test

// Outside review (wt-review42): attacks on the harness's promises
// (docs/library.md "Testing with the harness").

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/fleettest"
)

// children returns "pid comm" of this process's live child processes.
func children(t *testing.T) []string {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		line := string(b)
		i := strings.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(line[i+1:])
		if len(fields) > 2 && fields[1] != "Z" && fields[2] == self {
			out = append(out, filepath.Base(filepath.Dir(s))+" "+line[strings.IndexByte(line, '(')+1:i])
		}
	}
	return out
}

// noneLeft fails t if a goroutine not in baseline or a child process is
// left, waiting up to 10 s for them to end.
func noneLeft(t *testing.T, baseline goleak.Option, ignore ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var leaked error
	var procs []string
	for {
		leaked, procs = goleak.Find(append(ignore, baseline)...), children(t)
		if (leaked == nil && len(procs) == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(procs) > 0 {
		t.Errorf("processes left: %v", procs)
	}
	if leaked != nil {
		t.Errorf("goroutines left: %v", leaked)
	}
}

func needAssets(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs KUBEBUILDER_ASSETS")
	}
}

// TestHarnessZeroMembers: Members: 0 (and negative) are the
// documented default, 2; the fleet stops with nothing left.
func TestHarnessZeroMembers(t *testing.T) {
	needAssets(t)
	baseline := goleak.IgnoreCurrent()
	for _, n := range []int{0, -1} {
		f, err := fleettest.New(fleettest.Options{Members: n})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Members) != 2 {
			t.Errorf("Members: %d started %d members, want the default 2", n, len(f.Members))
		}
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		if err := f.Stop(); err != nil {
			t.Errorf("a second Stop: %v", err)
		}
	}
	noneLeft(t, baseline)
}

var errReview = errors.New("review: setup refused")

// TestHarnessSetupFails: a Setup, an MCR setup and a controller
// that fails at start: New returns their error (the last not as a
// timeout), and nothing started is left running.
func TestHarnessSetupFails(t *testing.T) {
	needAssets(t)
	cases := map[string]fleettest.Options{
		"Setup":               {Members: 1, Setup: func(*fleet.Manager) error { return errReview }},
		"MulticlusterRuntime": {Members: 1, MulticlusterRuntime: func(mcmanager.Manager) error { return errReview }},
		"runnable fails at start": {Members: 1, Timeout: 90 * time.Second, Setup: func(m *fleet.Manager) error {
			return m.Add(manager.RunnableFunc(func(context.Context) error { return errReview }))
		}},
		"MCR runnable fails at start": {Members: 1, Timeout: 90 * time.Second, MulticlusterRuntime: func(m mcmanager.Manager) error {
			return m.GetLocalManager().Add(manager.RunnableFunc(func(context.Context) error { return errReview }))
		}},
	}
	for name, opts := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			baseline := goleak.IgnoreCurrent()
			before := time.Now()
			f, err := fleettest.New(opts)
			took := time.Since(before)
			if err == nil {
				_ = f.Stop()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), errReview.Error()) {
				t.Errorf("New's error does not carry the cause: %v", err)
			}
			if took > 60*time.Second {
				t.Errorf("New took %s to fail: %v", took, err)
			}
			t.Logf("New failed after %s: %v", took.Round(time.Millisecond), err)
			// A manager that stops before its hub cache synced leaves
			// controller-runtime v0.25.2's waits on those informers
			// behind (not the harness's; docs/library.md says so).
			noneLeft(t, baseline,
				goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/cache.newMultiNamespaceInformer.func1"),
				goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/cache.newMultiNamespaceInformerHandlerRegistration.func1"))
		})
	}
}

// TestHarnessStopLeavesNothing: a fleet with a fleet controller
// and an MCR controller, stopped: no goroutine, no process left.
func TestHarnessStopLeavesNothing(t *testing.T) {
	needAssets(t)
	baseline := goleak.IgnoreCurrent()
	f, err := fleettest.New(fleettest.Options{
		Members: 2,
		Setup: func(m *fleet.Manager) error {
			return fleet.NewControllerManagedBy(m).Named("rv-fleet").For(&corev1.ConfigMap{}).
				Complete(fleet.ReconcilerFunc(func(context.Context, fleet.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
		},
		MulticlusterRuntime: func(mgr mcmanager.Manager) error {
			return mcbuilder.ControllerManagedBy(mgr).Named("rv-mcr").For(&corev1.ConfigMap{}).
				Complete(mcreconcile.Func(func(context.Context, mcreconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range f.Members {
		if err := m.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rv"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.MulticlusterRuntime.GetProvider(); got == nil {
		t.Error("no provider")
	}
	time.Sleep(time.Second)
	if err := f.Stop(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t, baseline)
}
