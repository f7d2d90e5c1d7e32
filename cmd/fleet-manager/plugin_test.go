package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
)

// TestKubectlPlugin builds the binary as kubectl-fleet, and as
// kubectl_complete-fleet beside it, into a directory on $PATH, and runs
// it through the repository's kubectl (make envtest builds bin/kubectl)
// as "kubectl fleet".
func TestKubectlPlugin(t *testing.T) {
	needAPIServers(t)
	kubectl, err := filepath.Abs(filepath.Join("..", "..", "bin", "kubectl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("needs bin/kubectl (make envtest): %v", err)
	}
	c, _ := hubClient(t)
	createMember(t, c, newMember("plugin-east", "plugin", fleetv1alpha1.SecretReference{Namespace: "fleet-system", Name: "plugin-east", Format: fleetv1alpha1.FormatNative}))
	hubKubeconfig, err := controlplane.AdminKubeconfig(testHub, "plugin-test")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	binary, err := fleetbinary.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(binary), filepath.Join(dir, pluginName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pluginName, filepath.Join(dir, pluginCompletionName)); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+writeTemp(t, "hub.kubeconfig", hubKubeconfig))
	kubectlRun := func(args ...string) cliResult {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), kubectl, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		code := 0
		if err := cmd.Run(); err != nil {
			exitErr, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatalf("kubectl %q: %v", args, err)
			}
			code = exitErr.ExitCode()
		}
		return cliResult{stdout.String(), stderr.String(), code}
	}

	res := kubectlRun("plugin", "list", "--name-only")
	if !strings.Contains(res.stdout, pluginName+"\n") {
		t.Errorf("kubectl plugin list does not list %s: %+v", pluginName, res)
	}
	res = kubectlRun("fleet", "--help")
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("kubectl fleet --help: %+v", res)
	}
	checkGolden(t, "kubectl-fleet-help.golden", res.stdout)
	res = kubectlRun("fleet", "get", "members", "-l", getTestLabel+"=plugin", "-o", "name")
	if want := (cliResult{stdout: "membercluster.fleet.fleetkube.io/plugin-east\n"}); res != want {
		t.Errorf("kubectl fleet get members: got %+v, want %+v", res, want)
	}
	res = kubectlRun("fleet", "status")
	if want := "Error: kubectl fleet status wants a member NAME, got 0 arguments\nRun 'kubectl fleet status --help' for usage.\n"; res.code != 2 || res.stderr != want {
		t.Errorf("kubectl fleet status: got %+v, want exit 2 and %q", res, want)
	}
	res = kubectlRun("__complete", "fleet", "status", "plugin-")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "plugin-east\n:4\n") {
		t.Errorf("kubectl __complete fleet status plugin-: got %+v, want plugin-east", res)
	}
}
