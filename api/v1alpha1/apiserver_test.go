package v1alpha1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

// The package's API server, started by the first test that needs one and
// stopped by TestMain.
var (
	serverOnce sync.Once
	server     *envtest.Environment
	serverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		if err := controlplane.Stop([]*envtest.Environment{server}); err != nil && code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// apiServer returns the config of the package's API server with the CRD
// of file in deploy/crd installed, or skips t without envtest binaries.
func apiServer(t *testing.T, file string) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: run `make test`, or set it to a directory holding kube-apiserver and etcd (`make envtest` builds them into bin/)")
	}
	serverOnce.Do(func() {
		var envs []*envtest.Environment
		if envs, serverErr = controlplane.Start(1); serverErr == nil {
			server = envs[0]
		}
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	if _, err := envtest.InstallCRDs(server.Config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join("..", "..", "deploy", "crd", file)},
		ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	return server.Config
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// printed lists resource as `kubectl get` asks for it, as a Table: the
// names of the default columns, and the cells of its only row by column.
func printed(t *testing.T, cfg *rest.Config, resource string, namespace ...string) ([]string, map[string]any) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := []string{"/apis", fleetv1alpha1.GroupVersion.Group, fleetv1alpha1.GroupVersion.Version}
	if len(namespace) > 0 {
		path = append(path, "namespaces", namespace[0])
	}
	raw, err := cs.Discovery().RESTClient().Get().
		AbsPath(append(path, resource)...).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		}
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows of %s, want 1", len(table.Rows), resource)
	}
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	return columns, cells
}
