package propagation

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// hangingCopyCache is a copy cache of namespace team in a cluster that
// never answers, whose informers start and never sync, and which fails a
// read of a kind it runs no informer of, as a member's copy cache does.
func hangingCopyCache(t *testing.T, ctx context.Context) *watchedKinds {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, kind := range []string{"ConfigMap", "Secret"} {
		mapper.Add(corev1.SchemeGroupVersion.WithKind(kind), meta.RESTScopeNamespace)
	}
	c, err := cache.New(&rest.Config{Host: "http://" + listenAndHang(t).addr}, cache.Options{
		Scheme: scheme, Mapper: mapper, DefaultNamespaces: map[string]cache.Config{"team": {}},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchedKinds{
		cluster: "member hanging", cache: c, mapper: mapper, selector: labels.Everything(), namespace: "team",
		reader: fake.NewClientBuilder().WithScheme(scheme).Build(), running: make(chan struct{}),
	}
	w.run(ctx)
	select {
	case <-w.running:
	case <-ctx.Done():
		t.Fatal("the cache did not start")
	}
	return w
}

// TestUnneededWatchIsStoppedUnlessReadSince stops the informer of a kind
// no request asked for since the sweep began, and keeps one a request
// asked for meanwhile; a read of the stopped kind fails, as an error to
// retry, rather than finding nothing, and a later request starts it again.
func TestUnneededWatchIsStoppedUnlessReadSince(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := hangingCopyCache(t, ctx)
	told := 0
	w.onInformers = func(bool) { told++ }
	configMaps, secrets := corev1.SchemeGroupVersion.WithKind("ConfigMap"), corev1.SchemeGroupVersion.WithKind("Secret")
	for _, gvk := range []schema.GroupVersionKind{configMaps, secrets} {
		if _, err := w.start(ctx, gvk); err != nil {
			t.Fatal(err)
		}
	}
	sweep := time.Now()
	w.mu.Lock()
	for _, ki := range w.informers {
		ki.used = sweep.Add(-time.Minute)
	}
	w.mu.Unlock()
	// A request asks for Secrets during the sweep; the cluster never
	// answers, so it gives up.
	asking, stopAsking := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stopAsking()
	if err := w.watch(asking, secrets); err == nil {
		t.Fatal("watch of a kind that never synced succeeded")
	}

	if !w.unwatch(configMaps, sweep) {
		t.Error("the informer of ConfigMaps, which no request asked for since, was kept")
	}
	if w.unwatch(secrets, sweep) {
		t.Error("the informer of Secrets, which a request asked for during the sweep, was stopped")
	}
	if got := w.started(); !slices.Equal(got, []schema.GroupVersionKind{secrets}) {
		t.Errorf("started = %v, want Secrets only", got)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := w.cache.List(ctx, list, client.InNamespace("team")); err == nil {
		t.Error("a read of the stopped kind found nothing rather than failing: a run would take it for no copies")
	}

	if _, err := w.start(ctx, configMaps); err != nil {
		t.Fatal(err)
	}
	if got := len(w.started()); got != 2 {
		t.Errorf("%d informers once a request asked for ConfigMaps again, want 2", got)
	}
	if told != 4 {
		t.Errorf("onInformers told %d times, want 4: 2 started, 1 stopped, 1 started again", told)
	}
}

// TestIdleCopyCacheIsDroppedUnlessReadSince drops a member's copy cache
// that runs no informer and that no request asked for since the sweep
// began, and keeps one a request asked for meanwhile, one a request that
// began before the sweep still uses (its kind's check may outlast a
// sweep: its informer would start in a stopped cache), and one that still
// runs an informer.
func TestIdleCopyCacheIsDroppedUnlessReadSince(t *testing.T) {
	t.Parallel()
	mc := &memberCopies{name: "east", ctx: t.Context(), namespaces: map[string]*namespaceCopies{}}
	add := func(namespace string) *namespaceCopies {
		ctx, stop := context.WithCancel(mc.ctx)
		nc := &namespaceCopies{watchedKinds: &watchedKinds{}, ctx: ctx, stop: stop, used: time.Now().Add(-time.Minute)}
		mc.namespaces[namespace] = nc
		return nc
	}
	idle, read, held, watching := add("idle"), add("read"), add("held"), add("watching")
	watching.informers = map[schema.GroupVersionKind]*kindInformer{corev1.SchemeGroupVersion.WithKind("ConfigMap"): {}}
	nc, letGo, err := mc.inNamespace("held")
	if err != nil || nc != held {
		t.Fatalf("inNamespace = %v, %v, want the namespace's cache", nc, err)
	}
	defer letGo()
	sweep := time.Now()
	nc, done, err := mc.inNamespace("read")
	if err != nil || nc != read {
		t.Fatalf("inNamespace = %v, %v, want the namespace's cache", nc, err)
	}
	done()
	for _, namespace := range []string{"idle", "read", "held", "watching"} {
		mc.drop(namespace, sweep)
	}
	if held.ctx.Err() != nil || mc.caches()["held"] != held {
		t.Error("a cache a request still uses was dropped")
	}
	if idle.ctx.Err() == nil || mc.caches()["idle"] != nil {
		t.Error("the idle cache was kept")
	}
	if read.ctx.Err() != nil || mc.caches()["read"] != read {
		t.Error("the cache a request asked for during the sweep was dropped")
	}
	if watching.ctx.Err() != nil || mc.caches()["watching"] != watching {
		t.Error("a cache that runs an informer was dropped")
	}
}
