package kubeconfig_test

import (
	"errors"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases(f) {
		f.Add(tc.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, policy := range []kubeconfig.Policy{{}, kubeconfigtest.Permissive} {
			cfg, err := policy.Parse(data)
			if err == nil {
				if cfg == nil {
					t.Fatal("Parse() returned neither a config nor an error")
				}
				continue
			}
			refused, ok := errors.AsType[*kubeconfig.RefusedError](err)
			if !ok || refused.Reason == "" || refused.Message == "" {
				t.Fatalf("Parse() error = %#v, want a *RefusedError with a reason and a message", err)
			}
			if cfg != nil {
				t.Fatal("Parse() returned a config with its error")
			}
		}
	})
}
