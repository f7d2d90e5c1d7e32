package propagation_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// refusedRevisionLog is the line the manager logs when the hub refuses a
// revision.
const refusedRevisionLog = "The hub refused a new revision"

// TestRefusedRevisionIsLoggedOnce: a revision too large for the hub's
// store is refused; the manager logs that once, however often the
// Propagation is summed up again, and once more when its content
// changes and the hub refuses that too. Members keep getting the hub's
// content meanwhile (strategy All).
func TestRefusedRevisionIsLoggedOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	// Two ConfigMaps of 900 KB each: each fits the hub, a revision of both
	// does not (etcd takes 1.5 MiB a request).
	big := strings.Repeat("x", 900_000)
	f.configMap("web-a", map[string]string{"v": big}, map[string]string{"app": "web"})
	f.configMap("web-b", map[string]string{"v": big}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web-b", "applied", exists)
	poll.Until(t, "the refusal logged", func() bool { return f.fleet.Logs.Count(refusedRevisionLog) > 0 })

	for range 3 {
		f.reconciledAgain("web")
	}
	if n := f.fleet.Logs.Count(refusedRevisionLog); n != 1 {
		t.Errorf("the refusal of one revision is logged %d times, want once", n)
	}
	if p := f.waitStatus("web", "summed up", func(*fleetv1alpha1.Propagation) bool { return true }); p.Status.Revision != 0 {
		t.Errorf("status.revision = %d, want none made", p.Status.Revision)
	}

	hub := f.hubConfigMap("web-a")
	hub.Data = map[string]string{"v": strings.Repeat("y", 900_000)}
	if err := f.hub.Client.Update(t.Context(), hub); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the refusal of the new content logged", func() bool { return f.fleet.Logs.Count(refusedRevisionLog) == 2 })
	f.reconciledAgain("web")
	if n := f.fleet.Logs.Count(refusedRevisionLog); n != 2 {
		t.Errorf("the refusals of two contents are logged %d times, want twice", n)
	}
}

// TestRefusedRevisionFailsTheRollout: a spec edited to select content too
// large for the hub observes the new generation, but its rollout is
// Failed, reason RevisionRefused, and Ready False: never Complete at the
// revision before. Members keep what they have.
func TestRefusedRevisionFailsTheRollout(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	// Two ConfigMaps of 900 KB each, not selected yet: a revision of both
	// does not fit the hub.
	big := strings.Repeat("x", 900_000)
	f.configMap("big-a", map[string]string{"v": big}, map[string]string{"app": "big"})
	f.configMap("big-b", map[string]string{"v": big}, map[string]string{"app": "big"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive}
	})
	f.waitStatus("web", "revision 1 Complete", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Rollout != nil && p.Status.Rollout.Revision == 1 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutComplete
	})

	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "big"})})
	})
	p := f.waitStatus("web", "the refusal reported", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Rollout != nil && strings.Contains(p.Status.Rollout.Message, "the hub refused a new revision")
	})
	if r := p.Status.Rollout; r.Phase != fleetv1alpha1.RolloutFailed || r.Reason != fleetv1alpha1.ReasonRevisionRefused {
		t.Errorf("rollout %s, reason %s; want Failed, RevisionRefused", r.Phase, r.Reason)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonRevisionRefused {
		t.Errorf("Ready %+v; want False, RevisionRefused", c)
	}
	if f.copyIn(0, "web") == nil {
		t.Error("the member lost its copy of web: a refusal removed it")
	}
}
