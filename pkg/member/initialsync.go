package member

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// initialSyncs bounds how many of a pool's informers fill their caches at
// once: when every member lists together, as the manager starts, each
// list's objects, their events and first reconciles all come at once,
// after the last collection, and the heap peaks far above what the
// members keep. A slot is held from an informer's first list or watch
// until it has synced, its request failed, it stopped, or slotHold
// passed, so a frozen or slow member holds one for slotHold at most.
type initialSyncs struct {
	slots    chan struct{}
	slotHold time.Duration
}

// initialSyncSlots is how many informers fill at once; initialSyncHold
// is the longest one holds its slot.
const (
	initialSyncSlots = 4
	initialSyncHold  = time.Second
)

func newInitialSyncs(slots int, hold time.Duration) *initialSyncs {
	return &initialSyncs{slots: make(chan struct{}, slots), slotHold: hold}
}

// forMember returns the share of s of a member's connection; the
// member's informers call awaitDial before they wait for a turn, and
// away is the member's (see memberSyncs).
func (s *initialSyncs) forMember(awaitDial func(context.Context) error, away func() <-chan struct{}) *memberSyncs {
	return &memberSyncs{initialSyncs: s, awaitDial: awaitDial, slow: make(chan struct{}), away: away}
}

// memberSyncs is one member's share of the initialSyncs: once one of its
// informers held a slot for the whole bound without syncing, the member
// is slow or frozen, and its informers no longer wait for slots nor take
// them. So a member holds the others up by one bound at most, however
// many kinds it watches.
//
// It also holds the informers' lists and watches while the member is
// away (Unhealthy): a call made then waits, sending nothing, until the
// member is back or the call's context ends. So a reflector whose watch
// broke while the member was away does not fail again and again, backing
// off for up to 30 s, but waits in its call, and at the member's return
// resumes its watch at the resourceVersion it had, which the API server
// serves from its watch cache.
type memberSyncs struct {
	*initialSyncs
	// awaitDial returns once the member's first connection is no longer
	// being dialled, so that no turn is held during a TLS handshake.
	awaitDial func(context.Context) error
	slow      chan struct{}
	slowOnce  sync.Once
	// away returns a channel closed once the member is back, or nil while
	// it is not away.
	away func() <-chan struct{}
	// held counts the calls waiting for the member's return.
	held atomic.Int32

	mu        sync.Mutex
	informers []*gatedListerWatcher
}

// waitBack waits until the member is not away, or ctx ended.
func (m *memberSyncs) waitBack(ctx context.Context) error {
	back := m.away()
	if back == nil {
		return nil
	}
	m.held.Add(1)
	defer m.held.Add(-1)
	select {
	case <-back:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idle reports whether one of the informers is neither in a list or watch
// call (held ones included) nor watching: it is then sleeping in its
// reflector's backoff, for up to 30 s.
func (m *memberSyncs) idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.informers {
		if g.busy.Load() == 0 {
			return true
		}
	}
	return false
}

func (m *memberSyncs) markSlow() { m.slowOnce.Do(func() { close(m.slow) }) }

// newInformer is a cache.Options.NewInformer: client-go's informer, whose
// list and watch wait for a slot until it has synced, unless the member
// is slow.
func (m *memberSyncs) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	g := &gatedListerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), inner: lw, syncs: m}
	informer := toolscache.NewSharedIndexInformer(g, obj, resync, indexers)
	g.synced = informer.HasSyncedChecker().Done()
	m.mu.Lock()
	m.informers = append(m.informers, g)
	m.mu.Unlock()
	return informer
}

// gatedListerWatcher is an informer's ListerWatcher that takes a slot of
// syncs for its initial list or watch.
type gatedListerWatcher struct {
	lw     toolscache.ListerWatcherWithContext
	inner  toolscache.ListerWatcher
	syncs  *memberSyncs
	synced <-chan struct{}

	// busy counts the calls under way and the watches not stopped yet.
	busy atomic.Int32

	mu      sync.Mutex
	holding bool
}

var _ toolscache.ListerWatcherWithContext = (*gatedListerWatcher)(nil)

// acquire waits for a slot, unless the informer has synced or already
// holds one, or its member is slow; release gives it back (it does
// nothing if none was taken).
func (g *gatedListerWatcher) acquire(ctx context.Context) (release func(), err error) {
	noop := func() {}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding {
		return noop, nil
	}
	select {
	case <-g.synced:
		return noop, nil
	case <-g.syncs.slow:
		return noop, nil
	default:
	}
	select {
	case g.syncs.slots <- struct{}{}:
	case <-g.synced:
		return noop, nil
	case <-g.syncs.slow:
		return noop, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.holding = true
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.holding = false
			g.mu.Unlock()
			<-g.syncs.slots
		})
	}, nil
}

// ListWithContext lists once the member is not away, in turn.
func (g *gatedListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	g.busy.Add(1)
	defer g.busy.Add(-1)
	if err := g.syncs.waitBack(ctx); err != nil {
		return nil, err
	}
	return inTurn(ctx, g, func() (runtime.Object, error) { return g.lw.ListWithContext(ctx, opts) })
}

// WatchWithContext watches once the member is not away, in turn; the
// informer is busy until the watch is stopped.
func (g *gatedListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	g.busy.Add(1)
	if err := g.syncs.waitBack(ctx); err != nil {
		g.busy.Add(-1)
		return nil, err
	}
	w, err := inTurn(ctx, g, func() (watch.Interface, error) { return g.lw.WatchWithContext(ctx, opts) })
	if err != nil {
		g.busy.Add(-1)
		return nil, err
	}
	return &trackedWatch{Interface: w, stopped: func() { g.busy.Add(-1) }}, nil
}

// trackedWatch tells stopped once, at its first Stop.
type trackedWatch struct {
	watch.Interface
	stopped func()
	once    sync.Once
}

func (w *trackedWatch) Stop() {
	w.Interface.Stop()
	w.once.Do(w.stopped)
}

// inTurn makes request, a list or watch of g's informer, once its
// member's first dial is done (awaitDial) and it holds a turn (see
// acquire), which it gives back once the informer has synced
// (the listed or streamed objects are in its store), the request failed,
// the bound passed or ctx ended. The bound runs from now: a member that
// never answers the request holds the turn no longer than one that
// answers slowly.
func inTurn[T any](ctx context.Context, g *gatedListerWatcher, request func() (T, error)) (T, error) {
	var none T
	if err := g.syncs.awaitDial(ctx); err != nil {
		return none, err
	}
	release, err := g.acquire(ctx)
	if err != nil {
		return none, err
	}
	failed := make(chan struct{})
	go g.holdAtMost(ctx, failed, release)
	got, err := request()
	if err != nil {
		close(failed)
	}
	return got, err
}

// holdAtMost releases a slot once the informer has synced, done closed,
// the bound passed (the member is slow then) or ctx ended.
func (g *gatedListerWatcher) holdAtMost(ctx context.Context, done <-chan struct{}, release func()) {
	defer release()
	t := time.NewTimer(g.syncs.slotHold)
	defer t.Stop()
	select {
	case <-g.synced:
	case <-done:
	case <-t.C:
		g.syncs.markSlow()
	case <-ctx.Done():
	}
}

func (g *gatedListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return g.ListWithContext(context.Background(), opts)
}

func (g *gatedListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return g.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported passes on what the wrapped
// ListerWatcher says of its watch-lists (client-go asks).
func (g *gatedListerWatcher) IsWatchListSemanticsUnSupported() bool {
	u, ok := g.inner.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}
