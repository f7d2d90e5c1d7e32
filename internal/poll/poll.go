// Package poll is the one way tests wait for a condition: they assert
// outcomes, not durations, so a loaded machine only makes them slower.
package poll

import (
	"os"
	"strings"
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

// OpenSockets counts this process's open sockets, for tests that wait
// until a removed member's connections are gone. It skips the test where
// /proc cannot be read.
func OpenSockets(tb testing.TB) int {
	tb.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Skipf("cannot count sockets: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
