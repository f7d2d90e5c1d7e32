package propagation

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
)

// TestCleanCheckIsTrustedForTheRecheckAlone: a member that gives a
// resourceVersion checked clean again to other content (an etcd backup
// restored) has the copy compared again once the check is
// Options.DriftRecheck old: the copy cache trusts a clean check for the
// recheck alone, and says how long it still does.
func TestCleanCheckIsTrustedForTheRecheckAlone(t *testing.T) {
	t.Parallel()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	live.SetNamespace("team")
	live.SetName("web")
	live.SetResourceVersion("4242")
	member := &memberCopies{name: "east", recheck: time.Minute}
	id := idOf(live)
	member.CheckedClean(id, live, "h")
	if ok, left := member.Unchanged(id, live, "h"); !ok || left <= 0 || left > time.Minute {
		t.Fatalf("within the recheck: trusted %v, for %s more; want the check trusted, for at most the recheck", ok, left)
	}
	c := member.checked[id]
	c.at = c.at.Add(-time.Minute)
	member.checked[id] = c
	if ok, _ := member.Unchanged(id, live, "h"); ok {
		t.Error("a check a recheck old, of a version the member may have given again to other content, is still trusted")
	}
}

// TestRelistMakesTheCopyComparedAgain: an event of a copy showing the
// version the cache held (a relist after a watch failed, as a member
// restored from an etcd backup makes it; a resync) drops its clean
// check; an event of a new version leaves the check to the version.
func TestRelistMakesTheCopyComparedAgain(t *testing.T) {
	t.Parallel()
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	version := func(rv string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		obj.SetNamespace("team")
		obj.SetName("web")
		obj.SetResourceVersion(rv)
		obj.SetLabels(map[string]string{fleetv1alpha1.PropagationLabel: "web"})
		return obj
	}
	mc := &memberCopies{name: "east", recheck: time.Hour}
	id := idOf(version("5"))
	enqueue := func(string, string) {}
	mc.CheckedClean(id, version("5"), "h")
	mc.copyEvent(version("4"), version("5"), enqueue)
	if ok, _ := mc.Unchanged(id, version("5"), "h"); !ok {
		t.Error("an event of a new version dropped the clean check of it")
	}
	mc.copyEvent(version("5"), version("5"), enqueue)
	if ok, _ := mc.Unchanged(id, version("5"), "h"); ok {
		t.Error("an event showing the version the cache held (a relist) left its clean check trusted")
	}
}

// TestOwnershipChangeTellsBothPropagations: an event that moves a copy
// from one Propagation to another asks for a run of both, even when it
// shows the version the manager's own write answered.
func TestOwnershipChangeTellsBothPropagations(t *testing.T) {
	t.Parallel()
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	copyOf := func(propagation, rv string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		obj.SetNamespace("team")
		obj.SetName("web")
		obj.SetResourceVersion(rv)
		obj.SetLabels(map[string]string{fleetv1alpha1.PropagationLabel: propagation})
		return obj
	}
	mc := &memberCopies{name: "east"}
	var told []string
	w := &watchedKinds{ctx: t.Context(), echo: mc.echo, onEvent: func(old, obj client.Object) {
		mc.copyEvent(old, obj, func(namespace, name string) { told = append(told, namespace+"/"+name) })
	}}
	informer := &controllertest.FakeInformer{}
	if _, _, err := w.register(gvk, informer, 0); err != nil {
		t.Fatal(err)
	}
	mc.Wrote(idOf(copyOf("other", "8")), copyOf("other", "8"))
	informer.Update(copyOf("web", "7"), copyOf("other", "8"))
	informer.Update(copyOf("other", "8"), copyOf("other", "9"))
	if want := []string{"team/other", "team/web", "team/other"}; !slices.Equal(told, want) {
		t.Errorf("runs asked for %v, want %v: the Propagation a copy left is told, also of the manager's own write", told, want)
	}
}

// listOptions records the options of each List of a cache.
type listOptions struct {
	informertest.FakeInformers
	opts []client.ListOptions
}

func (c *listOptions) List(_ context.Context, _ client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	c.opts = append(c.opts, o)
	return nil
}

// synced is the registration of an informer that has synced.
type synced struct {
	toolscache.ResourceEventHandlerRegistration
}

func (synced) HasSynced() bool { return true }

// TestMemberCopiesAreListedWithoutCopying: a run lists a member's copies
// as the copy cache holds them, not deep-copied.
func TestMemberCopiesAreListedWithoutCopying(t *testing.T) {
	t.Parallel()
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	c := &listOptions{}
	w := &watchedKinds{cache: c, running: make(chan struct{}), selector: labels.Everything()}
	close(w.running)
	w.informers = map[schema.GroupVersionKind]*kindInformer{gvk: {handler: synced{}}}
	ctx := t.Context()
	mc := &memberCopies{name: "east", ctx: ctx, namespaces: map[string]*namespaceCopies{"team": {watchedKinds: w, ctx: ctx}}}
	if _, err := mc.List(ctx, gvk, "team", labels.Everything()); err != nil {
		t.Fatal(err)
	}
	if len(c.opts) != 1 || c.opts[0].UnsafeDisableDeepCopy == nil || !*c.opts[0].UnsafeDisableDeepCopy {
		t.Error("a member's copies were listed deep-copied")
	}
}

// TestOwnWriteAsksForNoRun: the watch event of the version of a copy the
// manager's write answered is not told (the run that wrote it saw it);
// another version of it is, and so is its deletion.
func TestOwnWriteAsksForNoRun(t *testing.T) {
	t.Parallel()
	mc, informer, told := echoFixture(t)
	id := apply.CopyID{Namespace: "team", Key: apply.Key{GVK: configMapKind, Name: "web"}}
	mc.Wrote(id, version("7"))
	informer.Add(version("7"))
	informer.Update(version("7"), version("8")) // another manager's
	mc.Wrote(id, version("9"))
	informer.Update(version("8"), version("9"))
	mc.Wrote(id, version("10"))
	informer.Delete(version("10"))
	if want := []string{"8", "10"}; !slices.Equal(*told, want) {
		t.Errorf("events told of versions %v, want %v: not the manager's own writes 7 and 9", *told, want)
	}
}

// TestOwnWriteSeenBeforeItsAnswerAsksForNoRun: the watch may show a
// write before its answer comes; an event that comes while the manager
// writes the copy waits for the answer: the write's own version is not
// told, any other is, once the write answered, and all are when it
// failed.
func TestOwnWriteSeenBeforeItsAnswerAsksForNoRun(t *testing.T) {
	t.Parallel()
	mc, informer, told := echoFixture(t)
	id := apply.CopyID{Namespace: "team", Key: apply.Key{GVK: configMapKind, Name: "web"}}
	mc.Write(id)
	informer.Update(version("7"), version("8")) // another manager's
	informer.Update(version("8"), version("9")) // the write's, before its answer
	if len(*told) != 0 {
		t.Fatalf("events told of versions %v while the write was in flight", *told)
	}
	mc.Wrote(id, version("9"))
	if want := []string{"8"}; !slices.Equal(*told, want) {
		t.Fatalf("events told of versions %v once the write answered 9, want %v", *told, want)
	}
	informer.Update(version("9"), version("10")) // the write's echo was dropped: this is news
	mc.Write(id)
	informer.Update(version("10"), version("11"))
	mc.Wrote(id, nil) // failed
	if want := []string{"8", "10", "11"}; !slices.Equal(*told, want) {
		t.Errorf("events told of versions %v, want %v: a failed write holds back no event", *told, want)
	}
}

// echoFixture is a member's copies with a ConfigMap informer of namespace
// team whose events, of the ConfigMap web, are told to told unless they
// are echoes of the manager's writes.
func echoFixture(t *testing.T) (mc *memberCopies, informer *controllertest.FakeInformer, told *[]string) {
	mc = &memberCopies{name: "east"}
	told = new([]string)
	w := &watchedKinds{ctx: t.Context(), echo: mc.echo, onEvent: func(_, obj client.Object) { *told = append(*told, obj.GetResourceVersion()) }}
	informer = &controllertest.FakeInformer{}
	if _, _, err := w.register(configMapKind, informer, 0); err != nil {
		t.Fatal(err)
	}
	return mc, informer, told
}

var configMapKind = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

// version is the ConfigMap team/web at resourceVersion rv.
func version(rv string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(configMapKind)
	obj.SetNamespace("team")
	obj.SetName("web")
	obj.SetResourceVersion(rv)
	return obj
}
