package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// notLinked matches the packages the production binary must not link: the
// test API servers belong to the tests and to cmd/fleet-demo.
var notLinked = regexp.MustCompile(`envtest|internal/controlplane`)

func TestDoesNotLinkTestAPIServers(t *testing.T) {
	const pkg = "github.com/fleetkube/fleet-manager/cmd/fleet-manager"
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		var stderr []byte
		if exitErr, ok := err.(*exec.ExitError); ok {
			stderr = exitErr.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed no packages", pkg)
	}
	for _, dep := range deps {
		if notLinked.MatchString(dep) {
			t.Errorf("fleet-manager links %s; the test API servers belong to the tests and cmd/fleet-demo", dep)
		}
	}
}
