package propagation_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

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
// rolled out, as revision 3: the number of the deleted one is not given
// to other content.
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
	f.waitStatus("web", "revision 3 Ready, of the new generation", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Revision == 3 && p.Status.Rollout != nil && p.Status.Rollout.Revision == 3
	})
	f.waitCopy(0, "web", "has v 3", dataIs("v", "3"))
	if f.revision("web-2") != nil {
		t.Error("revision 2 was made again: its number names other content now")
	}
}
