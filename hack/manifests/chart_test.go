package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The repository's root, and where the chart installs in these tests:
// deploy/'s namespace.
const (
	root        = "../.."
	fleetNS     = "fleet-system"
	releaseName = "fleet-manager"
	chartDir    = root + "/charts/fleet-manager"
)

// helmLabels are the labels Helm's charts add and deploy/ does not: the
// only difference allowed in a chart object's metadata.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"}

// crdLabels are deploy/'s labels, which kustomize adds to its CRDs. Helm
// installs the chart's crds/ as they are, untemplated: the only difference
// allowed in a CRD.
var crdLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/part-of"}

// TestChartMatchesDeploy renders the chart with Helm's library and deploy/
// with kustomize, with the same options, and compares every object.
func TestChartMatchesDeploy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		// components of deploy/ the values switch on.
		components []string
		// expect changes deploy/'s objects as the values do beyond them.
		expect func(t *testing.T, objects map[string]object)
		// notRendered are deploy/'s objects the chart leaves out.
		notRendered []string
	}{{
		name: "defaults",
		// Helm installs into a namespace it creates (--create-namespace).
		notRendered: []string{key("v1", "Namespace", "", fleetNS)},
	}, {
		name: "persistent journal and prometheus",
		values: `
createNamespace: true
persistence: {enabled: true}
metrics:
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
  dashboard: {enabled: true}
`,
		components: []string{"persistent-state", "prometheus"},
	}, {
		name: "formats",
		values: `
createNamespace: true
formats:
  multiclusterRuntime: true
  capi: {enabled: true}
  argocd: {enabled: true}
`,
		expect: func(t *testing.T, objects map[string]object) {
			for _, o := range slices.Concat(formatObjects(t, "capi-clusterrole.yaml"), formatObjects(t, "argocd-role.yaml")) {
				objects[o.key()] = o
			}
			addArgs(objects, "--multicluster-runtime-secrets", "--capi-secrets", "--argocd-secrets", "--argocd-namespace=argocd")
		},
	}, {
		name: "tenancy enforced",
		values: `
createNamespace: true
tenancy: Enforce
`,
		expect: func(t *testing.T, objects map[string]object) {
			container := objects[key("apps/v1", "Deployment", fleetNS, "fleet-manager")].path("spec", "template", "spec", "containers").([]any)[0].(map[string]any)
			args := container["args"].([]any)
			i := slices.Index(args, any("--tenancy=Auto"))
			if i < 0 {
				t.Fatalf("deploy/ passes no --tenancy=Auto: %v", args)
			}
			args[i] = "--tenancy=Enforce"
		},
	}, {
		name: "Cluster API in named namespaces",
		values: `
createNamespace: true
formats:
  capi: {enabled: true, namespaces: [team-a, team-b]}
`,
		// As capi-clusterrole.yaml's comment says: a RoleBinding to its
		// ClusterRole in each namespace instead of its ClusterRoleBinding.
		expect: func(t *testing.T, objects map[string]object) {
			for _, ns := range []string{"", "team-a", "team-b"} {
				for _, o := range formatObjects(t, "capi-clusterrole.yaml") {
					switch {
					case ns == "" && o.path("kind") != "ClusterRoleBinding":
					case ns != "" && o.path("kind") == "ClusterRoleBinding":
						o["kind"] = "RoleBinding"
						o["metadata"].(map[string]any)["namespace"] = ns
					default:
						continue
					}
					objects[o.key()] = o
				}
			}
			addArgs(objects, "--capi-secrets", "--capi-namespaces=team-a,team-b")
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			want := renderDeploy(t, tc.components...)
			if tc.expect != nil {
				tc.expect(t, want)
			}
			for k, o := range want {
				if o.path("kind") == "CustomResourceDefinition" {
					delete(want, k) // TestChartCRDs compares them
				}
			}
			got := renderChart(t, tc.values)
			for _, k := range tc.notRendered {
				if _, ok := got[k]; ok {
					t.Errorf("the chart renders %s", k)
				}
				delete(want, k)
			}
			compare(t, want, got)
		})
	}
}

// TestChartCRDs compares the chart's crds/ with deploy/crd, as kustomize
// renders them: `make chart` copies them.
func TestChartCRDs(t *testing.T) {
	want := map[string]object{}
	for k, o := range renderDeploy(t) {
		if o.path("kind") == "CustomResourceDefinition" {
			o.dropLabels(crdLabels...)
			want[k] = o
		}
	}
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]object{}
	for _, crd := range chart.CRDObjects() {
		for _, o := range decode(t, crd.Filename, crd.File.Data) {
			got[o.key()] = o
		}
	}
	if len(want) == 0 {
		t.Fatal("deploy/ renders no CRD")
	}
	compareWith(t, want, got, "crds/ is stale: run make chart")
}

// formatObjects are the objects of file in deploy/formats.
func formatObjects(t *testing.T, file string) []object {
	t.Helper()
	return decode(t, file, readFile(t, filepath.Join(root, "deploy", "formats", file)))
}

// addArgs appends args to the manager's in deploy/'s Deployment.
func addArgs(objects map[string]object, args ...any) {
	container := objects[key("apps/v1", "Deployment", fleetNS, "fleet-manager")].path("spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	container["args"] = append(container["args"].([]any), args...)
}

// object is one Kubernetes object, as JSON decodes it.
type object map[string]any

func key(apiVersion, kind, namespace, name string) string {
	return fmt.Sprintf("%s %s %s/%s", apiVersion, kind, namespace, name)
}

func (o object) key() string {
	ns, _ := o.path("metadata", "namespace").(string)
	name, _ := o.path("metadata", "name").(string)
	return key(o["apiVersion"].(string), o["kind"].(string), ns, name)
}

// path is the value at the fields given, nil where there is none.
func (o object) path(fields ...string) any {
	var v any = map[string]any(o)
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[f]
	}
	return v
}

// dropLabels deletes the labels named from the object's metadata.
func (o object) dropLabels(names ...string) {
	labels, ok := o.path("metadata", "labels").(map[string]any)
	if !ok {
		return
	}
	for _, n := range names {
		delete(labels, n)
	}
	if len(labels) == 0 {
		delete(o["metadata"].(map[string]any), "labels")
	}
}

// renderDeploy renders deploy/ with the components named, as an overlay
// of the README would: `resources: [deploy]`, `components: [...]`.
func renderDeploy(t *testing.T, components ...string) map[string]object {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(components) > 0 {
		overlay := t.TempDir()
		// Relative: kustomize refuses an absolute path.
		deploy, err := filepath.Rel(overlay, dir)
		if err != nil {
			t.Fatal(err)
		}
		kustomization := fmt.Sprintf("resources: [%q]\ncomponents:\n", deploy)
		for _, c := range components {
			kustomization += fmt.Sprintf("  - %q\n", filepath.Join(deploy, "components", c))
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
			t.Fatal(err)
		}
		dir = overlay
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize deploy/ with %v: %v", components, err)
	}
	out, err := resources.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return byKey(t, decode(t, "deploy/", out))
}

// renderChart renders the chart as `helm install fleet-manager
// charts/fleet-manager -n fleet-system -f values` would.
func renderChart(t *testing.T, values string) map[string]object {
	t.Helper()
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	release := chartutil.ReleaseOptions{Name: releaseName, Namespace: fleetNS, Revision: 1, IsInstall: true}
	renderValues, err := chartutil.ToRenderValues(chart, vals, release, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(chart, renderValues)
	if err != nil {
		t.Fatal(err)
	}
	var objects []object
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, ".yaml") {
			objects = append(objects, decode(t, name, []byte(files[name]))...)
		}
	}
	for _, o := range objects {
		o.dropLabels(helmLabels...)
	}
	return byKey(t, objects)
}

// decode splits a YAML stream into its objects.
func decode(t *testing.T, name string, data []byte) []object {
	t.Helper()
	var objects []object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o != nil {
			objects = append(objects, o)
		}
	}
}

func byKey(t *testing.T, objects []object) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range objects {
		if _, ok := m[o.key()]; ok {
			t.Fatalf("%s twice", o.key())
		}
		m[o.key()] = o
	}
	return m
}

// compare fails for each object that is not in both, or differs.
func compare(t *testing.T, want, got map[string]object) {
	t.Helper()
	compareWith(t, want, got, "change charts/fleet-manager/templates or deploy/ to match")
}

func compareWith(t *testing.T, want, got map[string]object, fix string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: in deploy/, not in the chart (%s)", k, fix)
			continue
		}
		if diff := cmp.Diff(want[k], g); diff != "" {
			t.Errorf("%s differs (-deploy/ +chart; %s):\n%s", k, fix, diff)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: in the chart, not in deploy/ (%s)", k, fix)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestChartRefusesABadTenancy: a tenancy value the manager would refuse at
// start (exit 2, a crash loop) fails the install instead.
func TestChartRefusesABadTenancy(t *testing.T) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, value := range []string{`"enforce"`, `""`, "null"} {
		vals, err := chartutil.ReadValues([]byte("tenancy: " + value))
		if err != nil {
			t.Fatal(err)
		}
		release := chartutil.ReleaseOptions{Name: releaseName, Namespace: fleetNS, Revision: 1, IsInstall: true}
		renderValues, err := chartutil.ToRenderValues(chart, vals, release, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Render(chart, renderValues); err == nil || !strings.Contains(err.Error(), "none of Auto, Enforce, Off") {
			t.Errorf("tenancy: %s rendered (error %v), want it refused", value, err)
		}
	}
}
