package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// refusalReason matches where the kubeconfig policy, the registry and the
// member pool give a refusal's reason: kubeconfig.Refuse("Reason", ...),
// a RefusedError{Reason: "Reason"} and a ReasonX = "Reason" constant.
var refusalReason = regexp.MustCompile(`(?:Refuse\(|Reason:\s*|Reason[A-Za-z]*\s*=\s*)"([A-Z][A-Za-z]+)"`)

// TestEveryRefusalReasonIsDocumented checks that docs/registration.md's
// table of refusal reasons names every reason the manager gives a
// registration, so that a new one cannot ship unexplained.
func TestEveryRefusalReasonIsDocumented(t *testing.T) {
	var reasons []string
	for _, dir := range []string{"kubeconfig", "registry", "member"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "pkg", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, m := range refusalReason.FindAllStringSubmatch(string(readFile(t, f)), -1) {
				reasons = append(reasons, m[1])
			}
		}
	}
	slices.Sort(reasons)
	reasons = slices.Compact(reasons)
	if len(reasons) < 20 {
		t.Fatalf("found only %d reasons in the code (%v): does refusalReason still match how they are given?", len(reasons), reasons)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "registration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |"); ok && strings.HasPrefix(line, "| `") {
			for _, name := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(first, -1) {
				documented[name[1]] = true
			}
		}
	}
	for _, r := range reasons {
		if !documented[r] {
			t.Errorf("refusal reason %s is not in docs/registration.md's table of reasons", r)
		}
	}
}
