package fleettest

import (
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Logs collects the lines a logger wrote, at verbosity 4. The lines of a
// Sub are also collected in its parent.
type Logs struct {
	parent *Logs

	mu    sync.Mutex
	lines []string
}

// Sub returns empty Logs whose lines are also added to l.
func (l *Logs) Sub() *Logs { return &Logs{parent: l} }

// Add adds line.
func (l *Logs) Add(line string) {
	for ; l != nil; l = l.parent {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
}

// Logger returns a logger that writes to l.
func (l *Logs) Logger() logr.Logger {
	return funcr.New(func(prefix, args string) { l.Add(prefix + " " + args) }, funcr.Options{Verbosity: 4})
}

// Lines returns the lines collected so far.
func (l *Logs) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// Find reports whether a line holds every one of parts.
func (l *Logs) Find(parts ...string) bool { return l.First(parts...) != "" }

// First returns the first line that holds every one of parts, or "".
func (l *Logs) First(parts ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.IndexFunc(l.lines, holdsAll(parts)); i >= 0 {
		return l.lines[i]
	}
	return ""
}

// Count returns how many lines hold every one of parts.
func (l *Logs) Count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if holdsAll(parts)(line) {
			n++
		}
	}
	return n
}

// Holding returns the first line that holds any of secrets, or "".
func (l *Logs) Holding(secrets []string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if slices.ContainsFunc(secrets, func(s string) bool { return strings.Contains(line, s) }) {
			return line
		}
	}
	return ""
}

func holdsAll(parts []string) func(string) bool {
	return func(line string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) })
	}
}
