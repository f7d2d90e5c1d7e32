package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// liveHeapMetric is the heap the last collection found live.
const liveHeapMetric = "/gc/heap/live:bytes"

// peakHeap follows a child's live heap, as each collection finds it, and
// keeps its highest value; with $BENCH_PROFILES set, it keeps a heap
// profile taken as that peak was reached, which writeProfile writes once
// the child settled. A heap profile's in-use figures are those of a
// collection or two before, so the profile shows what was live together
// while the members engaged only roughly; the peak itself is exact.
type peakHeap struct {
	mu      sync.Mutex
	bytes   uint64
	profile bytes.Buffer
}

// followPeakHeap starts following the live heap until ctx ends.
func followPeakHeap(ctx context.Context) *peakHeap {
	p := &peakHeap{}
	profiles := os.Getenv("BENCH_PROFILES") != ""
	go func() {
		sample := []metrics.Sample{{Name: liveHeapMetric}}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			metrics.Read(sample)
			live := sample[0].Value.Uint64()
			p.mu.Lock()
			// A profile is taken again only once the peak grew by a
			// tenth: each takes a moment of its own.
			if live > p.bytes {
				if profiles && live > p.bytes+p.bytes/10 {
					p.profile.Reset()
					_ = pprof.Lookup("heap").WriteTo(&p.profile, 0)
				}
				p.bytes = live
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// peak returns the highest live heap seen so far (0 if p is nil).
func (p *peakHeap) peak() uint64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// writeProfile writes the profile taken at the peak to $BENCH_PROFILES, if
// set, named as writeProfile names the others.
func (p *peakHeap) writeProfile() error {
	dir := os.Getenv("BENCH_PROFILES")
	if dir == "" || p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("heap-peak-%s-%d.pprof", strings.Join(os.Args[2:3], ""), os.Getpid())), p.profile.Bytes(), 0o644)
}
