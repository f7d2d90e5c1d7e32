package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// ReasonInvalidClusterName refuses a Secret whose cluster name is not a
// DNS-1123 subdomain.
const ReasonInvalidClusterName = "InvalidClusterName"

// DefaultWorkers is how many Secrets of a format are read at once by
// default.
const DefaultWorkers = 16

// NewWithSecrets returns a registry whose sources are the registration
// Secrets of formats, in order of preference, read on the hub mgr runs
// on, and, last, the ClusterProfiles profiles selects, if not nil. Each
// format has a cache of its own, narrowed to that format's objects, and a
// hub controller that reads up to workers of them at once into claims.
// They run on every replica, leader or not, so that a replica that
// becomes leader knows every registration at once.
//
// The native format's namespace is the fleet namespace: a registration
// from elsewhere never takes a name one of its Secrets claims. A shared
// registry is NewShared's: for a replica that shares the fleet. One that
// allows duplicates refuses no name as ReasonDuplicateCluster, whatever
// the hub's MemberClusters record: for tests and benches that register
// one API server under many names.
func NewWithSecrets(mgr manager.Manager, formats []Format, workers int, profiles *ClusterProfiles, shared, allowDuplicates bool) (*Registry, error) {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name
	}
	if profiles != nil {
		names = append(names, ClusterProfileFormat)
	}
	r := newRegistry(shared, names)
	r.allowDuplicates = allowDuplicates
	for _, f := range formats {
		if f.Name == NativeFormatName && len(f.Namespaces) == 1 {
			r.fleetNamespace = f.Namespaces[0]
		}
	}
	if r.fleetNamespace != "" {
		// Before Synced, the identities the hub records of every name.
		r.unsynced[recordedIdentities] = struct{}{}
		if err := mgr.Add(identityRecords{registry: r, cache: mgr.GetCache()}); err != nil {
			return nil, err
		}
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	if profiles != nil {
		if err := addClusterProfiles(mgr, r, *profiles, workers); err != nil {
			return nil, err
		}
	}
	for _, f := range formats {
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			HTTPClient:        mgr.GetHTTPClient(),
			Scheme:            mgr.GetScheme(),
			Mapper:            mgr.GetRESTMapper(),
			DefaultNamespaces: namespaces(f.Namespaces),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}: {Label: f.Label, Field: f.Field, Transform: keepOnlyRegistration(f)},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("creating the %s Secret cache: %w", f.Name, err)
		}
		reader := &secretReader{registry: r, format: f, secrets: c, recorder: mgr.GetEventRecorder("fleet-manager")}
		src := newRegistrationSource(c, &corev1.Secret{}, "registration Secrets", func(o client.Object) bool { return f.Match(o.(*corev1.Secret)) })
		if err := addRegistrationSource(mgr, r, f.Name, reader, src, workers); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// addRegistrationSource runs format's source on mgr: its cache, a hub
// controller that reads up to workers of its objects at once with reader,
// on every replica, and its first pass.
func addRegistrationSource(mgr manager.Manager, r *Registry, format string, reader registrationReader, src *registrationSource, workers int) error {
	if err := mgr.Add(registrationCache{src.cache}); err != nil {
		return err
	}
	err := builder.ControllerManagedBy(mgr).
		Named("fleet-registrations-" + format).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: workers, NeedLeaderElection: ptr.To(false)}).
		WatchesRawSource(src).
		Complete(reader)
	if err != nil {
		return err
	}
	return mgr.Add(firstPass{reader: reader, source: src, format: format, registry: r})
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

// keepOnlyRegistration returns the Secret cache transform of format f: a
// cached Secret keeps only what reading its registration uses. Data keys
// f does not read, managed fields and kubectl's last applied
// configuration are dropped, and a value over the kubeconfig budget is
// replaced by its refusal, so that a Secret the policy would refuse
// unread costs the cache a few bytes instead of up to a megabyte, and its
// refusal is still reported. It mutates the Secret in place, and is
// idempotent, as client-go asks.
func keepOnlyRegistration(f Format) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, nil
		}
		secret.ManagedFields = nil
		delete(secret.Annotations, corev1.LastAppliedConfigAnnotation)
		data := make(map[string][]byte, len(f.Keys))
		for _, key := range f.Keys {
			value, ok := secret.Data[key]
			if !ok {
				continue
			}
			if err := kubeconfig.CheckBudget(key, value); err != nil {
				refusal, _ := errors.AsType[*kubeconfig.RefusedError](err)
				value = []byte(droppedMarker + refusal.Reason + "\x00" + refusal.Message)
			}
			data[key] = value
		}
		secret.Data, secret.StringData = data, nil
		return secret, nil
	}
}

// droppedMarker starts a cached data value that keepOnlyRegistration
// replaced; its refusal follows.
const droppedMarker = "\x00fleet-manager: dropped from the cache\x00"

// droppedRefusal returns the refusal keepOnlyRegistration left in one of
// keys' values, if any.
func droppedRefusal(secret *corev1.Secret, keys []string) *kubeconfig.RefusedError {
	for _, key := range keys {
		rest, ok := bytes.CutPrefix(secret.Data[key], []byte(droppedMarker))
		if !ok {
			continue
		}
		reason, message, _ := bytes.Cut(rest, []byte{0})
		return &kubeconfig.RefusedError{Reason: string(reason), Message: string(message)}
	}
	return nil
}

// registrationCache puts a format's cache in the manager's cache group:
// started on every replica, before any controller.
type registrationCache struct{ cache.Cache }

func (c registrationCache) GetCache() cache.Cache { return c.Cache }

// registrationSource feeds a registration controller with the keys of
// the matching objects of one kind. Unlike source.Kind, which polls every
// 100 ms until the informer and then its handler have synced, it waits on
// the handler's sync channel, so the controller's workers start as soon as
// every object is queued.
type registrationSource struct {
	cache cache.Cache
	obj   client.Object
	what  string
	match func(client.Object) bool
	// started closes once synced is set.
	started chan struct{}
	synced  toolscache.DoneChecker
}

var _ source.SyncingSource = (*registrationSource)(nil)

// newRegistrationSource returns a source of the objects of obj's kind in
// c that match, named what in errors and logs.
func newRegistrationSource(c cache.Cache, obj client.Object, what string, match func(client.Object) bool) *registrationSource {
	return &registrationSource{cache: c, obj: obj, what: what, match: match, started: make(chan struct{})}
}

func (s *registrationSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	informer, err := s.cache.GetInformer(ctx, s.obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("getting the informer of %s: %w", s.what, err)
	}
	enqueue := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if o, ok := obj.(client.Object); ok && s.match(o) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return fmt.Errorf("adding the event handler of %s: %w", s.what, err)
	}
	s.synced = reg.HasSyncedChecker()
	close(s.started)
	return nil
}

// WaitForSync returns once the handler has seen every object of the
// informer's initial list, or an error when ctx ends first.
func (s *registrationSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.started:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the informer of %s to sync: %w", s.what, ctx.Err())
	}
	select {
	case <-s.synced.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the informer of %s to sync: %w", s.what, ctx.Err())
	}
}

func (s *registrationSource) String() string { return s.what }

// firstPass reads every object of a registration source once its handler
// has seen the initial list, then marks the format synced: from then on
// the registry holds a claim for every object that existed when the
// manager started.
type firstPass struct {
	reader   registrationReader
	source   *registrationSource
	format   string
	registry *Registry
}

// registrationReader reads the objects of one registration format into
// claims.
type registrationReader interface {
	reconcile.Reconciler
	// keys lists the keys of every object the reader reads.
	keys(ctx context.Context) ([]types.NamespacedName, error)
}

func (p firstPass) Start(ctx context.Context) error {
	if err := p.source.WaitForSync(ctx); err != nil {
		return nil // stopped before syncing: nothing to mark
	}
	keys, err := p.reader.keys(ctx)
	if err != nil {
		return fmt.Errorf("listing %s registrations: %w", p.format, err)
	}
	for _, key := range keys {
		if _, err := p.reader.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			return fmt.Errorf("reading %s registrations: %w", p.format, err)
		}
	}
	p.registry.markSynced(p.format)
	return nil
}

func (firstPass) NeedLeaderElection() bool { return false }

// secretReader turns one format's Secrets into claims.
type secretReader struct {
	registry *Registry
	format   Format
	secrets  client.Reader
	recorder events.EventRecorder
	locks    keyLocks
}

// Reconcile reads a Secret from the cache and records its claim.
func (r *secretReader) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer r.locks.lock(req.NamespacedName)()
	secret := &corev1.Secret{}
	if found, err := getOrWithdraw(ctx, r.secrets, req.NamespacedName, secret, r.registry, r.source(req.NamespacedName)); !found {
		return reconcile.Result{}, err
	}
	r.read(ctx, secret)
	return reconcile.Result{}, nil
}

// keyLocks orders the reads of one object: the first pass and the
// controller may read the same one at once, and the later must record the
// cache's latest.
type keyLocks [64]sync.Mutex

// lock locks key's lock and returns what unlocks it.
func (l *keyLocks) lock(key types.NamespacedName) (unlock func()) {
	m := &l[fnv32(key.String())%uint32(len(l))]
	m.Lock()
	return m.Unlock
}

// getOrWithdraw gets key into obj from reader and reports whether it was
// found; a missing object withdraws src's claim from r.
func getOrWithdraw(ctx context.Context, reader client.Reader, key types.NamespacedName, obj client.Object, r *Registry, src Source) (found bool, err error) {
	err = reader.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		r.withdraw(src)
		return false, nil
	}
	return err == nil, err
}

// read records the claim secret makes, or withdraws it.
func (r *secretReader) read(ctx context.Context, secret *corev1.Secret) {
	src := r.source(client.ObjectKeyFromObject(secret))
	if !secret.DeletionTimestamp.IsZero() || !r.format.Match(secret) {
		r.registry.withdraw(src)
		return
	}
	reg, err := r.format.Read(r.named(secret))
	if refusal := droppedRefusal(secret, r.format.Keys); refusal != nil && !isRefusal(err, ReasonInvalidClusterName) {
		err = refusal
	}
	c := Claim{Source: src, Labels: maps.Clone(secret.Labels), Created: secret.CreationTimestamp.Time, Version: secret.ResourceVersion, kubeconfig: reg.Kubeconfig}
	if err != nil {
		refusal, ok := errors.AsType[*kubeconfig.RefusedError](err)
		if !ok {
			refusal = &kubeconfig.RefusedError{Reason: "RegistrationInvalid", Message: "the Secret could not be read"}
		}
		if refusal.Reason == ReasonInvalidClusterName {
			// No object can carry the refusal of a name that is not one:
			// the Secret's Event and the log say it.
			logf.FromContext(ctx).Info("Registration refused", "secret", src.NamespacedName, "reason", refusal.Reason)
			r.recorder.Eventf(secret, nil, corev1.EventTypeWarning, refusal.Reason, "Register", "%s", refusal.Message)
			r.registry.withdraw(src)
			return
		}
		c.Refusal, c.kubeconfig = refusal, nil
	}
	if r.registry.claim(reg.ClusterName, c) {
		reportTaken(logf.FromContext(ctx).WithValues("secret", src.NamespacedName), r.recorder, secret, reg.ClusterName)
	}
}

// reportTaken logs, and records as an Event on obj, that obj's claim on
// cluster name changes nothing: the fleet namespace claims the name.
func reportTaken(log logr.Logger, recorder events.EventRecorder, obj runtime.Object, name string) {
	log.Info("Registration refused", "cluster", name, "reason", ReasonClusterNameTaken)
	recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonClusterNameTaken, "Register",
		"cluster %s: a Secret of the fleet namespace registers this name, which no registration from elsewhere can take", name)
}

func isRefusal(err error, reason string) bool {
	refusal, ok := errors.AsType[*kubeconfig.RefusedError](err)
	return ok && refusal.Reason == reason
}

// named returns secret as the format may read its cluster's name: without
// ClusterNameAnnotation outside the fleet namespace, if the format says so.
func (r *secretReader) named(secret *corev1.Secret) *corev1.Secret {
	if _, ok := secret.Annotations[ClusterNameAnnotation]; !ok || !r.format.AnnotationInFleetOnly || secret.Namespace == r.registry.fleetNamespace {
		return secret
	}
	s := secret.DeepCopy()
	delete(s.Annotations, ClusterNameAnnotation)
	return s
}

// keys lists the keys of the format's Secrets.
func (r *secretReader) keys(ctx context.Context) ([]types.NamespacedName, error) {
	secrets := &corev1.SecretList{}
	if err := r.secrets.List(ctx, secrets); err != nil {
		return nil, err
	}
	keys := make([]types.NamespacedName, len(secrets.Items))
	for i := range secrets.Items {
		keys[i] = client.ObjectKeyFromObject(&secrets.Items[i])
	}
	return keys, nil
}

func (r *secretReader) source(key types.NamespacedName) Source {
	return Source{Format: r.format.Name, NamespacedName: key}
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
