package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docFiles are the files that document the run command's flags, relative
// to this package: the README and every page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "..", "README.md")}, pages...)
}

// flagEntry matches a line that documents a flag: a markdown table row
// whose first cell starts with the flag as a code span, or a list item
// ("-" or "*") that starts with it. The code span may carry a value after
// "=" or a space, as in `--allow-exec-plugin=<command>`. Group 1 is the
// flag's name.
var flagEntry = regexp.MustCompile("^(?:\\|\\s*|[-*]\\s+)`--([a-z0-9][a-z0-9-]*)(?:[= ][^`]*)?`")

// TestEveryRunFlagIsDocumentedOnce checks that every flag "fleet-manager
// run --help" lists is documented exactly once across README.md and
// docs/*.md, so that a new flag cannot ship undocumented and no flag is
// described in two places that can drift apart.
//
// The rule: outside fenced code blocks, exactly one line must be a flag
// entry for the flag (see flagEntry): a table row whose first cell starts
// with `--name` (a value may follow, as in `--name=<value>`), or a list
// item that starts with `--name`. Other mentions, in prose or in other
// columns, do not count. The flags are those of run and those it inherits
// from the root command (--hub-kubeconfig, --hub-context), built by
// newRootCommand as the binary builds them; cobra's --help is left out. A
// hidden flag is left out too, unless it is deprecated: pflag has no
// aliases, so a deprecated flag (hidden by pflag) is how an old name would
// be kept, and it must still be documented once, its entry saying that it
// is deprecated or an alias.
func TestEveryRunFlagIsDocumentedOnce(t *testing.T) {
	root := newRootCommand(func(runFlags) error { return nil })
	run, _, err := root.Find([]string{"run"})
	if err != nil || run.Name() != "run" {
		t.Fatalf("finding the run command: %v (found %q)", err, run.Name())
	}
	flags := runFlagsToDocument(run)
	if len(flags) == 0 {
		t.Fatal("the run command has no flags to check")
	}

	entries := map[string][]string{} // flag name -> "file:line: text"
	for _, path := range docFiles(t) {
		for name, places := range flagEntries(t, path) {
			entries[name] = append(entries[name], places...)
		}
	}

	for _, f := range flags {
		places := entries[f.Name]
		switch {
		case len(places) == 0:
			t.Errorf("--%s is not documented: add a row starting with `--%s` to a flags table in README.md or docs/*.md", f.Name, f.Name)
		case len(places) > 1:
			t.Errorf("--%s is documented %d times; keep one:\n  %s", f.Name, len(places), strings.Join(places, "\n  "))
		case f.Deprecated != "":
			if text := strings.ToLower(places[0]); !strings.Contains(text, "deprecated") && !strings.Contains(text, "alias") {
				t.Errorf("--%s is deprecated (%s), but its entry does not say it is deprecated or an alias:\n  %s", f.Name, f.Deprecated, places[0])
			}
		}
	}
}

// runFlagsToDocument returns the flags run's --help lists (its own and
// those it inherits), without cobra's --help, and with deprecated flags,
// which pflag hides, put back.
func runFlagsToDocument(run *cobra.Command) []*pflag.Flag {
	var flags []*pflag.Flag
	add := func(f *pflag.Flag) {
		if f.Name == "help" || (f.Hidden && f.Deprecated == "") {
			return
		}
		if !slices.ContainsFunc(flags, func(g *pflag.Flag) bool { return g.Name == f.Name }) {
			flags = append(flags, f)
		}
	}
	run.LocalFlags().VisitAll(add)
	run.InheritedFlags().VisitAll(add)
	return flags
}

// flagEntries returns the flag entries of the markdown file path, by flag
// name, each as "path:line: text".
func flagEntries(t *testing.T, path string) map[string][]string {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	entries := map[string][]string{}
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	inFence := false
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := flagEntry.FindStringSubmatch(line); m != nil {
			entries[m[1]] = append(entries[m[1]], fmt.Sprintf("%s:%d: %s", path, n, line))
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return entries
}
