package controlplane

import (
	"fmt"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RunTests is a test package's TestMain body: it starts n control planes,
// hands them to setup, runs the tests with run (the package's
// testing.M.Run), stops the control planes and returns the exit code, the
// tests' or 1 when a step failed. Without $KUBEBUILDER_ASSETS it starts
// none and only runs the tests; envtest tests skip themselves.
func RunTests(run func() int, n int, setup func(envs []*envtest.Environment) error) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return run()
	}
	envs, err := Start(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	if err := setup(envs); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = run()
	}
	if err := Stop(envs); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}
