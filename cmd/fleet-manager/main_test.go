package main

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

// The package's API servers, shared by its envtest tests: a hub with the
// fleet's CRDs, and a member. nil without $KUBEBUILDER_ASSETS.
var testHub, testMember *envtest.Environment

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Exit(m.Run()) // envtest tests skip themselves
	}
	envs, err := controlplane.Start(2)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := controlplane.InstallCRDs(envs[0]); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		testHub, testMember = envs[0], envs[1]
		code = m.Run()
	}
	if err := controlplane.Stop(envs); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// needAPIServers skips t without the package's API servers.
func needAPIServers(t *testing.T) {
	t.Helper()
	if testHub == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
}
