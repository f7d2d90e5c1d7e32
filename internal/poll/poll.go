// Package poll is the one way tests wait for a condition: they assert
// outcomes, not durations, so a loaded machine only makes them slower.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits: long enough for a loaded 2-core
// machine.
const Timeout = time.Minute

// Until polls cond every few milliseconds until it holds, and fails the
// test, naming what it waited for, if it does not hold within Timeout.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(Timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %s", Timeout, what)
		}
	}
}
