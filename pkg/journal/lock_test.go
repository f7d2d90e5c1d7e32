package journal_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// TestNoSecondOpenerWhileCompacting: a second opener tries without pause
// while the journal compacts again and again; it never gets in, and the
// journal takes writes throughout.
func TestNoSecondOpenerWhileCompacting(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	var (
		stop    atomic.Bool
		entered atomic.Int32
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			second, err := journal.Open(dir, journal.Options{LockTimeout: time.Nanosecond})
			if err == nil {
				entered.Add(1)
				_ = second.Close()
				continue
			}
			if !errors.Is(err, journal.ErrLocked) {
				t.Errorf("a second opener: %v, want ErrLocked", err)
				return
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()

	copies := make([]journal.Copy, 5000)
	for i := range copies {
		copies[i] = copyOf("web", fmt.Sprintf("object-%d", i), "0123456789abcdef0123456789abcdef")
	}
	for round := range 8 {
		if err := j.Record("east", copies); err != nil {
			t.Fatalf("round %d: recording: %v", round, err)
		}
		if err := j.ForgetMember("east"); err != nil {
			t.Fatalf("round %d: forgetting: %v", round, err)
		}
		if compacted, err := j.Compact(); err != nil || !compacted {
			t.Fatalf("round %d: compacted=%v, %v", round, compacted, err)
		}
		if n := entered.Load(); n > 0 {
			t.Fatalf("round %d: a second opener got the journal %d times while it compacted", round, n)
		}
	}
}
