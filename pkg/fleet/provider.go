package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetkube/fleet-manager/pkg/cluster"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// provider keeps the member pool in step with the registration Secrets of
// every enabled format. Each format has a Secret cache of its own, narrowed
// to that format's Secrets, and a hub controller reading from it, which
// reconciles up to registrationWorkers Secrets at once (or the manager's
// Controller.MaxConcurrentReconciles, when set).
//
// A cluster name claimed by two Secrets is a conflict: it is reported on
// both, and neither is engaged until one of them goes.
type provider struct {
	pool     *cluster.Pool
	recorder events.EventRecorder

	// mu guards claims and byName: the registration each Secret claims,
	// and the Secrets claiming each name; and settling.
	mu     sync.Mutex
	claims map[secretRef]claim
	byName map[string]map[secretRef]struct{}

	// settling holds a lock for each name being settled: the pool sees
	// each name's claims in the order they were made, while different
	// names settle in parallel, so that a member that is slow to stop
	// delays only its own name.
	settling map[string]*nameLock

	// refusals holds, per cluster name, why its one claim was refused.
	refusals map[string]*kubeconfig.RefusedError

	// changed is told each name whose claims or refusal changed, and
	// removed each name whose member was removed.
	changed, removed func(name string)

	// rechecks has one channel per format: sending a Secret there
	// reconciles it again.
	rechecks map[string]chan event.GenericEvent
}

// secretRef names a registration Secret of one format.
type secretRef struct {
	format string
	types.NamespacedName
}

type claim struct {
	ref    secretRef
	secret *corev1.Secret
	reg    cluster.Registration
}

// nameLock is the settle lock of one name and the number of settles
// holding or awaiting it.
type nameLock struct {
	sync.Mutex
	users int
}

// registrationWorkers is how many Secrets of a format are reconciled at
// once by default. Settling is mostly CPU work (parsing the kubeconfig,
// building the member's transport), but replacing or removing a member
// waits until it has stopped.
const registrationWorkers = 16

func addProvider(m *Manager, formats []registry.Format) error {
	p := &provider{
		pool:     m.pool,
		recorder: m.GetEventRecorder("fleet-manager"),
		claims:   map[secretRef]claim{},
		byName:   map[string]map[secretRef]struct{}{},
		settling: map[string]*nameLock{},
		rechecks: map[string]chan event.GenericEvent{},
		refusals: map[string]*kubeconfig.RefusedError{},
		changed:  func(string) {},
		removed:  func(string) {},
	}
	m.provider = p
	for _, f := range formats {
		c, err := cache.New(m.GetConfig(), cache.Options{
			HTTPClient:        m.GetHTTPClient(),
			Scheme:            m.GetScheme(),
			Mapper:            m.GetRESTMapper(),
			DefaultNamespaces: namespaces(f.Namespaces),
			ByObject:          map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: f.Label, Field: f.Field}},
		})
		if err != nil {
			return fmt.Errorf("creating the %s Secret cache: %w", f.Name, err)
		}
		if err := m.Add(secretCache{c}); err != nil {
			return err
		}
		r := &formatReconciler{provider: p, format: f, secrets: c}
		rechecks := make(chan event.GenericEvent, 64)
		p.rechecks[f.Name] = rechecks
		workers := m.GetControllerOptions().MaxConcurrentReconciles
		if workers <= 0 {
			workers = registrationWorkers
		}
		err = builder.ControllerManagedBy(m.Manager).
			Named("fleet-registrations-" + f.Name).
			WithOptions(crcontroller.Options{MaxConcurrentReconciles: workers}).
			WatchesRawSource(&secretSource{cache: c, match: f.Match}).
			WatchesRawSource(source.Channel(rechecks, &handler.EnqueueRequestForObject{})).
			Complete(r)
		if err != nil {
			return err
		}
	}
	return nil
}

func namespaces(names []string) map[string]cache.Config {
	if len(names) == 0 {
		return nil
	}
	m := map[string]cache.Config{}
	for _, n := range names {
		m[n] = cache.Config{}
	}
	return m
}

// secretCache puts a format's Secret cache in the manager's cache group:
// started on every replica, before any controller.
type secretCache struct{ cache.Cache }

func (c secretCache) GetCache() cache.Cache { return c.Cache }

// secretSource feeds a format's controller with the keys of its matching
// Secrets. Unlike source.Kind, which polls every 100 ms until the informer
// and then its handler have synced, it waits on the handler's sync
// channel, so the controller's workers start as soon as every Secret is
// queued.
type secretSource struct {
	cache cache.Cache
	match func(*corev1.Secret) bool
	// synced is set by Start.
	synced toolscache.DoneChecker
}

var _ source.SyncingSource = (*secretSource)(nil)

func (s *secretSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	informer, err := s.cache.GetInformer(ctx, &corev1.Secret{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("getting the Secret informer: %w", err)
	}
	enqueue := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if secret, ok := obj.(*corev1.Secret); ok && s.match(secret) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(secret)})
		}
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return fmt.Errorf("adding the Secret event handler: %w", err)
	}
	s.synced = reg.HasSyncedChecker()
	return nil
}

// WaitForSync returns once the handler has seen every Secret of the
// informer's initial list, or an error when ctx ends first.
func (s *secretSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the Secret informer to sync: %w", ctx.Err())
	}
}

func (s *secretSource) String() string { return "registration Secrets" }

// formatReconciler turns one format's Secrets into claims.
type formatReconciler struct {
	*provider
	format  registry.Format
	secrets client.Reader
}

func (r *formatReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ref := secretRef{format: r.format.Name, NamespacedName: req.NamespacedName}
	secret := &corev1.Secret{}
	err := r.secrets.Get(ctx, req.NamespacedName, secret)
	switch {
	case apierrors.IsNotFound(err):
		r.withdraw(ctx, ref)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, err
	case !secret.DeletionTimestamp.IsZero() || !r.format.Match(secret):
		r.withdraw(ctx, ref)
		return reconcile.Result{}, nil
	}
	reg, err := r.format.Read(secret)
	if err != nil {
		r.withdraw(ctx, ref)
		r.refused(ctx, secret, reg.ClusterName, err)
		return reconcile.Result{}, nil
	}
	r.claim(ctx, ref, claim{ref: ref, secret: secret, reg: reg})
	return reconcile.Result{}, nil
}

// recheck reconciles again every Secret claiming name, at once: a member
// whose credentials were refused may have been given new ones. It never
// blocks; a full channel means a recheck is already pending.
func (p *provider) recheck(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ref := range p.byName[name] {
		select {
		case p.rechecks[ref.format] <- event.GenericEvent{Object: p.claims[ref].secret}:
		default:
		}
	}
}

// claim records that ref claims c, and settles the names involved.
func (p *provider) claim(ctx context.Context, ref secretRef, c claim) {
	p.mu.Lock()
	old, had := p.unrecord(ref)
	p.claims[ref] = c
	if p.byName[c.reg.ClusterName] == nil {
		p.byName[c.reg.ClusterName] = map[secretRef]struct{}{}
	}
	p.byName[c.reg.ClusterName][ref] = struct{}{}
	p.mu.Unlock()
	if had && old.reg.ClusterName != c.reg.ClusterName {
		p.settle(ctx, old.reg.ClusterName)
	}
	p.settle(ctx, c.reg.ClusterName)
}

// withdraw forgets ref's claim, if any, and settles its name.
func (p *provider) withdraw(ctx context.Context, ref secretRef) {
	p.mu.Lock()
	old, had := p.unrecord(ref)
	p.mu.Unlock()
	if had {
		p.settle(ctx, old.reg.ClusterName)
	}
}

// unrecord removes ref's claim. mu must be held.
func (p *provider) unrecord(ref secretRef) (claim, bool) {
	old, had := p.claims[ref]
	if !had {
		return claim{}, false
	}
	delete(p.claims, ref)
	delete(p.byName[old.reg.ClusterName], ref)
	if len(p.byName[old.reg.ClusterName]) == 0 {
		delete(p.byName, old.reg.ClusterName)
	}
	return old, true
}

// settle makes the pool match the claims on name: no member without a
// claim, the claimed member for one claim, and no member for a conflict.
func (p *provider) settle(ctx context.Context, name string) {
	defer p.lockName(name)()
	claimants := p.claimsOn(name)

	log := logf.FromContext(ctx).WithValues("cluster", name)
	defer p.changed(name)
	p.setRefusal(name, nil)
	switch len(claimants) {
	case 0:
		if p.pool.Remove(name) {
			p.removed(name)
			log.Info("Registration removed")
		}
	case 1:
		c := claimants[0]
		if err := p.pool.Set(c.reg); err != nil {
			p.setRefusal(name, p.refused(ctx, c.secret, name, err))
			return
		}
		log.V(1).Info("Registration accepted")
	default:
		if p.pool.Remove(name) {
			p.removed(name)
		}
		secrets := make([]string, len(claimants))
		for i, c := range claimants {
			secrets[i] = c.secret.Namespace + "/" + c.secret.Name
		}
		list := strings.Join(secrets, ", ")
		p.setRefusal(name, &kubeconfig.RefusedError{Reason: "ClusterNameConflict", Message: "the cluster name is claimed by Secrets " + list})
		log.Error(errConflict, "Registration refused", "reason", "ClusterNameConflict", "secrets", list)
		for _, c := range claimants {
			p.recorder.Eventf(c.secret, nil, corev1.EventTypeWarning, "ClusterNameConflict", "Register",
				"cluster name %q is claimed by Secrets %s; none is engaged until only one claims it", name, list)
		}
	}
}

// lockName takes name's settle lock and returns its unlock.
func (p *provider) lockName(name string) (unlock func()) {
	p.mu.Lock()
	l := p.settling[name]
	if l == nil {
		l = &nameLock{}
		p.settling[name] = l
	}
	l.users++
	p.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		if l.users--; l.users == 0 {
			delete(p.settling, name)
		}
	}
}

func (p *provider) setRefusal(name string, refusal *kubeconfig.RefusedError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if refusal == nil {
		delete(p.refusals, name)
	} else {
		p.refusals[name] = refusal
	}
}

// refusal returns why name's registration was refused, or nil.
func (p *provider) refusal(name string) *kubeconfig.RefusedError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusals[name]
}

// claimsOn returns the claims on name, sorted by Secret.
func (p *provider) claimsOn(name string) []claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]claim, 0, len(p.byName[name]))
	for _, ref := range slices.SortedFunc(maps.Keys(p.byName[name]), compareRefs) {
		out = append(out, p.claims[ref])
	}
	return out
}

// names returns every claimed cluster name.
func (p *provider) names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.byName))
}

var errConflict = errors.New("two or more Secrets claim the same cluster name")

// refused reports a refused registration in the log and as an Event on
// its Secret. Refusals carry no credential; other errors are reported by
// kind only, for the same reason. It returns the refusal it reported.
func (p *provider) refused(ctx context.Context, secret *corev1.Secret, name string, err error) *kubeconfig.RefusedError {
	refusal, ok := errors.AsType[*kubeconfig.RefusedError](err)
	if !ok {
		refusal = &kubeconfig.RefusedError{Reason: "RegistrationFailed", Message: "the member could not be built"}
	}
	logf.FromContext(ctx).Error(err, "Registration refused", "cluster", name, "reason", refusal.Reason)
	p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, refusal.Reason, "Register", "%s", refusal.Message)
	return refusal
}

func compareRefs(a, b secretRef) int {
	return strings.Compare(a.format+"/"+a.String(), b.format+"/"+b.String())
}
