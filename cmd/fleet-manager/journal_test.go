package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// TestAStateDirThatCannotHoldAJournalStopsTheStart: a --state-dir that is
// not a directory, or whose journal cannot be opened, stops the manager
// with an error naming the flag; nothing runs on a temporary journal and
// nothing is moved aside.
func TestAStateDirThatCannotHoldAJournalStopsTheStart(t *testing.T) {
	for name, stateDir := range map[string]func(t *testing.T) string{
		"a file": func(t *testing.T) string {
			file := filepath.Join(t.TempDir(), "a-file")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return file
		},
		"a journal that cannot be opened": func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, journal.FileName), 0o700); err != nil {
				t.Fatal(err)
			}
			return dir
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := stateDir(t)
			t.Setenv("TMPDIR", t.TempDir()) // where a temporary journal would go
			rj, err := openJournal(dir, testr.New(t))
			if err == nil {
				rj.close()
				t.Fatalf("the manager started on %s as its --state-dir", name)
			}
			if !strings.Contains(err.Error(), "--state-dir "+dir) {
				t.Errorf("the error does not name --state-dir %s: %v", dir, err)
			}
			t.Log(err)
			if temp, _ := os.ReadDir(os.Getenv("TMPDIR")); len(temp) > 0 {
				t.Errorf("a temporary journal was made: %v", temp)
			}
			if aside, _ := filepath.Glob(filepath.Join(dir, journal.FileName+".broken-*")); len(aside) > 0 {
				t.Errorf("the journal was moved aside: %v", aside)
			}
		})
	}
}

// TestATemporaryJournalIsNotReady: without --state-dir, the manager logs
// an error and /readyz fails its journal check; with one, it passes.
func TestATemporaryJournalIsNotReady(t *testing.T) {
	logs := &syncbuffer.Buffer{}
	logger, stop := captureLogs(logs)
	defer stop()
	rj, err := openJournal("", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer rj.close()
	if err := rj.ready(nil); err == nil || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("a temporary journal's readiness: %v, want an error naming --state-dir", err)
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "No --state-dir") {
		t.Errorf("a temporary journal was not logged as an error:\n%s", logs)
	}

	durable, err := openJournal(t.TempDir(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer durable.close()
	if err := durable.ready(nil); err != nil {
		t.Errorf("a journal in --state-dir is not ready: %v", err)
	}
}
