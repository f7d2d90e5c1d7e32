package main

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

// The package's API servers, shared by its envtest tests: a hub with the
// fleet's CRDs, and a member. nil without $KUBEBUILDER_ASSETS.
var testHub, testMember *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m.Run, 2, func(envs []*envtest.Environment) error {
		testHub, testMember = envs[0], envs[1]
		return controlplane.InstallCRDs(testHub)
	}))
}

// needAPIServers skips t without the package's API servers.
func needAPIServers(t *testing.T) {
	t.Helper()
	if testHub == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
}
