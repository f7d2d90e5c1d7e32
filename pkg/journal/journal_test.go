package journal_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var configMaps = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

func open(t testing.TB, dir string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(dir, journal.Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func copyOf(prop, name, hash string) journal.Copy {
	return journal.Copy{Object: journal.Object{GVK: configMaps, Namespace: "team", Name: name}, Propagation: prop, Hash: hash}
}

func names(copies []journal.Copy) []string {
	var n []string
	for _, c := range copies {
		n = append(n, c.Propagation+"/"+c.Name+"@"+c.Hash)
	}
	slices.Sort(n)
	return n
}

func stats(t *testing.T, j *journal.Journal) journal.Stats {
	t.Helper()
	st, err := j.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestCopiesSurviveAReopen(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	if rec := j.Recovered(); rec == nil || rec.MovedTo != "" {
		t.Errorf("a new journal's recovery = %+v, want one that moved nothing", rec)
	}
	if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h1"), copyOf("web", "b", "h1")}); err != nil {
		t.Fatal(err)
	}
	if err := j.Record("west", []journal.Copy{copyOf("web", "a", "h1")}); err != nil {
		t.Fatal(err)
	}
	commits := stats(t, j).Commits
	if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h1")}); err != nil {
		t.Fatal(err)
	}
	if got := stats(t, j).Commits; got != commits {
		t.Errorf("recording an unchanged copy committed %d times, want 0", got-commits)
	}
	if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h2")}); err != nil {
		t.Fatal(err)
	}
	if err := j.Forget("east", []journal.Copy{copyOf("web", "b", "")}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = open(t, dir)
	if rec := j.Recovered(); rec != nil {
		t.Errorf("a good journal was recovered: %v", rec.Err)
	}
	east, err := j.Copies("east")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(east), []string{"web/a@h2"}; !slices.Equal(got, want) {
		t.Errorf("east's copies = %v, want %v", got, want)
	}
	members, err := j.Members()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"east", "west"}; !slices.Equal(members, want) {
		t.Errorf("members = %v, want %v", members, want)
	}
}

// TestKindsOf: the kinds of one Propagation's copies, each once, and no
// other Propagation's.
func TestKindsOf(t *testing.T) {
	j := open(t, t.TempDir())
	secret := journal.Copy{Object: journal.Object{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, Namespace: "team", Name: "s"}, Propagation: "web", Hash: "h1"}
	other := journal.Copy{Object: journal.Object{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "team", Name: "d"}, Propagation: "webs", Hash: "h1"}
	if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h1"), copyOf("web", "b", "h1"), secret, other}); err != nil {
		t.Fatal(err)
	}
	kinds, err := j.KindsOf("east", "team", "web")
	if err != nil {
		t.Fatal(err)
	}
	if want := []schema.GroupVersionKind{configMaps, secret.GVK}; !slices.Equal(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
	if kinds, err := j.KindsOf("west", "team", "web"); err != nil || len(kinds) != 0 {
		t.Errorf("a member without copies: kinds %v, error %v; want none", kinds, err)
	}
}

func TestACopyThatWouldNotReadBackIsRefused(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	for _, c := range []journal.Copy{copyOf("", "a", "h"), copyOf("web", "", "h"), copyOf("web", "a/b", "h")} {
		if err := j.Record("east", []journal.Copy{c}); err == nil {
			t.Errorf("recorded %+v", c)
		}
	}
	if err := j.Owe("east", journal.Owed{Namespace: "team"}); err == nil {
		t.Error("recorded an owed removal of no Propagation")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if rec := open(t, dir).Recovered(); rec != nil {
		t.Errorf("the journal was spoiled: %v", rec.Err)
	}
}

func TestOwedRemovalsKeepWhenTheyWereDecided(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	j, err := journal.Open(t.TempDir(), journal.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h"), copyOf("api", "b", "h")}); err != nil {
		t.Fatal(err)
	}
	if err := j.Owe("east", journal.Owed{Namespace: "team", Propagation: "web", Kinds: []schema.GroupVersionKind{configMaps}, Reason: "the member is Unhealthy"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	secrets := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	if err := j.Owe("east", journal.Owed{Namespace: "team", Propagation: "web", Kinds: []schema.GroupVersionKind{secrets}, Reason: "later"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Owe("east", journal.Owed{Namespace: "team", Propagation: "old", Reason: "the member is Disconnected"}); err != nil {
		t.Fatal(err)
	}
	owed, err := j.Owed("east")
	if err != nil {
		t.Fatal(err)
	}
	if len(owed) != 2 || owed[0].Propagation != "web" || owed[1].Propagation != "old" {
		t.Fatalf("owed = %+v, want web then old, oldest first", owed)
	}
	if web := owed[0]; web.Reason != "the member is Unhealthy" || !web.Decided.Equal(now.Add(-time.Hour)) || !slices.Equal(web.Kinds, []schema.GroupVersionKind{configMaps, secrets}) {
		t.Errorf("web's owed removal = %+v, want the first reason and time, and both kinds", web)
	}

	if err := j.Record("east", []journal.Copy{copyOf("web", "c", "h")}); err != nil {
		t.Fatal(err)
	}
	if err := j.Settle("east", "team", "web", []journal.Object{copyOf("web", "c", "").Object}); err != nil {
		t.Fatal(err)
	}
	owed, _ = j.Owed("east")
	copies, _ := j.Copies("east")
	if len(owed) != 1 || owed[0].Propagation != "old" {
		t.Errorf("after settling web, owed = %+v, want only old", owed)
	}
	if got := names(copies); !slices.Equal(got, []string{"api/b@h", "web/c@h"}) {
		t.Errorf("after settling web keeping c, copies = %v, want api's and web's c", got)
	}

	if err := j.ForgetMember("east"); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, j); st.Members != 0 || st.Copies != 0 || st.Owed != 0 {
		t.Errorf("after the member left: %+v, want nothing", st)
	}
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	j := open(t, t.TempDir())
	const writers, each = 32, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := j.Record(fmt.Sprintf("m%d", w%4), []journal.Copy{copyOf("web", fmt.Sprintf("w%d-%d", w, i), "h")}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := stats(t, j)
	if st.Copies != writers*each {
		t.Errorf("%d copies recorded, want %d", st.Copies, writers*each)
	}
	if st.Commits*4 > writers*each {
		t.Errorf("%d commits for %d records from %d writers: they did not share transactions", st.Commits, writers*each, writers)
	}
	t.Logf("%d records, %d commits", writers*each, st.Commits)
}

func TestSecondProcessGetsAClearError(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	start := time.Now()
	_, err := journal.Open(dir, journal.Options{LockTimeout: 300 * time.Millisecond})
	if !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("opening a held journal: %v, want ErrLocked", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("opening a held journal took %s", took)
	}
	t.Log(err)
}

func TestUnusableFilesAreMovedAside(t *testing.T) {
	for name, spoil := range map[string]func(t *testing.T, path string){
		"truncated": func(t *testing.T, path string) {
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		},
		"random bytes": func(t *testing.T, path string) {
			b := make([]byte, 64<<10)
			r := rand.NewChaCha8([32]byte{1})
			_, _ = r.Read(b)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"a page overwritten": func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			page := make([]byte, os.Getpagesize())
			for i := range page {
				page[i] = 0xA5
			}
			if _, err := f.WriteAt(page, int64(3*os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		},
		"the freelist overwritten": func(t *testing.T, path string) {
			// bbolt panics on it as it opens the file.
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			const freelistPage = 0x10
			size, overwritten := os.Getpagesize(), 0
			for at := 2 * size; at+size <= len(b); at += size {
				if binary.LittleEndian.Uint16(b[at+8:]) == freelistPage {
					for i := range size {
						b[at+i] = 0xA5
					}
					overwritten++
				}
			}
			if overwritten == 0 {
				t.Fatal("the file has no freelist page")
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"another version": func(t *testing.T, path string) {
			update(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte("0")) })
		},
		"another layout": func(t *testing.T, path string) {
			update(t, path, func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("works")); return err })
		},
		"a value where a member belongs": func(t *testing.T, path string) {
			update(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("copies")).Put([]byte("west"), []byte("x")) })
		},
		"an entry that does not decode": func(t *testing.T, path string) {
			update(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("copies")).Bucket([]byte("east")).Put([]byte("team/web//v1/ConfigMap/a"), []byte("{"))
			})
		},
		"not bbolt at all": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("journal"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j := open(t, dir)
			if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h"), copyOf("web", "b", "h")}); err != nil {
				t.Fatal(err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			spoil(t, filepath.Join(dir, journal.FileName))

			j = open(t, dir)
			rec := j.Recovered()
			if rec == nil || rec.MovedTo == "" {
				t.Fatalf("a spoiled journal was used: recovery %+v", rec)
			}
			t.Log(rec.Err)
			if _, err := os.Stat(rec.MovedTo); err != nil {
				t.Errorf("the spoiled journal was not kept aside: %v", err)
			}
			if st := stats(t, j); st.Copies != 0 {
				t.Errorf("the new journal holds %d copies", st.Copies)
			}
			if err := j.Record("east", []journal.Copy{copyOf("web", "a", "h")}); err != nil {
				t.Errorf("the new journal takes no writes: %v", err)
			}
		})
	}
}

// update spoils a closed journal with fn.
func update(t *testing.T, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestOnlyTheNewestSpoiledFilesAreKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, journal.FileName)
	for range 5 {
		if err := os.WriteFile(path, []byte("spoiled"), 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := journal.Open(dir, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
	aside, _ := filepath.Glob(path + ".broken-*")
	if len(aside) != 3 {
		t.Errorf("%d spoiled files kept, want 3: %v", len(aside), aside)
	}
}

func TestAJournalWellPastItsLiveSizeIsCompacted(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	for m := range 20 {
		var copies []journal.Copy
		for i := range 500 {
			copies = append(copies, copyOf("web", fmt.Sprintf("object-%d", i), "0123456789abcdef0123456789abcdef"))
		}
		if err := j.Record(fmt.Sprintf("member-%d", m), copies); err != nil {
			t.Fatal(err)
		}
	}
	before := stats(t, j)
	for m := 1; m < 20; m++ {
		if err := j.ForgetMember(fmt.Sprintf("member-%d", m)); err != nil {
			t.Fatal(err)
		}
	}
	compacted, err := j.Compact()
	if err != nil {
		t.Fatal(err)
	}
	after := stats(t, j)
	t.Logf("10,000 copies: %d bytes; 500 left: %d bytes live, file %d bytes after compacting", before.FileBytes, after.LiveBytes, after.FileBytes)
	if !compacted || after.FileBytes*4 > before.FileBytes {
		t.Errorf("compacted=%v: the file went from %d to %d bytes with a twentieth of its entries left", compacted, before.FileBytes, after.FileBytes)
	}
	if copies, _ := j.Copies("member-0"); len(copies) != 500 {
		t.Errorf("member-0 has %d copies after compacting, want 500", len(copies))
	}
	if err := j.Record("member-1", []journal.Copy{copyOf("web", "a", "h")}); err != nil {
		t.Errorf("the compacted journal takes no writes: %v", err)
	}
	if again, _ := j.Compact(); again {
		t.Error("a compacted journal was compacted again")
	}
}

// TestAJournalThatIsADirectoryIsAnError: what is wrong with the directory,
// not with a journal's content, is an error of Open and moves nothing.
func TestAJournalThatIsADirectoryIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, journal.FileName), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := journal.Open(dir, journal.Options{})
	if err == nil {
		t.Fatal("opened a journal that is a directory")
	}
	t.Log(err)
	if aside, _ := filepath.Glob(filepath.Join(dir, journal.FileName+".broken-*")); len(aside) > 0 {
		t.Errorf("the directory was moved aside: %v", aside)
	}
	// The failed Open let the directory's lock go.
	if err := os.Remove(filepath.Join(dir, journal.FileName)); err != nil {
		t.Fatal(err)
	}
	open(t, dir)
}

// TestDepartureIsKeptUntilTheMemberReturnsOrIsForgotten: when a member
// left the fleet survives a reopen, keeps the earlier time, and goes when
// the member returns or is forgotten; an owed removal keeps the time it
// was decided when it is given one.
func TestDepartureIsKeptUntilTheMemberReturnsOrIsForgotten(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	left := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	if err := errors.Join(
		j.Owe("east", journal.Owed{Namespace: "team", Propagation: "web", Decided: left.Add(-time.Hour)}),
		j.Depart("east", left),
		j.Depart("east", left.Add(time.Hour)),
		j.Depart("west", left),
		j.Return("west"),
	); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = open(t, dir)
	if rec := j.Recovered(); rec != nil {
		t.Fatalf("the journal was not kept: %v", rec.Err)
	}
	departed, err := j.Departed()
	if err != nil || len(departed) != 1 || !departed["east"].Equal(left) {
		t.Errorf("departed = %v, %v; want east since %s", departed, err, left)
	}
	if owed, _ := j.Owed("east"); len(owed) != 1 || !owed[0].Decided.Equal(left.Add(-time.Hour)) {
		t.Errorf("owed = %+v, want web's, decided an hour before east left", owed)
	}
	if err := j.Return("east"); err != nil {
		t.Fatal(err)
	}
	if departed, _ := j.Departed(); len(departed) != 0 {
		t.Errorf("after east returned, departed = %v", departed)
	}
	if owed, _ := j.Owed("east"); len(owed) != 1 {
		t.Errorf("after east returned, owed = %+v, want web's kept", owed)
	}
	if err := errors.Join(j.Depart("east", left), j.ForgetMember("east")); err != nil {
		t.Fatal(err)
	}
	if departed, _ := j.Departed(); len(departed) != 0 {
		t.Errorf("after east was forgotten, departed = %v", departed)
	}
}
