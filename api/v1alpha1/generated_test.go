package v1alpha1_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy functions and the
// CRDs into a temporary directory, with the controller-gen that
// hack/controller-gen.sh builds (once; later runs reuse bin/controller-gen),
// and fails unless the committed files are byte for byte the same.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	objectDir, crdDir := filepath.Join(out, "object"), filepath.Join(out, "crd")
	// The same generators and paths as `make manifests`, with the output
	// sent to out.
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "controller-gen.sh"),
		"object", "crd", "paths=./api/...",
		"output:object:dir="+objectDir, "output:crd:dir="+crdDir)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("running controller-gen: %v\n%s", err, b)
	}

	same(t, filepath.Join(objectDir, "zz_generated.deepcopy.go"), filepath.Join(root, "api", "v1alpha1", "zz_generated.deepcopy.go"))

	want := yamlFiles(t, crdDir)
	got := yamlFiles(t, filepath.Join(root, "deploy", "crd"))
	got = slices.DeleteFunc(got, func(name string) bool { return name == "kustomization.yaml" })
	if !slices.Equal(got, want) {
		t.Errorf("deploy/crd holds CRDs %v, controller-gen generates %v: run `make manifests`", got, want)
	}
	for _, name := range want {
		same(t, filepath.Join(crdDir, name), filepath.Join(root, "deploy", "crd", name))
	}
}

// same fails unless committed has the content of generated.
func same(t *testing.T, generated, committed string) {
	t.Helper()
	want, err := os.ReadFile(generated)
	if err != nil {
		t.Fatalf("reading generated file: %v", err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Errorf("%v: run `make manifests`", err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `make manifests`\n%s", committed, firstDifference(got, want))
	}
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		if i >= len(g) || i >= len(w) || g[i] != w[i] {
			return fmt.Sprintf("first difference at line %d:\n  committed: %q\n  generated: %q", i+1, line(g, i), line(w, i))
		}
	}
	return ""
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<end of file>"
}

// yamlFiles returns the sorted names of the YAML files in dir.
func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}
