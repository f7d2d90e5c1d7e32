package manifests

import (
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestChartLint runs `helm lint`'s checks: a warning fails the test.
func TestChartLint(t *testing.T) {
	for _, m := range lint.All(chartDir, nil, fleetNS, true).Messages {
		if m.Severity >= support.WarningSev {
			t.Error(m)
		} else {
			t.Log(m)
		}
	}
}
