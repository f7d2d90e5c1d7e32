package apply

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// memoCache is a member's copy cache that trusts a clean check of a
// copy while its resourceVersion and desired content hash stay, for
// left; it lists nothing.
type memoCache struct {
	left  time.Duration
	clean map[CopyID]string
}

func (c *memoCache) List(context.Context, schema.GroupVersionKind, string, labels.Selector) ([]unstructured.Unstructured, error) {
	return nil, nil
}
func (c *memoCache) WatchedIn(string) []schema.GroupVersionKind { return nil }
func (c *memoCache) Unchanged(id CopyID, live *unstructured.Unstructured, hash string) (bool, time.Duration) {
	if c.clean[id] == live.GetResourceVersion()+"/"+hash {
		return true, c.left
	}
	return false, 0
}
func (c *memoCache) CheckedClean(id CopyID, live *unstructured.Unstructured, hash string) {
	c.clean[id] = live.GetResourceVersion() + "/" + hash
}
func (c *memoCache) Write(CopyID)                             {}
func (c *memoCache) Wrote(CopyID, *unstructured.Unstructured) {}
func (c *memoCache) Forget(id CopyID)                         { delete(c.clean, id) }
func (c *memoCache) Served(schema.GroupKind)                  {}

// memoFixture is an Env with its metrics, a Propagation that reports
// drift, a hub ConfigMap, and the copy it wants in member east.
func memoFixture(t *testing.T) (env *Env, p *fleetv1alpha1.Propagation, hub, desired *unstructured.Unstructured) {
	t.Helper()
	drift := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, []string{"cluster"})
	}
	env = &Env{
		Fleet: "fleet", Recorder: events.NewFakeRecorder(10),
		ReportedDrift: func(types.NamespacedName, string) ([]string, bool) { return nil, false },
		HubObject:     func(p *fleetv1alpha1.Propagation) client.Object { return p },
		Metrics: Metrics{
			Applies:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "applies"}, []string{"cluster", "result"}),
			DriftDetected: drift("detected"), DriftCorrected: drift("corrected"),
			ApplyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "duration"}, []string{"cluster"}),
		},
	}
	p = &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}, Spec: fleetv1alpha1.PropagationSpec{Drift: fleetv1alpha1.DriftReport}}
	hub = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web", "namespace": "team", "uid": "u1"},
		"data":     map[string]any{"v": "1"},
	}}
	var err error
	if desired, err = DesiredCopy(hub, p, nil, "fleet", "id", Member{Name: "east"}); err != nil {
		t.Fatal(err)
	}
	return env, p, hub, desired
}

// TestUnchangedCopyIsNotComparedAgain: a member's copy found without
// drift is not compared again while its copy cache trusts the check
// (its resourceVersion and the desired content hash stay), and the run
// asks to run again when that trust expires; a new resourceVersion is
// compared, and its drift reported.
func TestUnchangedCopyIsNotComparedAgain(t *testing.T) {
	t.Parallel()
	env, p, hub, desired := memoFixture(t)
	live := desired.DeepCopy()
	live.SetResourceVersion("5")
	const recheck = time.Hour
	cache := &memoCache{left: recheck, clean: map[CopyID]string{}}
	k := Key{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: "web"}
	var run *Run
	drifted := func() []string {
		t.Helper()
		run = NewRun(env, Target{Name: "east", Cache: cache}, p, types.NamespacedName{Namespace: "team", Name: "web"}, "id")
		got, err := run.apply(t.Context(), k, desired, live, hub)
		if err != nil || got != live {
			t.Fatalf("apply of an unchanged copy returned %v, %v; want the member's copy as it is", got, err)
		}
		return run.Drifted
	}
	if d := drifted(); len(d) != 0 {
		t.Fatalf("an unchanged copy drifted: %v", d)
	}
	// The same version of the copy: no comparison, which would find this.
	_ = unstructured.SetNestedField(live.Object, "2", "data", "v")
	if d := drifted(); len(d) != 0 {
		t.Errorf("a copy whose version was checked clean was compared again (drift %v): want a lookup", d)
	}
	if run.Recheck <= 0 || run.Recheck > recheck {
		t.Errorf("a run that trusted a check asks to run again in %s, want within the recheck, %s", run.Recheck, recheck)
	}
	live.SetResourceVersion("6")
	if d := drifted(); len(d) != 1 {
		t.Errorf("a changed copy's drift: %v, want .data.v", d)
	}
}

// TestCopyWithoutItsRevisionLabelIsNoDrift: a copy whose content the
// member holds, applied before its revision was made (no revision
// label), is applied again with the label once it is, and that counts
// as no drift, under drift Correct.
func TestCopyWithoutItsRevisionLabelIsNoDrift(t *testing.T) {
	t.Parallel()
	env, p, hub, desired := memoFixture(t)
	p = p.DeepCopy()
	p.Spec.Drift = fleetv1alpha1.DriftCorrect
	live := desired.DeepCopy()
	live.SetResourceVersion("7")
	labelled := desired.DeepCopy()
	l := labelled.GetLabels()
	l[fleetv1alpha1.RevisionLabel] = "3"
	labelled.SetLabels(l)
	applies := 0
	member := Target{Name: "east", Cache: &memoCache{clean: map[CopyID]string{}}, Client: interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			applies++
			return nil
		},
	})}
	k := Key{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: "web"}
	run := NewRun(env, member, p, types.NamespacedName{Namespace: "team", Name: "web"}, "id")
	if _, err := run.apply(t.Context(), k, labelled, live, hub); err != nil {
		t.Fatal(err)
	}
	if applies != 1 {
		t.Errorf("a copy without its revision label: %d applies, want 1", applies)
	}
	for name, c := range map[string]prometheus.Counter{"detected": env.Metrics.DriftDetected.WithLabelValues("east"), "corrected": env.Metrics.DriftCorrected.WithLabelValues("east")} {
		if n := testutil.ToFloat64(c); n != 0 {
			t.Errorf("drift %s counted %v times for a label the copy lacked, want 0", name, n)
		}
	}
}
