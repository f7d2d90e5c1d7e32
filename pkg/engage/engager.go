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

// Engager hands every cluster to every aware. Awares added late are handed
// the clusters already engaged. Each (cluster, aware) pair is engaged in its
// own goroutine and retried with backoff until it succeeds or the cluster
// leaves, so a slow or failing aware delays only itself.
type Engager struct {
	log     logr.Logger
	backoff wait.Backoff
	clock   clock.WithTicker
	observe func(clusterName, aware string, took time.Duration, err error)

	// mu guards awares and clusters. Goroutines are added to an
	// engagement's WaitGroup only while it is in clusters, under mu.
	mu       sync.Mutex
	awares   []Aware
	clusters map[string]*engagement
}

type engagement struct {
	ctx  context.Context
	name string
	cl   cluster.Cluster
	wg   sync.WaitGroup

	// outcomes is guarded by the engager's mu.
	outcomes map[Aware]Engagement
}

// NewEngager returns an engager with no awares and no clusters.
func NewEngager(opts Options) *Engager {
	e := &Engager{
		log:      opts.Logger,
		backoff:  wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Minute},
		clock:    opts.Clock,
		observe:  opts.Observe,
		clusters: map[string]*engagement{},
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

// Add registers an aware and engages it with every cluster already engaged.
func (e *Engager) Add(a Aware) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.awares = append(e.awares, a)
	for _, eng := range e.clusters {
		eng.wg.Go(func() { e.engage(eng, a) })
	}
}

// Serve engages cl with every aware, now and as awares are added, and
// blocks until ctx ends, every engagement goroutine has returned and every
// Disengager has been told. Its
// signature matches cluster.EngageFunc.
func (e *Engager) Serve(ctx context.Context, clusterName string, cl cluster.Cluster) {
	eng := &engagement{ctx: ctx, name: clusterName, cl: cl, outcomes: map[Aware]Engagement{}}
	e.mu.Lock()
	e.clusters[clusterName] = eng
	for _, a := range e.awares {
		eng.wg.Go(func() { e.engage(eng, a) })
	}
	e.mu.Unlock()

	<-ctx.Done()

	e.mu.Lock()
	if e.clusters[clusterName] == eng {
		delete(e.clusters, clusterName)
	}
	awares := slices.Clone(e.awares)
	e.mu.Unlock()
	eng.wg.Wait()
	for _, a := range awares {
		if d, ok := a.(Disengager); ok {
			d.Disengage(clusterName)
		}
	}
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

func (e *Engager) engage(eng *engagement, a Aware) {
	backoff := e.backoff
	name := describe(a)
	for {
		start := e.clock.Now()
		err := a.Engage(eng.ctx, eng.name, eng.cl)
		if eng.ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		eng.outcomes[a] = Engagement{Aware: name, Engaged: err == nil, Err: err}
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
		case <-eng.ctx.Done():
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
