package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// member is one running member cluster: its own transport, its
// cluster.Cluster, and the context both live in.
type member struct {
	name        string
	fingerprint [sha256.Size]byte
	cluster     cluster.Cluster
	httpClient  *http.Client
	dialer      *connrotation.Dialer
	log         logr.Logger

	// indexMu guards indexed, the number of the pool's indexes applied to
	// this member's cache.
	indexMu sync.Mutex
	indexed int

	// startOnce makes start idempotent; cancel and done are set by start.
	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

func newMember(name string, kubeconfig []byte, opts *Options) (*member, error) {
	cfg, err := opts.Policy.Parse(kubeconfig)
	if err != nil {
		return nil, err
	}
	m := &member{
		name:        name,
		fingerprint: sha256.Sum256(kubeconfig),
		log:         opts.Logger.WithValues("cluster", name),
		done:        make(chan struct{}),
	}
	// A dialer of its own keeps client-go's TLS cache from sharing one
	// transport between members, lets stop close every connection, and
	// checks each resolved address against the policy.
	m.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: opts.Policy.dialControl}).DialContext)
	cfg.Dial = m.dialer.DialContext
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	m.httpClient, err = rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, refuse("KubeconfigInvalid", "cannot build a transport: %s", scrub(err))
	}
	m.cluster, err = cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = opts.Scheme
		o.Logger = m.log
		o.HTTPClient = m.httpClient
		o.Cache.DefaultTransform = cache.TransformStripManagedFields()
		o.Cache.ReaderFailOnMissingInformer = true
		if opts.Configure != nil {
			opts.Configure(name, o)
		}
	})
	if err != nil {
		m.closeConnections()
		return nil, fmt.Errorf("creating cluster %q: %w", name, err)
	}
	return m, nil
}

// start runs the member's cluster and engagement under a context derived
// from ctx, applying the pool's indexes first so that no aware ever sees a
// cache without them.
func (m *member) start(ctx context.Context, p *Pool) {
	m.startOnce.Do(func() {
		ctx, m.cancel = context.WithCancel(ctx)
		go m.run(ctx, p)
	})
}

func (m *member) run(ctx context.Context, p *Pool) {
	defer close(m.done)
	defer m.cancel()

	if err := m.applyIndexes(ctx, p.indexesSnapshot()); err != nil {
		m.log.Error(err, "Applying field indexes")
	}
	clusterDone := make(chan struct{})
	go func() {
		defer close(clusterDone)
		if err := m.cluster.Start(ctx); err != nil {
			m.log.Error(err, "Member cluster stopped with an error")
			m.cancel()
		}
	}()
	m.log.Info("Engaging member")
	p.opts.Engage(ctx, m.name, m.cluster)
	<-clusterDone
	m.log.Info("Disengaged member")
}

// applyIndexes applies the indexes this member has not seen yet. The pool's
// list only grows, so a count is enough to know which those are.
func (m *member) applyIndexes(ctx context.Context, all []index) error {
	m.indexMu.Lock()
	defer m.indexMu.Unlock()
	var errs []error
	for ; m.indexed < len(all); m.indexed++ {
		ix := all[m.indexed]
		if err := m.cluster.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			errs = append(errs, fmt.Errorf("index %s on %T: %w", ix.field, ix.obj, err))
		}
	}
	return errors.Join(errs...)
}

// stop cancels the member and waits until everything it started has
// ended, then closes its connections.
func (m *member) stop() {
	m.startOnce.Do(func() { close(m.done) }) // never started: nothing to wait for
	if m.cancel != nil {
		m.cancel()
	}
	<-m.done
	m.closeConnections()
}

func (m *member) closeConnections() {
	m.dialer.CloseAll()
	if m.httpClient != nil {
		m.httpClient.CloseIdleConnections()
	}
}
