package rollouttest

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// revisionsIn returns the revision label of each of the team's
// ConfigMap copies in member, by name.
func (f *testFleet) revisionsIn(member string) map[string]string {
	f.t.Helper()
	var list corev1.ConfigMapList
	if err := suite.MemberClients[f.members[member]].List(f.t.Context(), &list, client.InNamespace(f.team), client.HasLabels{fleetv1alpha1.PropagationLabel}); err != nil {
		f.t.Fatal(err)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Labels[fleetv1alpha1.RevisionLabel]
	}
	return got
}

// waitRevisionLabels waits until the copies in members carry the
// revisions of want, by name.
func (f *testFleet) waitRevisionLabels(members []string, want map[string]string) {
	f.t.Helper()
	var got map[string]string
	defer func() {
		if f.t.Failed() {
			f.t.Logf("revision labels: %v", got)
		}
	}()
	poll.Until(f.t, fmt.Sprintf("copies labelled with revisions %v", want), func() bool {
		for _, m := range members {
			if got = f.revisionsIn(m); !maps.Equal(got, want) {
				return false
			}
		}
		return true
	})
}

// TestCopiesCarryTheirRevision: each copy is labelled with the revision
// that gave it its content, under Progressive as the rollout gives it and
// under All once the hub's content has its revision; a copy a revision
// leaves unchanged keeps its label (it is not written again), and the
// label is no drift.
func TestCopiesCarryTheirRevision(t *testing.T) {
	f := newFleet(t, 0)
	members := []string{f.register(0, "a", nil), f.register(1, "b", nil)}
	f.configMap("web-a", "1")
	f.configMap("web-b", "1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive,
			Progressive: &fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))}}
	}, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))
	f.waitRevisionLabels(members, map[string]string{"web-a": "1", "web-b": "1"})

	f.configMap("web-a", "2")
	f.waitRollout("of revision 2 complete", complete(2))
	f.waitRevisionLabels(members, map[string]string{"web-a": "2", "web-b": "1"})
	if p := f.get(); p.Status.Drifted != 0 {
		t.Errorf("%d members drifted, want none: the label is no drift", p.Status.Drifted)
	}

	f.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{} })
	f.configMap("web-b", "3")
	f.waitRollout("of revision 3 complete", complete(3))
	f.waitRevisionLabels(members, map[string]string{"web-a": "2", "web-b": "3"})
	for _, m := range members {
		if got := f.valueIn(m, "web-b"); got != "3" {
			t.Errorf("member %s: web-b holds %q, want 3", m, got)
		}
	}
	if p := f.get(); p.Status.Drifted != 0 {
		t.Errorf("%d members drifted, want none", p.Status.Drifted)
	}
}
