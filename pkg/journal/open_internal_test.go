package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAFileThatCannotBeOpenedIsLeftAsItIs: a journal the process may not
// open, as after a volume is remounted with other owners, is an error of
// Open, and stays where it is with what it owes.
func TestAFileThatCannotBeOpenedIsLeftAsItIs(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Owe("east", Owed{Namespace: "team", Propagation: "web", Reason: "the member is Unhealthy"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, FileName)
	openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if name == path {
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EACCES}
		}
		return os.OpenFile(name, flag, perm)
	}
	_, err = Open(dir, Options{})
	openFile = os.OpenFile
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("opening a journal the process may not open: %v, want a permission error", err)
	}
	t.Log(err)
	if aside, _ := filepath.Glob(path + ".broken-*"); len(aside) > 0 {
		t.Errorf("the journal was moved aside: %v", aside)
	}

	j, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("opening the journal once it may be opened: %v", err)
	}
	defer j.Close()
	if owed, err := j.Owed("east"); err != nil || len(owed) != 1 || j.Recovered() != nil {
		t.Errorf("once it may be opened, the journal owes %+v (%v), recovered %+v; want the removal it owed", owed, err, j.Recovered())
	}
}
