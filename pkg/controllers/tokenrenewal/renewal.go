package tokenrenewal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ControllerName names the controller in --controllers.
const ControllerName = "tokenrenewal"

// DefaultWorkers is how many clusters are evaluated at once.
const DefaultWorkers = 4

// Options configure the token renewal.
type Options struct {
	// Credentials is where each accepted cluster's credential is
	// published. Required.
	Credentials *registry.Facts[registry.Credentials]
	// Disabled turns renewal off. Credentials are still described.
	Disabled bool
	// Workers is how many clusters are evaluated at once. Default:
	// DefaultWorkers.
	Workers int
	// Client writes renewed tokens into registration Secrets. Default:
	// the manager's client.
	Client client.Client
	// RenewAfter is the fraction of a token's lifetime after which it is
	// renewed, jittered by ±RenewalJitter of itself. Default:
	// DefaultRenewAfter.
	RenewAfter float64
	// WarnAfter is the fraction of a credential's lifetime after which,
	// not renewed, it is reported expiring. Default: DefaultWarnAfter.
	WarnAfter float64
	// Clock tells the time. Default: the real clock.
	Clock clock.WithTicker
}

const (
	// DefaultRenewAfter renews a token at 80% of its lifetime.
	DefaultRenewAfter = 0.8
	// DefaultWarnAfter reports a credential expiring when a tenth of its
	// lifetime is left.
	DefaultWarnAfter = 0.9
	// RenewalJitter spreads renewals of tokens issued together: at 80%,
	// over 75–85% of their lifetime.
	RenewalJitter = 1.0 / 16
	// renewalSettle is how long a renewed token may take to come back from
	// the hub Secret, through the registry, before it is renewed again.
	renewalSettle = 30 * time.Second
)

func (o Options) withDefaults(m *fleet.Manager) Options {
	if o.RenewAfter <= 0 || o.RenewAfter >= 1 {
		o.RenewAfter = DefaultRenewAfter
	}
	if o.WarnAfter <= 0 || o.WarnAfter >= 1 {
		o.WarnAfter = DefaultWarnAfter
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Client == nil {
		o.Client = m.GetClient()
	}
	return o
}

// renewalPlan says when a credential is renewed and when it is expiring.
type renewalPlan struct {
	renewAt, warnAt time.Time // zero when never
}

// planRenewal plans for cred: renewable tokens at renewAfter of their
// lifetime, moved by jitter (in [-1, 1]) times RenewalJitter of it, and
// never after warnAfter; every credential with a known lifetime is
// expiring at warnAfter of it.
func planRenewal(cred kubeconfig.Credential, renewable bool, renewAfter, warnAfter, jitter float64) renewalPlan {
	lifetime := cred.Lifetime()
	if lifetime == 0 {
		return renewalPlan{}
	}
	at := func(fraction float64) time.Time {
		return cred.IssuedAt.Add(time.Duration(fraction * float64(lifetime)))
	}
	p := renewalPlan{warnAt: at(warnAfter)}
	if renewable {
		p.renewAt = at(min(renewAfter*(1+jitter*RenewalJitter), warnAfter))
	}
	return p
}

// nextWake returns how long from now until the first of times still to
// come, and false when none is.
func nextWake(now time.Time, times ...time.Time) (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, t := range times {
		if d := t.Sub(now); !t.IsZero() && d > 0 && (!found || d < next) {
			next, found = d, true
		}
	}
	return next, found
}

// credentialRenewal describes every accepted cluster's credential, as
// Options.Credentials, and renews the tokens it can: a service account token with an
// expiry, in a native registration Secret. It asks the member for a new
// token for the same service account, as long-lived as the old one up to
// fleetv1alpha1.MaxTokenLifetime (TokenRequest, through the member's own
// client) at about RenewAfter of its lifetime, and writes it into the Secret with a
// resourceVersion precondition; the new kubeconfig then reaches the member
// like any other rotation. It mints only through a member that runs the
// very kubeconfig it renews: while the pool still runs an earlier one,
// whose server may be another, it waits. Renewals that fail are retried
// with backoff.
type credentialRenewal struct {
	m       *fleet.Manager
	opts    Options
	log     logr.Logger
	metrics *renewalMetrics
	// running returns the member of a cluster while it runs a kubeconfig:
	// the manager's GetRunningCluster.
	running func(clusterName string, kubeconfig []byte) (cluster.Cluster, error)

	// backoff spaces a cluster's failed renewals: 1 s, doubling to 5 min.
	backoff workqueue.TypedRateLimiter[string]

	mu      sync.Mutex
	tracked map[string]*tracked
}

// tracked is what the renewal keeps of one cluster's kubeconfig.
type tracked struct {
	generation  int64
	secret      registry.Source
	credential  kubeconfig.Credential
	renewable   bool
	plan        renewalPlan
	lastRenewal time.Time
	// renewedGeneration is the generation last renewed: its token is
	// not renewed again until renewalSettle passed.
	renewedGeneration int64
	renewalError      string
	// retryAt is when a failed renewal may be tried again.
	retryAt time.Time
}

// NewCredentials returns an empty store of credentials for
// Options.Credentials and their readers.
func NewCredentials() *registry.Facts[registry.Credentials] {
	return registry.NewFacts(func(a, b registry.Credentials) bool { return a == b })
}

// Add adds the token renewal to m, configured by opts.
func Add(m *fleet.Manager, opts Options) error {
	r, err := newCredentialRenewal(m, opts)
	if err != nil {
		return err
	}
	return m.Add(r)
}

func newCredentialRenewal(m *fleet.Manager, opts Options) (*credentialRenewal, error) {
	if opts.Credentials == nil {
		return nil, errors.New("token renewal: Options.Credentials is required")
	}
	metrics, err := newRenewalMetrics(crmetrics.Registry)
	if err != nil {
		return nil, err
	}
	return &credentialRenewal{
		m: m, opts: opts.withDefaults(m), log: m.GetLogger().WithName("credentials"), metrics: metrics,
		running: m.GetRunningCluster, tracked: map[string]*tracked{},
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
	}, nil
}

// NeedLeaderElection is true: only the leader renews and reports. When
// replicas share the fleet, each renews the members it owns.
func (*credentialRenewal) NeedLeaderElection() bool { return true }

func (r *credentialRenewal) Start(ctx context.Context) error {
	queue := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Clock: r.opts.Clock})
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Go(func() {
			for {
				name, shutdown := queue.Get()
				if shutdown {
					return
				}
				r.evaluate(ctx, queue, name)
				queue.Done(name)
			}
		})
	}
	r.m.Registry().Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) { queue.Add(e.Name) })
	queue.ShutDown()
	wg.Wait()
	return nil
}

// evaluate publishes cluster name's credential, renews
// its token when due, and queues name again for its next due time.
func (r *credentialRenewal) evaluate(ctx context.Context, queue workqueue.TypedDelayingInterface[string], name string) {
	c, ok := r.m.Registry().Get(name)
	reg, generation, accepted := registration(c, ok)
	if !accepted {
		r.mu.Lock()
		delete(r.tracked, name)
		r.mu.Unlock()
		r.backoff.Forget(name)
		r.opts.Credentials.Forget(name)
		r.metrics.forget(name)
		return
	}
	t, err := r.track(name, c, reg, generation)
	if err != nil {
		return // the member pool refuses it too, and says why
	}
	now := r.opts.Clock.Now()
	if t.plan.renewAt.IsZero() || now.Before(t.plan.renewAt) || now.Before(t.retryAt) ||
		(t.renewedGeneration == generation && now.Sub(t.lastRenewal) < renewalSettle) {
		r.report(name, t, now)
		r.requeue(queue, name, t, now)
		return
	}
	err = r.renew(ctx, name, t, reg.Kubeconfig)
	if errors.Is(err, fleet.ErrNotOwned) {
		// This replica cannot act on the member now: its owner renews,
		// or this replica once it proves its Lease again.
		r.log.V(1).Info("Renewal waits: this replica does not own the member now", "cluster", name)
		queue.AddAfter(name, time.Second)
		return
	}
	if errors.Is(err, member.ErrOtherKubeconfig) {
		// The pool has yet to run this kubeconfig: not a failure.
		r.log.V(1).Info("Renewal waits for the member to run the kubeconfig it renews", "cluster", name)
		queue.AddAfter(name, time.Second)
		return
	}
	if errors.Is(err, errSecretChanged) || apierrors.IsConflict(err) {
		// Lost to another write of the Secret: a new kubeconfig comes
		// through the registry; anything else, try again.
		queue.AddAfter(name, time.Second)
		return
	}
	if ctx.Err() != nil {
		return
	}
	var retry time.Duration
	if err != nil {
		retry = r.backoff.When(name)
	} else {
		r.backoff.Forget(name)
	}
	r.mu.Lock()
	if err != nil {
		t.renewalError, t.retryAt = err.Error(), now.Add(retry)
	} else {
		t.renewalError, t.retryAt, t.lastRenewal, t.renewedGeneration = "", time.Time{}, now, generation
	}
	r.mu.Unlock()
	r.report(name, t, now)
	if err != nil {
		r.log.Error(err, "Renewing the member's token failed", "cluster", name, "retryIn", retry)
	} else {
		r.log.Info("Renewed the member's token", "cluster", name, "serviceAccount", t.credential.ServiceAccount)
	}
	r.requeue(queue, name, t, now)
}

func registration(c *registry.Cluster, ok bool) (registry.Registration, int64, bool) {
	if !ok || !c.Owned() {
		return registry.Registration{}, 0, false // another replica renews it
	}
	return c.Registration()
}

// track returns what is kept of name's kubeconfig of generation,
// describing it first if it is new.
func (r *credentialRenewal) track(name string, c *registry.Cluster, reg registry.Registration, generation int64) (*tracked, error) {
	r.mu.Lock()
	t := r.tracked[name]
	r.mu.Unlock()
	if t != nil && t.generation == generation {
		return t, nil
	}
	cfg, err := r.m.KubeconfigPolicy().Parse(reg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	next := &tracked{generation: generation, secret: c.Claims[0].Source, credential: kubeconfig.DescribeCredential(cfg)}
	if t != nil {
		next.lastRenewal, next.renewedGeneration, next.renewalError = t.lastRenewal, t.renewedGeneration, t.renewalError
	}
	next.renewable = !r.opts.Disabled && next.secret.Format == registry.NativeFormatName &&
		next.credential.Type == kubeconfig.CredentialToken && next.credential.ServiceAccount.Name != "" &&
		next.credential.Lifetime() > 0 && cfg.ExecProvider == nil
	next.plan = planRenewal(next.credential, next.renewable, r.opts.RenewAfter, r.opts.WarnAfter, 2*rand.Float64()-1)
	r.mu.Lock()
	r.tracked[name] = next
	r.mu.Unlock()
	return next, nil
}

// report publishes t as cluster name's credentials, as of now.
func (r *credentialRenewal) report(name string, t *tracked, now time.Time) {
	r.mu.Lock()
	creds := registry.Credentials{
		Generation:   t.generation,
		Credential:   t.credential,
		Renewable:    t.renewable,
		Expiring:     !t.plan.warnAt.IsZero() && !now.Before(t.plan.warnAt),
		Expired:      !t.credential.Expiry.IsZero() && !now.Before(t.credential.Expiry),
		LastRenewal:  t.lastRenewal,
		RenewalError: t.renewalError,
	}
	r.mu.Unlock()
	r.opts.Credentials.Publish(name, creds)
	r.metrics.observe(name, creds.Expiry)
}

// requeue queues name again at its next due time: a renewal, a retry, a
// warning, an expiry, or the end of a renewal's settling.
func (r *credentialRenewal) requeue(queue workqueue.TypedDelayingInterface[string], name string, t *tracked, now time.Time) {
	r.mu.Lock()
	settled := time.Time{}
	if !t.lastRenewal.IsZero() {
		settled = t.lastRenewal.Add(renewalSettle)
	}
	d, ok := nextWake(now, t.plan.renewAt, t.retryAt, t.plan.warnAt, t.credential.Expiry, settled)
	r.mu.Unlock()
	if ok {
		queue.AddAfter(name, d)
	}
}

// errSecretChanged is a Secret that changed since its kubeconfig was
// read: the change comes through the registry, and is evaluated then.
var errSecretChanged = errors.New("the registration Secret changed meanwhile")

// renew asks the member, as it runs kubeconfigData, for a new token for
// the service account of t and writes it into t's Secret, whose
// kubeconfig must still be kubeconfigData.
func (r *credentialRenewal) renew(ctx context.Context, name string, t *tracked, kubeconfigData []byte) error {
	running, err := r.running(name, kubeconfigData)
	if errors.Is(err, member.ErrOtherKubeconfig) || errors.Is(err, fleet.ErrNotOwned) {
		return err
	}
	if err != nil {
		return fmt.Errorf("the member is not connected: %w", err)
	}
	sa := t.credential.ServiceAccount
	seconds := int64(min(t.credential.Lifetime(), fleetv1alpha1.MaxTokenLifetime) / time.Second)
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}
	if err := running.GetClient().SubResource("token").Create(ctx, account, request); err != nil {
		return fmt.Errorf("requesting a token for service account %s from the member: %s", sa, member.SafeError(err))
	}
	secret := &corev1.Secret{}
	if err := r.m.GetAPIReader().Get(ctx, t.secret.NamespacedName, secret); err != nil {
		return fmt.Errorf("reading Secret %s: %w", t.secret.NamespacedName, err)
	}
	current := secret.Data[registry.KubeconfigKey]
	if !bytes.Equal(current, kubeconfigData) {
		return errSecretChanged
	}
	config, err := clientcmd.Load(current)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig of Secret %s: %w", t.secret.NamespacedName, err)
	}
	kubeContext := config.Contexts[config.CurrentContext]
	if kubeContext == nil || config.AuthInfos[kubeContext.AuthInfo] == nil {
		return fmt.Errorf("the kubeconfig of Secret %s has no user for its current context", t.secret.NamespacedName)
	}
	config.AuthInfos[kubeContext.AuthInfo].Token = request.Status.Token
	if secret.Data[registry.KubeconfigKey], err = clientcmd.Write(*config); err != nil {
		return fmt.Errorf("writing the renewed kubeconfig: %w", err)
	}
	// The Secret carries the resourceVersion it was read at: a Secret
	// changed since is not overwritten. The token is written only while
	// this replica still owns the member and proves its Lease.
	if !r.m.Owns(name) {
		return fmt.Errorf("%w: %q: not writing its renewed token", fleet.ErrNotOwned, name)
	}
	if err := r.opts.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("writing the renewed token into Secret %s: %w", t.secret.NamespacedName, err)
	}
	return nil
}
