package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestKubectlFlagNames: "kubectl fleet" users type kubectl's --kubeconfig
// and --context; they name the hub, as --hub-kubeconfig and --hub-context
// do, rather than fail "unknown flag".
func TestKubectlFlagNames(t *testing.T) {
	kubeconfig := writeTemp(t, "hub.kubeconfig", []byte(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: hub, context: {cluster: hub, user: u}}]
current-context: hub
`))
	for args, want := range map[string]string{
		"get members --kubeconfig=/nonexistent/hub.yaml":          "/nonexistent/hub.yaml",
		"--kubeconfig /nonexistent/hub.yaml get members":          "/nonexistent/hub.yaml",
		"status eu-1 --kubeconfig=" + kubeconfig + " --context=x": `context "x" does not exist`,
		"get members --context x --kubeconfig " + kubeconfig:      `context "x" does not exist`,
	} {
		var stdout, stderr bytes.Buffer
		code := executeRoot(newRootCommand(func(runFlags) error { return nil }), strings.Fields(args), &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "unknown flag") {
			t.Errorf("%s: exit %d, want 1 and %q in stderr:\n%s", args, code, want, stderr.String())
		}
	}
}
