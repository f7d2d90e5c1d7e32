// Package controlplane starts local API servers for the tests and the demo:
// a hub and members, each an envtest control plane (kube-apiserver plus
// etcd) on ports the kernel chooses. The binaries come from
// $KUBEBUILDER_ASSETS, which `make test` and `make demo` point at the ones
// they build into bin/. Whoever starts control planes stops them with Stop;
// nothing is left running after it returns.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/fleetkube/fleet-manager/deploy"
)

// Start starts n control planes in parallel. On error, the ones that
// started are stopped again.
func Start(n int) ([]*envtest.Environment, error) { return start(n, nil) }

// StartWithAPIServerFlags starts n control planes whose API servers run
// with flags set, such as feature gates a test turns off.
func StartWithAPIServerFlags(n int, flags map[string]string) ([]*envtest.Environment, error) {
	return start(n, func(_ int, env *envtest.Environment) error {
		args := env.ControlPlane.GetAPIServer().Configure()
		for name, value := range flags {
			args.Set(name, value)
		}
		return nil
	})
}

// startTimeout is how long a control plane may take to start: a minute,
// unless KUBEBUILDER_CONTROLPLANE_START_TIMEOUT says otherwise (zero lets
// envtest read it).
func startTimeout() time.Duration {
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") != "" {
		return 0
	}
	return time.Minute
}

// start starts n control planes in parallel, each configured first by
// configure when it is set.
func start(n int, configure func(i int, env *envtest.Environment) error) ([]*envtest.Environment, error) {
	if err := checkAssets(); err != nil {
		return nil, err
	}
	envs := make([]*envtest.Environment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range envs {
		envs[i] = &envtest.Environment{ControlPlaneStartTimeout: startTimeout()}
		if configure != nil {
			if err := configure(i, envs[i]); err != nil {
				return nil, err
			}
		}
		wg.Go(func() {
			if _, err := envs[i].Start(); err != nil {
				errs[i] = fmt.Errorf("starting API server %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, Stop(envs))
	}
	return envs, nil
}

// Stop stops every control plane in parallel.
func Stop(envs []*envtest.Environment) error {
	errs := make([]error, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		wg.Go(func() { errs[i] = env.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// AdminKubeconfig returns a kubeconfig of a cluster admin of env, with
// every credential embedded, as a registration Secret would hold it.
func AdminKubeconfig(env *envtest.Environment, user string) ([]byte, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %q: %w", user, err)
	}
	return u.KubeConfig()
}

// checkAssets fails unless $KUBEBUILDER_ASSETS holds the binaries envtest
// runs.
func checkAssets() error {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: `make test` and `make demo` build kube-apiserver and etcd into bin/ and set it")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return fmt.Errorf("%s not found in KUBEBUILDER_ASSETS (%s): run `make envtest` to build it", bin, dir)
		}
	}
	return nil
}

// InstallCRDs installs fleet-manager's CRDs, as deploy/crd holds them, into
// env's API server and waits until they are served.
func InstallCRDs(env *envtest.Environment) error {
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: crds})
	return err
}

// InstallClusterProfileCRD installs the ClusterProfile CRD of the Cluster
// Inventory API, as the module sigs.k8s.io/cluster-inventory-api the build
// uses ships it, into env's API server and waits until it is served. It
// finds the module with `go list`, so it needs the Go toolchain, as tests
// have.
func InstallClusterProfileCRD(env *envtest.Environment) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	if err != nil {
		return fmt.Errorf("finding the cluster-inventory-api module: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml"))
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return fmt.Errorf("the ClusterProfile CRD: %w", err)
	}
	_, err = envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}})
	return err
}
