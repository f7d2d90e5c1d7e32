package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/cli"
)

// TestHelp compares each command's --help with testdata/help (rewrite
// with -update), so that a change to the CLI is a change to review.
func TestHelp(t *testing.T) {
	for _, command := range []string{"", "run", "register", "unregister", "get", "get members", "get propagations", "get clusterpropagations", "status", "status propagation", "status clusterpropagation",
		"rollout", "rollout status", "rollout pause", "rollout resume", "rollout undo", "rollout unpin", "rollout history", "grants", "grants sync", "tenancy", "tenancy dry-run", "cordon", "uncordon", "drain", "uninstall", "check-kubeconfig", "version", "completion"} {
		t.Run(command, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(strings.Fields(command), "--help")
			if code := execute(args, &stdout, &stderr); code != cli.ExitOK {
				t.Fatalf("%q: exit code %d; stderr:\n%s", args, code, stderr.String())
			}
			name := strings.ReplaceAll(command, " ", "-")
			if name == "" {
				name = "fleet-manager"
			}
			path := filepath.Join("testdata", "help", name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := stdout.String(); got != string(want) {
				t.Errorf("%q differs from %s (rewrite it with -update); got:\n%s", args, path, got)
			}
		})
	}
}

func TestDemoWithoutFleetDemo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"demo"}, &stdout, &stderr); code != cli.ExitError || !strings.Contains(stderr.String(), `run "make demo"`) {
		t.Errorf("demo without fleet-demo: exit code %d, stderr %q; want 1 and a pointer to make demo", code, stderr.String())
	}
}

func TestDefaultToRun(t *testing.T) {
	root := newRootCommand(func(runFlags) error { return nil })
	for _, tc := range []struct{ args, want string }{
		{"", "run"},
		{"--leader-elect", "run --leader-elect"},
		{"--namespace fleet --leader-elect", "run --namespace fleet --leader-elect"},
		{"--hub-kubeconfig hub.yaml --leader-elect", "run --hub-kubeconfig hub.yaml --leader-elect"},
		{"--hub-kubeconfig hub.yaml get members", "--hub-kubeconfig hub.yaml get members"},
		{"--hub-context=hub status eu-1", "--hub-context=hub status eu-1"},
		{"get mc", "get mc"},
		{"bogus", "bogus"},
		{"--help", "--help"},
		{"--version", "--version"},
		{"__complete get ''", "__complete get ''"},
	} {
		if got := strings.Join(defaultToRun(root, strings.Fields(tc.args)), " "); got != tc.want {
			t.Errorf("defaultToRun(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
