package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

const journalTable = "Journal"

// journalWorkers are the Propagation controller's default workers, each
// recording one reconcile's copies at a time.
const journalWorkers = 16

// benchJournal measures pkg/journal alone, on this machine's disk: what
// recording copies before their first apply costs at 1,000 applies per
// second, how fast it goes, how long a restart takes to read a 10,000-entry
// journal, and how big the file is.
func (b *bench) benchJournal(ctx context.Context) error {
	t := b.res.table(journalTable, fmt.Sprintf("pkg/journal alone, on TMPDIR's disk. %d writers, as the Propagation controller's workers, each recording one reconcile's copies (one Record call, before the reconcile's first apply) and waiting for it to be on disk; paced at 1,000 objects per second, then unpaced. A commit is two fdatasyncs (the pages, then the meta page).", journalWorkers))
	dir, err := os.MkdirTemp("", "bench-journal-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	duration := 5 * time.Second
	if b.quick {
		duration = 2 * time.Second
	}
	for _, shape := range []struct {
		perReconcile int
		target       bool
		label        string
	}{
		{50, true, "50 objects a reconcile (a Propagation of 50 objects, as the propagation scenario)"},
		{1, false, "1 object a reconcile (the worst case: one-object Propagations)"},
	} {
		for _, paced := range []bool{true, false} {
			run, err := recordCopies(ctx, filepath.Join(dir, fmt.Sprintf("shape-%d-%v", shape.perReconcile, paced)), shape.perReconcile, paced, duration)
			if err != nil {
				return err
			}
			if !paced {
				t.add(shape.label+", unpaced: objects recorded", "objects/s", run.objectsPerSecond(), nil)
				t.add(shape.label+", unpaced: fsyncs per object", "fsyncs", run.fsyncsPerObject(), nil)
				continue
			}
			var perObject, wait *target
			if shape.target {
				perObject, wait = atMost(0.05, ""), atMost(5, "")
			}
			t.add(shape.label+", 1,000 objects/s: fsyncs per object", "fsyncs", run.fsyncsPerObject(), perObject)
			t.add(shape.label+", 1,000 objects/s: commits", "commits/s", float64(run.commits)/run.elapsed.Seconds(), nil)
			t.addDuration(shape.label+", 1,000 objects/s: a reconcile's wait before its first apply, p50", percentile(run.waits, 50), nil)
			t.addDuration(shape.label+", 1,000 objects/s: a reconcile's wait before its first apply, p99", percentile(run.waits, 99), wait)
		}
	}
	return journalRestartAndSize(t, filepath.Join(dir, "restart"))
}

// recordRun is what one recordCopies run measured.
type recordRun struct {
	objects int
	commits uint64
	elapsed time.Duration
	waits   []time.Duration
}

func (r recordRun) objectsPerSecond() float64 { return float64(r.objects) / r.elapsed.Seconds() }

func (r recordRun) fsyncsPerObject() float64 { return 2 * float64(r.commits) / float64(r.objects) }

// recordCopies has journalWorkers writers record reconciles of
// perReconcile new copies for duration, paced to 1,000 objects per second
// in all or as fast as they go, and times each Record call.
func recordCopies(ctx context.Context, dir string, perReconcile int, paced bool, duration time.Duration) (recordRun, error) {
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		return recordRun{}, err
	}
	defer j.Close()
	before, err := j.Stats()
	if err != nil {
		return recordRun{}, err
	}
	// Each writer starts a reconcile every interval: together, 1,000
	// objects per second.
	interval := time.Duration(float64(time.Second) * float64(journalWorkers*perReconcile) / 1000)
	var (
		mu      sync.Mutex
		waits   []time.Duration
		objects int
		errs    []error
		wg      sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for w := range journalWorkers {
		wg.Go(func() {
			next := start.Add(time.Duration(w) * interval / journalWorkers)
			for i := 0; ctx.Err() == nil; i++ {
				if paced {
					time.Sleep(time.Until(next))
					next = next.Add(interval)
				}
				if time.Now().After(deadline) {
					return
				}
				copies := make([]journal.Copy, perReconcile)
				for k := range copies {
					copies[k] = journal.Copy{
						Object:      journal.Object{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "team", Name: fmt.Sprintf("object-%d", k)},
						Propagation: fmt.Sprintf("w%d-r%d", w, i), Hash: "3f2a9c0d5e1b7a4c8d6e0f1a2b3c4d5e",
					}
				}
				called := time.Now()
				err := j.Record(fmt.Sprintf("member-%d", w%4), copies)
				took := time.Since(called)
				mu.Lock()
				waits, objects = append(waits, took), objects+perReconcile
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := j.Stats()
	if err := errors.Join(append(errs, err)...); err != nil {
		return recordRun{}, err
	}
	return recordRun{objects: objects, commits: after.Commits - before.Commits, elapsed: elapsed, waits: waits}, nil
}

// journalRestartAndSize writes a 10,000-copy journal of 10 members with
// owed removals, times a restart's open and reads, and reports the file's
// size per 1,000 copies before and after compaction.
func journalRestartAndSize(t *table, dir string) error {
	const members, perMember = 10, 1000
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		return err
	}
	for m := range members {
		member := fmt.Sprintf("member-%d", m)
		for p := range 20 { // 20 Propagations of 50 objects
			copies := make([]journal.Copy, perMember/20)
			for k := range copies {
				copies[k] = journal.Copy{
					Object:      journal.Object{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: fmt.Sprintf("team-%d", p), Name: fmt.Sprintf("object-%d", k)},
					Propagation: fmt.Sprintf("prop-%d", p), Hash: "3f2a9c0d5e1b7a4c8d6e0f1a2b3c4d5e",
				}
			}
			if err := j.Record(member, copies); err != nil {
				return errors.Join(err, j.Close())
			}
		}
		if err := j.Owe(member, journal.Owed{Namespace: "team-0", Propagation: "gone", Kinds: []schema.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}}, Reason: "the member is Unhealthy"}); err != nil {
			return errors.Join(err, j.Close())
		}
	}
	written, err := j.Stats()
	if err := errors.Join(err, j.Close()); err != nil {
		return err
	}

	start := time.Now()
	j, err = journal.Open(dir, journal.Options{})
	if err != nil {
		return err
	}
	read := 0
	names, err := j.Members()
	for _, member := range names {
		owed, oerr := j.Owed(member)
		copies, cerr := j.Copies(member)
		err = errors.Join(err, oerr, cerr)
		read += len(owed) + len(copies)
	}
	took := time.Since(start)
	if err != nil {
		return errors.Join(err, j.Close())
	}
	if read != members*(perMember+1) {
		return errors.Join(fmt.Errorf("a restart read %d entries, want %d", read, members*(perMember+1)), j.Close())
	}
	t.addDuration("restart with 10,000 copies and 10 owed removals: open and read them all", took, atMost(1000, ""))

	perThousand := func(bytes int64) float64 { return float64(bytes) / 1024 / (members * perMember / 1000) }
	t.add("file size per 1,000 copies, as written (200 commits)", "KiB", perThousand(written.FileBytes), nil)
	t.add("live size per 1,000 copies", "KiB", perThousand(written.LiveBytes), nil)
	return j.Close()
}
