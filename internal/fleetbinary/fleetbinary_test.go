package fleetbinary

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildLinksOnce builds fleet-manager for two callers: each gets a
// working binary in its own directory, and the second finds the shared
// build current rather than linking it again.
func TestBuildLinksOnce(t *testing.T) {
	first, err := Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared, err := buildShared()
	if err != nil {
		t.Fatal(err)
	}
	// Held open, so that a relinked binary cannot take its inode.
	f, err := os.Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(shared)
	if err != nil {
		t.Fatal(err)
	}
	// go build replaces a binary it links (a new file), and only
	// touches one it finds current.
	if !os.SameFile(before, after) {
		t.Errorf("the second Build linked fleet-manager again (%s is a new file)", shared)
	}
	for _, binary := range []string{first, second} {
		if filepath.Dir(binary) == filepath.Dir(shared) {
			t.Errorf("Build returned the shared binary %s, not a copy of the caller's", binary)
		}
		out, err := exec.Command(binary, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version:") {
			t.Errorf("%s version: %v\n%s", binary, err, out)
		}
	}
}
