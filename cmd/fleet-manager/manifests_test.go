package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
)

// deployDir is the repository's deploy/.
func deployDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// renderKustomization renders the kustomization in dir as
// `kubectl kustomize` does.
func renderKustomization(t *testing.T, dir string) []byte {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := resources.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectlCommand runs the kubectl `make envtest` builds next to the API
// server, with the kubeconfig and stdin given, and returns its output.
func kubectlCommand(t *testing.T, kubeconfig string, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), append([]string{"--kubeconfig=" + kubeconfig, "--request-timeout=1m"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	return cmd.CombinedOutput()
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// splitDocuments splits a YAML stream into its documents, dropping those
// with no object, such as comments alone.
func splitDocuments(t *testing.T, stream []byte) [][]byte {
	t.Helper()
	var docs [][]byte
	for _, doc := range documentSeparator.Split(string(stream), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(obj) > 0 {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// documentOfKind returns the one document of kind.
func documentOfKind(t *testing.T, docs [][]byte, kind string) []byte {
	t.Helper()
	var found [][]byte
	for _, doc := range docs {
		var meta metav1.TypeMeta
		decodeDocument(t, doc, &meta)
		if meta.Kind == kind {
			found = append(found, doc)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d documents of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func decodeDocument(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := yaml.Unmarshal(doc, into); err != nil {
		t.Fatalf("%v in:\n%s", err, doc)
	}
}

// captureLogs returns a logger writing JSON lines to b, to which klog (so
// client-go's reflectors) and controller-runtime's global log (so its
// metrics server) write too, until the returned func is called.
func captureLogs(b *syncbuffer.Buffer) (logr.Logger, func()) {
	setGlobalLoggers.Do(func() {
		// Set once: klog's may not change while anything logs, and
		// controller-runtime's cannot change at all.
		global := zap.New(zap.WriteTo(currentLogWriter{}))
		klog.SetLogger(global)
		ctrl.SetLogger(global)
	})
	currentLogs.Store(b)
	return zap.New(zap.WriteTo(b)), func() { currentLogs.Store(nil) }
}

// The global loggers write to currentLogs, the log of the manager running
// in-process, if any.
var (
	setGlobalLoggers sync.Once
	currentLogs      atomic.Pointer[syncbuffer.Buffer]
)

type currentLogWriter struct{}

func (currentLogWriter) Write(p []byte) (int, error) {
	if b := currentLogs.Load(); b != nil {
		return b.Write(p)
	}
	return len(p), nil
}

// linesWith returns the lines of log that contain s, in any case.
func linesWith(log, s string) []string {
	var found []string
	for line := range strings.Lines(log) {
		if strings.Contains(strings.ToLower(line), strings.ToLower(s)) {
			found = append(found, line)
		}
	}
	return found
}
