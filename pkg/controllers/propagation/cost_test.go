package propagation_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// memberReconciles counts the Propagation controller's reconciles of the
// named members, whatever their result.
func memberReconciles(t *testing.T, names ...string) float64 {
	t.Helper()
	return reconcileCount(t, "fleet_reconciles_total", names...)
}

// reconcileCount sums the Propagation controller's series of family for
// the named clusters ("" for the hub).
func reconcileCount(t *testing.T, family string, names ...string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == propagation.ControllerName && slices.Contains(names, labels["cluster"]) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// setData sets data v of the hub ConfigMap name.
func (f *testFleet) setData(name, v string) {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, cm); err != nil {
		f.t.Fatal(err)
	}
	cm.Data = map[string]string{"v": v}
	if err := f.hub.Client.Update(f.t.Context(), cm); err != nil {
		f.t.Fatal(err)
	}
}

// TestUnrelatedHubChurnReconcilesNoMember runs alone: it reads the
// reconciles of members east and west, as every fleet names them.
func TestUnrelatedHubChurnReconcilesNoMember(t *testing.T) {
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.configMap("noise", map[string]string{"v": "0"}, map[string]string{"app": "other"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })

	const churn = 30
	before := memberReconciles(t, "east", "west")
	for i := range churn {
		f.setData("noise", strconv.Itoa(i+1))
	}
	// The related change, made after the churn, is a positive signal: once
	// each member reconciled it, the hub events before it were handled.
	f.setData("web", "1")
	for i := range 2 {
		f.waitCopy(i, "web", "holds the change", dataIs("v", "1"))
	}
	poll.Until(t, "each member reconciled the change", func() bool { return memberReconciles(t, "east", "west") >= before+2 })
	// The change explains a reconcile per member for the hub event and one
	// for the copy's own event in the member, one more each for events
	// that crossed, and one each when the change's revision is made after
	// the member applied it (to label the copy with it).
	if caused := memberReconciles(t, "east", "west") - before; caused > 8 {
		t.Errorf("%d updates of a ConfigMap no Propagation selects and one of a selected one made %.0f member reconciles, want at most 8", churn, caused)
	}

	// The label change that moves web out of the selector still reaches
	// the members: its state before the change is selected.
	cm := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{"app": "other"}
	if err := f.hub.Client.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		f.waitCopy(i, "web", "removed once it is no longer selected", gone)
	}
}

// hubConfigMapWatches counts the watches of ConfigMaps of one namespace
// that h's API server serves.
func hubConfigMapWatches(t *testing.T, h *fleettest.Hub) int {
	t.Helper()
	cs, err := kubernetes.NewForConfig(h.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	watches := 0
	lines := bufio.NewScanner(bytes.NewReader(raw))
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") {
			continue
		}
		labels, value, _ := strings.Cut(line, "} ")
		if !strings.Contains(labels, `resource="configmaps"`) || !strings.Contains(labels, `scope="namespace"`) || !strings.Contains(labels, `verb="WATCH"`) {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("reading %q: %v", line, err)
		}
		watches += int(n)
	}
	return watches
}

// TestHubCacheStopsWithTheNamespacesLastPropagation runs on a hub of its
// own, where no other test's Propagation is read while it runs, and
// counts the watches of ConfigMaps of a namespace its API server serves.
func TestHubCacheStopsWithTheNamespacesLastPropagation(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	watching := hubConfigMapWatches(t, f.hub)

	p := &fleetv1alpha1.Propagation{}
	p.Namespace, p.Name = f.team, "web"
	if err := f.hub.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "removed with the Propagation", gone)
	poll.Until(t, "the hub cache of the team namespace stopped", func() bool {
		return hubConfigMapWatches(t, f.hub) == watching-1
	})

	f.propagation("web", nil)
	f.waitCopy(0, "web", "copied by a new Propagation", exists)
	f.waitStatus("web", "Ready", ready)
	if got := hubConfigMapWatches(t, f.hub); got != watching {
		t.Errorf("%d namespaced ConfigMap watches once the namespace has a Propagation again, want %d", got, watching)
	}
	if err := f.hub.Client.Delete(t.Context(), p); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "removed with the Propagation", gone)
}

// conflicts makes every other patch of a Propagation, of its finalizer
// or its status, fail with a conflict, as when the manager's cache is
// behind a change of it, and counts them.
type conflicts struct {
	mu       sync.Mutex
	patches  map[string]int
	conflict int
}

func (c *conflicts) patch(what string, obj client.Object) error {
	if _, ok := obj.(*fleetv1alpha1.Propagation); !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.patches[what]++
	if c.patches[what]%2 == 0 {
		return nil
	}
	c.conflict++
	return apierrors.NewConflict(schema.GroupResource{Group: fleetv1alpha1.GroupVersion.Group, Resource: "propagations"}, obj.GetName(), fmt.Errorf("the object has been modified"))
}

func (c *conflicts) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conflict
}

// conflictingClient returns, for the Propagation controller of mgr, a
// hub client whose writes of Propagations conflict every other time.
func conflictingClient(c *conflicts, mgr *fleet.Manager) (client.Client, error) {
	cached, err := cachedHubClient(mgr)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(cached, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := c.patch("object", obj); err != nil {
				return err
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, subResource string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.patch(subResource, obj); err != nil {
				return err
			}
			return cl.SubResource(subResource).Patch(ctx, obj, patch, opts...)
		},
	}), nil
}

// TestWriteConflictIsRetriedNotAnError makes the controller's finalizer
// and status writes conflict: each is tried again, and none is a
// reconcile error. It runs alone: it reads every fleet's reconcile errors
// of the hub.
func TestWriteConflictIsRetriedNotAnError(t *testing.T) {
	suite.Need(t)
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	c := &conflicts{patches: map[string]int{}}
	f.client = func(m *fleet.Manager) (client.Client, error) { return conflictingClient(c, m) }
	f.start(nil)
	errorsBefore := reconcileCount(t, "fleet_reconcile_errors_total", registry.HubName)

	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	f.setData("web", "1")
	f.waitCopy(0, "web", "holds the change", dataIs("v", "1"))
	p := &fleetv1alpha1.Propagation{}
	p.Namespace, p.Name = f.team, "web"
	if err := f.hub.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Propagation is gone", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), client.ObjectKeyFromObject(p), p))
	})
	f.waitCopy(0, "web", "removed with the Propagation", gone)
	if c.count() < 3 {
		t.Fatalf("%d writes conflicted, want the finalizer's, the status's and the release's at least", c.count())
	}
	if errs := reconcileCount(t, "fleet_reconcile_errors_total", registry.HubName) - errorsBefore; errs != 0 {
		t.Errorf("%d of %d conflicting writes were reconcile errors, want none", int(errs), c.count())
	}
}

// TestChangeUnderAllWritesTheCopyOnce: under strategy All, the member
// run that first sees a change makes its revision, so the member writes
// the changed copy once, labelled with it, not once unlabelled and again
// to label it (the members' audit logs), when the change comes after a
// quiet StatusInterval.
func TestChangeUnderAllWritesTheCopyOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready at revision 1", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Revision == 1 })
	// A change after a quiet StatusInterval: within it, member runs leave
	// the revision to the status sums (TestRunsMakeAtMostOneRevisionPerPace).
	time.Sleep(propagation.StatusInterval)
	builds := contentBuilds(t)
	changed := time.Now()
	f.setData("web", "2")
	f.waitCopy(0, "web", "holds revision 2", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == "2" && cm.Labels[fleetv1alpha1.RevisionLabel] == "2"
	})
	// Ready never comes before the member's last write for the revision.
	f.waitStatus("web", "Ready at revision 2", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Revision == 2 })
	var writes []string
	for _, w := range memberWrites(t, 0, changed) {
		if w.Namespace == f.team && w.Resource == "configmaps" && w.Name == "web" {
			writes = append(writes, w.String())
		}
	}
	if len(writes) != 1 {
		t.Errorf("the changed copy was written %d times, want once: %v", len(writes), writes)
	}
	if contentBuilds(t) <= builds {
		t.Error("fleet_propagation_content_builds_total did not count the change's content build")
	}
}

// contentBuilds reads fleet_propagation_content_builds_total, which
// every manager of the test process counts in.
func contentBuilds(t *testing.T) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "fleet_propagation_content_builds_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestChangeWritesOnlyTheChangedCopy: when one of a Propagation's objects
// changes, the member's other copies are not changed again, their
// revision label included: each keeps the revision that gave it its
// content, and the changed copy takes the new one. (A run that read its
// cache before a write's event came may repeat that write, changing
// nothing: resourceVersions tell changes.)
func TestChangeWritesOnlyTheChangedCopy(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	names := []string{"web-0", "web-1", "web-2", "web-3"}
	for _, name := range names {
		f.configMap(name, map[string]string{"v": "1"}, map[string]string{"app": "web"})
	}
	f.propagation("web", nil)
	for _, name := range names {
		f.waitCopy(0, name, "labelled with revision 1", func(cm *corev1.ConfigMap) bool {
			return cm != nil && cm.Labels[fleetv1alpha1.RevisionLabel] == "1"
		})
	}
	versions := map[string]string{}
	for _, name := range names[1:] {
		versions[name] = f.copyIn(0, name).ResourceVersion
	}
	f.setData("web-0", "2")
	f.waitCopy(0, "web-0", "holds revision 2", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == "2" && cm.Labels[fleetv1alpha1.RevisionLabel] == "2"
	})
	// Runs of one member and Propagation come one at a time: once a
	// later change is labelled, the run that labelled revision 2 is over.
	f.setData("web-0", "3")
	f.waitCopy(0, "web-0", "holds revision 3", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == "3" && cm.Labels[fleetv1alpha1.RevisionLabel] == "3"
	})
	for _, name := range names[1:] {
		cm := f.copyIn(0, name)
		if cm.ResourceVersion != versions[name] {
			t.Errorf("unchanged copy %s was changed (labels %v)", name, cm.Labels)
		}
		if got := cm.Labels[fleetv1alpha1.RevisionLabel]; got != "1" {
			t.Errorf("unchanged copy %s labelled revision %q, want 1, the revision that gave it its content", name, got)
		}
	}
}
