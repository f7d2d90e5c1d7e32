// Package testenv starts real API servers for tests: a hub and members, each
// an envtest control plane (kube-apiserver plus etcd) on ports the kernel
// chooses. The binaries come from $KUBEBUILDER_ASSETS, which `make test`
// points at the ones it builds into bin/.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start starts n control planes in parallel. On error, the ones that
// started are stopped again.
func Start(n int) ([]*envtest.Environment, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds the API server binaries into bin/")
	}
	envs := make([]*envtest.Environment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range envs {
		envs[i] = &envtest.Environment{}
		wg.Go(func() {
			if _, err := envs[i].Start(); err != nil {
				errs[i] = fmt.Errorf("starting API server %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		Stop(envs)
		return nil, err
	}
	return envs, nil
}

// Stop stops every control plane in parallel.
func Stop(envs []*envtest.Environment) {
	var wg sync.WaitGroup
	for _, env := range envs {
		wg.Go(func() { _ = env.Stop() })
	}
	wg.Wait()
}

// Kubeconfig returns a kubeconfig of a cluster admin of env, with every
// credential embedded, as a registration Secret would hold it.
func Kubeconfig(env *envtest.Environment, user string) ([]byte, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %q: %w", user, err)
	}
	return u.KubeConfig()
}
