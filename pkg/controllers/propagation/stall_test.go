package propagation_test

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// revision returns the team's PropagationRevision name, or nil.
func (f *testFleet) revision(name string) *fleetv1alpha1.PropagationRevision {
	f.t.Helper()
	rev := &fleetv1alpha1.PropagationRevision{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, rev); err != nil {
		return nil
	}
	return rev
}

// TestDeletingTheNewestRevisionDoesNotFreezeTheStatus: the newest
// revision deleted by hand (as docs/trust.md tells for one holding a
// leaked Secret), the next change of spec and content is summed up and
// rolled out, as revision 3, or 4 when a run saw the content changed
// before the spec: the number of the deleted one is not given to other
// content.
func TestDeletingTheNewestRevisionDoesNotFreezeTheStatus(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "revision 1 Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Revision == 1 })
	f.setData("web", "2")
	f.waitStatus("web", "revision 2 Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Revision == 2 })

	if err := f.hub.Client.Delete(t.Context(), f.revision("web-2")); err != nil {
		t.Fatal(err)
	}
	f.setData("web", "3")
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = true })
	f.waitStatus("web", "revision 3 or later Ready, of the new generation", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Revision >= 3 && p.Status.Rollout != nil && p.Status.Rollout.Revision == p.Status.Revision
	})
	f.waitCopy(0, "web", "has v 3", dataIs("v", "3"))
	if f.revision("web-2") != nil {
		t.Error("revision 2 was made again: its number names other content now")
	}
}

// TestMemberWhoseRevisionCannotBeLoadedFails: a Progressive rollout back
// to a revision changed after it was made gives it to one member, which
// cannot load it: that member fails, RevisionInvalid, and the rollout
// stops at maxFailures 1 instead of counting it in flight for ever.
func TestMemberWhoseRevisionCannotBeLoadedFails(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))}}
	})
	f.waitStatus("web", "revision 1 rolled out", rolledOut(1))
	f.setData("web", "2")
	f.waitStatus("web", "revision 2 rolled out", rolledOut(2))

	rev := f.revision("web-1")
	rev.Labels[fleetv1alpha1.RevisionHashLabel] = "0123456789abcdef"
	if err := f.hub.Client.Update(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = ptr.To[int64](1) })
	p := f.waitStatus("web", "the rollout of revision 1 stopped", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Rollout != nil && p.Status.Rollout.Revision == 1 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutStopped
	})
	if r := p.Status.Rollout; r.Failed != 1 || !strings.Contains(r.Message, "RevisionInvalid") {
		t.Errorf("rollout %+v, want 1 failed member, RevisionInvalid", r)
	}
	if p.Status.Failed != 1 {
		t.Errorf("%d members failed, want 1: %+v", p.Status.Failed, p.Status.Members)
	}
}

// rolledOut is a condition on a Propagation: its rollout of revision n
// is Complete.
func rolledOut(n int64) func(p *fleetv1alpha1.Propagation) bool {
	return func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Rollout != nil && p.Status.Rollout.Revision == n && p.Status.Rollout.Phase == fleetv1alpha1.RolloutComplete
	}
}

// TestSpecTheMemberSchemaRejectsFails: a copy with a field its kind does
// not declare, by an override or in an Envelope's manifest, fails the
// member, Invalid, naming the copy, where server-side apply answers 500;
// the failure is retried with back-off, not as a reconcile error.
func TestSpecTheMemberSchemaRejectsFails(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "unknown-field",
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"spec":{"replicas":2}}`)},
		}}
	})
	f.envelope("app", map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "enveloped"}, "spec": map[string]any{"x": "y"}})
	f.propagation("app", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"}}
	})
	for _, name := range []string{"web", "app"} {
		f.waitStatus(name, "east Failed, Invalid", func(p *fleetv1alpha1.Propagation) bool {
			e, ok := entry(p, "east")
			return ok && e.Result == fleetv1alpha1.ResultFailed && e.Reason == fleetv1alpha1.ReasonInvalid && strings.Contains(e.Message, "does not declare")
		})
	}
	for _, line := range f.fleet.Logs.Lines() {
		if strings.Contains(line, "Reconciler error") {
			t.Errorf("a rejected copy is a reconcile error: %s", line)
		}
	}
}

// TestEnvelopeWithTwoManifestsOfOneNameIsInvalid: an Envelope's second
// manifest of a kind and name fails the member, Invalid, naming both;
// the first is applied.
func TestEnvelopeWithTwoManifestsOfOneNameIsInvalid(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	cm := func(v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "dup"}, "data": map[string]any{"v": v}}
	}
	f.envelope("app", cm("1"), cm("2"))
	f.propagation("app", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"}}
	})
	p := f.waitStatus("app", "east Failed, Invalid", func(p *fleetv1alpha1.Propagation) bool {
		return listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonInvalid)(p)
	})
	if e, _ := entry(p, "east"); !strings.Contains(e.Message, "manifest 1 (ConfigMap dup) of Envelope app has the kind and name of manifest 0") {
		t.Errorf("east's entry %+v, want it to name both manifests", e)
	}
	if ready(p) {
		t.Error("Ready with an Envelope that is Invalid")
	}
	f.waitCopy(0, "dup", "has the first manifest's v 1", dataIs("v", "1"))
}
