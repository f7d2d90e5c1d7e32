package kubeconfig_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// A kubeconfig as big as a Secret may hold, with a key per line, is
// refused before it is decoded: with a few small allocations, where
// decoding it took hundreds of megabytes (issue 12, defect 10).
func TestParseRefusesOverBudgetCheaply(t *testing.T) {
	data := kubeconfigtest.Flat(kubeconfig.MaxKubeconfigBytes)
	var policy kubeconfig.Policy
	_, err := policy.Parse(data)
	if refused, ok := errors.AsType[*kubeconfig.RefusedError](err); !ok || refused.Reason != kubeconfig.ReasonKubeconfigTooComplex {
		t.Fatalf("Parse() error = %v, want reason %s", err, kubeconfig.ReasonKubeconfigTooComplex)
	}

	if allocs := testing.AllocsPerRun(10, func() { _, _ = policy.Parse(data) }); allocs > 5 {
		t.Errorf("Parse() of a %d-byte kubeconfig over the budget made %.0f allocations, want at most 5", len(data), allocs)
	}
	const runs = 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		_, _ = policy.Parse(data)
	}
	runtime.ReadMemStats(&after)
	if perParse := (after.TotalAlloc - before.TotalAlloc) / runs; perParse > 4<<10 {
		t.Errorf("Parse() of a %d-byte kubeconfig over the budget allocated %d bytes, want at most 4 KiB", len(data), perParse)
	}
}
