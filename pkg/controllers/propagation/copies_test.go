package propagation

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestIdleCopyCacheIsDroppedUnlessReadSince drops a member's copy cache
// that no request read since the sweep began, and keeps one a request
// read meanwhile, though both were idle when the sweep listed them.
func TestIdleCopyCacheIsDroppedUnlessReadSince(t *testing.T) {
	mc := &memberCopies{name: "east", ctx: t.Context(), namespaces: map[string]*namespaceCopies{}}
	sweep := time.Now()
	add := func(namespace string) *namespaceCopies {
		ctx, stop := context.WithCancel(mc.ctx)
		nc := &namespaceCopies{ctx: ctx, stop: stop, used: sweep.Add(-time.Minute)}
		mc.namespaces[namespace] = nc
		return nc
	}
	idle, read := add("idle"), add("read")
	if got := mc.idle(sweep); !slices.Contains(got, "idle") || !slices.Contains(got, "read") {
		t.Fatalf("idle = %v, want both namespaces", got)
	}
	if nc, err := mc.inNamespace("read"); err != nil || nc != read {
		t.Fatalf("inNamespace = %v, %v, want the namespace's cache", nc, err)
	}
	mc.drop("idle", sweep)
	mc.drop("read", sweep)
	if idle.ctx.Err() == nil || mc.caches()["idle"] != nil {
		t.Error("the idle cache was kept")
	}
	if read.ctx.Err() != nil || mc.caches()["read"] != read {
		t.Error("the cache a request read during the sweep was dropped")
	}
}
