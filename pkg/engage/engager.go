package engage

import (
	"context"
	"slices"
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
}

// Engager hands every cluster to every aware. Awares added late are handed
// the clusters already engaged. Each (cluster, aware) pair is engaged in its
// own goroutine and retried with backoff until it succeeds or the cluster
// leaves, so a slow or failing aware delays only itself.
type Engager struct {
	log     logr.Logger
	backoff wait.Backoff
	clock   clock.WithTicker

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
}

// NewEngager returns an engager with no awares and no clusters.
func NewEngager(opts Options) *Engager {
	e := &Engager{
		log:      opts.Logger,
		backoff:  wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Minute},
		clock:    opts.Clock,
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
// blocks until ctx ends and every engagement goroutine has returned. Its
// signature matches cluster.EngageFunc.
func (e *Engager) Serve(ctx context.Context, clusterName string, cl cluster.Cluster) {
	eng := &engagement{ctx: ctx, name: clusterName, cl: cl}
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
	e.mu.Unlock()
	eng.wg.Wait()
}

// Clusters returns the names of the clusters being served, sorted.
func (e *Engager) Clusters() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.clusters))
	for name := range e.clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (e *Engager) engage(eng *engagement, a Aware) {
	backoff := e.backoff
	for {
		err := a.Engage(eng.ctx, eng.name, eng.cl)
		if err == nil || eng.ctx.Err() != nil {
			return
		}
		delay := backoff.Step()
		e.log.Error(err, "Engaging cluster failed, will retry", "cluster", eng.name, "aware", describe(a), "retryAfter", delay)
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
