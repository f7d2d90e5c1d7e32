package engage

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// Options configure an Engager.
type Options struct {
	// Logger logs failed engagements with the key "cluster". Defaults to a
	// logger that discards.
	Logger logr.Logger

	// RetryBackoff is the delay before a failed engagement is tried again.
	// Defaults to 1s doubling to 2m, with 10% jitter.
	RetryBackoff *wait.Backoff

	// Clock times the retries. Defaults to the real clock.
	Clock clock.WithTicker

	// Observe, if set, is told the outcome of every call to Engage: the
	// cluster, the aware (named by its String method), how long the call
	// took, and its error. It must not block.
	Observe func(clusterName, aware string, took time.Duration, err error)
}

// Engagement is where one aware stands with one cluster.
type Engagement struct {
	// Aware names the aware, by its String method.
	Aware string
	// Engaged is true once Engage succeeded.
	Engaged bool
	// Err is the error of the last failed attempt, while not engaged.
	Err error
}

// Selector is an Aware that engages only some clusters. The engager asks
// Accepts when a cluster arrives and at every Recheck of it: an aware that
// starts accepting a cluster is engaged with it, one that stops is
// disengaged from it.
type Selector interface {
	Aware
	// Accepts reports whether the aware works on cluster clusterName. It
	// must be quick and must not call the engager.
	Accepts(clusterName string) bool
}

// Engager hands every cluster to every aware that accepts it. Awares added
// late are handed the clusters already engaged. Each (cluster, aware) pair
// is engaged in its own goroutine and retried with backoff until it
// succeeds or ends, so a slow or failing aware delays only itself.
type Engager struct {
	log     logr.Logger
	backoff wait.Backoff
	clock   clock.WithTicker
	observe func(clusterName, aware string, took time.Duration, err error)

	// mu guards awares and clusters, and each engagement's pairs and
	// outcomes. Goroutines are added to an engagement's WaitGroup only
	// while it is in clusters, under mu. Awares' Accepts is called under
	// mu, so it must not call the engager.
	mu       sync.Mutex
	awares   []Aware
	clusters map[string]*engagement
	// ending holds the engagements whose context ended and that are not
	// disengaged yet.
	ending map[*engagement]struct{}
}

type engagement struct {
	ctx  context.Context
	name string
	cl   cluster.Cluster
	wg   sync.WaitGroup
	// pairs holds each aware's latest engagement with the cluster, ended
	// or not; outcomes where each engagement that is not ended stands.
	pairs    map[Aware]*pair
	outcomes map[Aware]Engagement
	// disengaged closes once the context has ended, every engagement
	// goroutine returned and every Disengager been told.
	disengaged chan struct{}
}

// pair is one aware's engagement with one cluster.
type pair struct {
	ctx    context.Context
	cancel context.CancelFunc
	// engaged closes when the engage goroutine has returned; stopped
	// once the pair has been disengaged after a Recheck ended it.
	engaged, stopped chan struct{}
	// ended is set, under the engager's mu, when a Recheck ends the pair.
	ended bool
}

// NewEngager returns an engager with no awares and no clusters.
func NewEngager(opts Options) *Engager {
	e := &Engager{
		log:      opts.Logger,
		backoff:  wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Minute},
		clock:    opts.Clock,
		observe:  opts.Observe,
		clusters: map[string]*engagement{},
		ending:   map[*engagement]struct{}{},
	}
	if e.log.GetSink() == nil {
		e.log = logr.Discard()
	}
	if opts.RetryBackoff != nil {
		e.backoff = *opts.RetryBackoff
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	return e
}

// Add registers an aware and engages it with every cluster already engaged
// that it accepts.
func (e *Engager) Add(a Aware) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.awares = append(e.awares, a)
	for _, eng := range e.clusters {
		e.lockedSettle(eng, a)
	}
}

// Engage engages cl with every aware that accepts it, now and as awares
// are added, until ctx ends. It returns at once; disengaged closes once ctx
// has ended, every engagement goroutine has returned and every Disengager
// has been told. Its signature matches cluster.EngageFunc.
func (e *Engager) Engage(ctx context.Context, clusterName string, cl cluster.Cluster) (disengaged <-chan struct{}) {
	eng := &engagement{ctx: ctx, name: clusterName, cl: cl, pairs: map[Aware]*pair{}, outcomes: map[Aware]Engagement{}, disengaged: make(chan struct{})}
	e.mu.Lock()
	e.clusters[clusterName] = eng
	for _, a := range e.awares {
		e.lockedSettle(eng, a)
	}
	e.mu.Unlock()
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		if e.clusters[clusterName] == eng {
			delete(e.clusters, clusterName)
		}
		e.ending[eng] = struct{}{}
		awares := slices.Clone(e.awares)
		e.mu.Unlock()
		eng.wg.Wait()
		for _, a := range awares {
			if d, ok := a.(Disengager); ok {
				d.Disengage(clusterName)
			}
		}
		e.mu.Lock()
		delete(e.ending, eng)
		e.mu.Unlock()
		close(eng.disengaged)
	})
	return eng.disengaged
}

// Serve is Engage that blocks until the cluster is disengaged.
func (e *Engager) Serve(ctx context.Context, clusterName string, cl cluster.Cluster) {
	<-e.Engage(ctx, clusterName, cl)
}

// Recheck asks every Selector again whether it accepts cluster
// clusterName: those that now accept it are engaged, those that no longer
// do are disengaged. Call it whenever what Accepts reads has changed, such
// as the cluster's labels; calling it when nothing changed does nothing.
func (e *Engager) Recheck(clusterName string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	eng, ok := e.clusters[clusterName]
	if !ok {
		return
	}
	for _, a := range e.awares {
		e.lockedSettle(eng, a)
	}
}

// lockedSettle starts or ends a's engagement with eng's cluster as a
// accepts it or not. A new engagement of a pair waits until the previous
// one has been disengaged.
func (e *Engager) lockedSettle(eng *engagement, a Aware) {
	if eng.ctx.Err() != nil {
		return
	}
	want := true
	if s, ok := a.(Selector); ok {
		want = s.Accepts(eng.name)
	}
	prev := eng.pairs[a]
	have := prev != nil && !prev.ended
	switch {
	case want && !have:
		ctx, cancel := context.WithCancel(eng.ctx)
		p := &pair{ctx: ctx, cancel: cancel, engaged: make(chan struct{}), stopped: make(chan struct{})}
		eng.pairs[a] = p
		eng.outcomes[a] = Engagement{Aware: describe(a)}
		eng.wg.Go(func() {
			defer close(p.engaged)
			if prev != nil {
				<-prev.stopped
			}
			e.engage(eng, a, p.ctx)
		})
	case !want && have:
		e.lockedEnd(eng, a, prev)
	}
}

// lockedEnd ends a's engagement p with eng's cluster: its context is
// cancelled and, once its engage goroutine has returned, a is told if it
// is a Disengager; then p.stopped closes.
func (e *Engager) lockedEnd(eng *engagement, a Aware, p *pair) {
	p.ended = true
	delete(eng.outcomes, a)
	p.cancel()
	eng.wg.Go(func() {
		defer close(p.stopped)
		<-p.engaged
		if d, ok := a.(Disengager); ok {
			d.Disengage(eng.name)
		}
	})
}

// Remove unregisters aware a, which Add registered: every engagement of
// a ends as one a Recheck ends. It returns once every goroutine that
// engaged a has returned and a, if it is a Disengager, has been told of
// every cluster it was engaged with; a is not called again.
func (e *Engager) Remove(a Aware) {
	e.mu.Lock()
	e.awares = slices.DeleteFunc(e.awares, func(x Aware) bool { return x == a })
	var waits []<-chan struct{}
	var live []*engagement
	for _, eng := range e.clusters {
		p := eng.pairs[a]
		if p == nil {
			continue
		}
		if !p.ended {
			e.lockedEnd(eng, a, p)
		}
		waits = append(waits, p.stopped)
		live = append(live, eng)
	}
	for eng := range e.ending {
		if eng.pairs[a] != nil {
			waits = append(waits, eng.disengaged)
		}
	}
	e.mu.Unlock()
	for _, w := range waits {
		<-w
	}
	e.mu.Lock()
	for _, eng := range live {
		delete(eng.pairs, a)
	}
	e.mu.Unlock()
}

// Clusters returns the names of the clusters being served, sorted.
func (e *Engager) Clusters() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.clusters))
}

// Engagements returns where each aware stands with cluster clusterName,
// sorted by aware; nil if the cluster is not being served.
func (e *Engager) Engagements(clusterName string) []Engagement {
	e.mu.Lock()
	defer e.mu.Unlock()
	eng, ok := e.clusters[clusterName]
	if !ok {
		return nil
	}
	out := make([]Engagement, 0, len(eng.outcomes))
	for _, o := range eng.outcomes {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Engagement) int { return strings.Compare(a.Aware, b.Aware) })
	return out
}

// engage engages a with eng's cluster under ctx, retrying with backoff
// until it succeeds or ctx ends.
func (e *Engager) engage(eng *engagement, a Aware, ctx context.Context) {
	backoff := e.backoff
	name := describe(a)
	for {
		start := e.clock.Now()
		err := a.Engage(ctx, eng.name, eng.cl)
		if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		if p := eng.pairs[a]; p != nil && p.ctx == ctx {
			eng.outcomes[a] = Engagement{Aware: name, Engaged: err == nil, Err: err}
		}
		e.mu.Unlock()
		if e.observe != nil {
			e.observe(eng.name, name, e.clock.Since(start), err)
		}
		if err == nil {
			return
		}
		delay := backoff.Step()
		e.log.Error(err, "Engaging cluster failed, will retry", "cluster", eng.name, "aware", name, "retryAfter", delay)
		t := e.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// describe names an aware in logs: its String method if it has one.
func describe(a Aware) string {
	if s, ok := a.(interface{ String() string }); ok {
		return s.String()
	}
	return "aware"
}
