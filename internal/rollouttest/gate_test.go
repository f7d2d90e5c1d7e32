package rollouttest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// neverAvailableIn is an override that gives member's copy of Deployment
// web the image web:never, which the stand-in Deployment controller
// never marks Available.
func neverAvailableIn(member string) fleetv1alpha1.Override {
	return fleetv1alpha1.Override{
		Name:    "never-available",
		Members: fleetv1alpha1.MemberSelector{Names: []string{member}},
		Target:  fleetv1alpha1.OverrideTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		JSONPatch: []fleetv1alpha1.JSONPatchOperation{{
			Op: "replace", Path: "/spec/template/spec/containers/0/image", Value: &apiextensionsv1.JSON{Raw: []byte(`"web:never"`)},
		}},
	}
}

// TestAllRolloutWithFailedMembersEndsFailed: under All, once every member
// either runs the revision or failed, the rollout is Failed, naming the
// failed member and why, not Progressing for ever.
func TestAllRolloutWithFailedMembersEndsFailed(t *testing.T) {
	f := newFleet(t, 0, "web:never")
	ok, failing := f.register(0, "ok", nil), f.register(1, "failing", nil)
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.ProgressDeadlineSeconds = ptr.To[int32](2)
		p.Spec.Overrides = []fleetv1alpha1.Override{neverAvailableIn(failing)}
	}, deploymentKind)
	p := f.waitRollout("of revision 1 Failed", func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Revision == 1 && r.Phase == fleetv1alpha1.RolloutFailed
	})
	r := p.Status.Rollout
	if r.Reason != fleetv1alpha1.ReasonMembersFailed || r.Updated != 1 || r.Failed != 1 {
		t.Errorf("rollout %+v; want reason MembersFailed, 1 updated, 1 failed", r)
	}
	for _, want := range []string{failing, fleetv1alpha1.ReasonProgressDeadlineExceeded, "Deployment web"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("rollout message %q does not name %q", r.Message, want)
		}
	}
	if strings.Contains(r.Message, ok) {
		t.Errorf("rollout message %q names %s, which runs the revision", r.Message, ok)
	}
}

// TestDrainNamesTheMemberThatUsesTheBudget: a drain that waits because
// another member's never-Available copy uses up the disruption budget
// names that member, with its reason, and the Propagation, on the
// MemberCluster (status.drain and the Drained condition), as kubectl
// drain names the PodDisruptionBudget and the pod.
func TestDrainNamesTheMemberThatUsesTheBudget(t *testing.T) {
	f := newFleet(t, 0, "web:never")
	drained, stuck := f.register(0, "drained", nil), f.register(1, "stuck", nil)
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = []fleetv1alpha1.Override{neverAvailableIn(stuck)}
	}, deploymentKind)
	f.waitRollout("of revision 1 given to both, "+stuck+" not Available", func(r *fleetv1alpha1.RolloutStatus) bool {
		p := f.get()
		return assigned(r, drained) == 1 && assigned(r, stuck) == 1 && p.Status.Available == 1 && p.Status.Applied == 2
	})

	f.maintain(drained, fleetv1alpha1.MaintenanceDrain)
	want := "waiting for the disruption budget of Propagation " + f.team + "/web: maxUnavailable 1; " + stuck + " is not available (NotAvailable)"
	mc := suite.WaitMemberCluster(t, drained, "its drain naming "+stuck, func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.Drain != nil && mc.Status.Drain.Message == want
	})
	c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionDrained)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, stuck) {
		t.Errorf("Drained condition %+v; want False, naming %s", c, stuck)
	}
	if f.imageIn(drained) != "web:1" {
		t.Errorf("%s lost its copy while the budget is used up", drained)
	}
}

// TestStatusSaysWhatWasSelected: an entry of resources naming a hub
// object that does not exist, or whose selector matches none, is
// ResourcesSelected False, naming the entry, and the Propagation is not
// Ready; the other entries' objects are still copied, and
// status.selectedResources lists them. An object created later is
// selected; one deleted from the hub loses its copies, as one that stops
// matching does.
func TestStatusSaysWhatWasSelected(t *testing.T) {
	f := newFleet(t, 0)
	member := f.register(0, "a", nil)
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ConfigMap", Name: "setings"})
	}, deploymentKind)

	selected := func(what string, cond func(p *fleetv1alpha1.Propagation, c *metav1.Condition) bool) *fleetv1alpha1.Propagation {
		t.Helper()
		var p *fleetv1alpha1.Propagation
		poll.Until(t, what, func() bool {
			p = f.get()
			c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationResourcesSelected)
			return p.Status.ObservedGeneration == p.Generation && c != nil && c.ObservedGeneration == p.Generation && cond(p, c)
		})
		return p
	}
	p := selected("ResourcesSelected False, the Deployment copied", func(p *fleetv1alpha1.Propagation, c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && p.Status.Applied == 1
	})
	c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationResourcesSelected)
	if c.Reason != fleetv1alpha1.ReasonResourceNotFound || !strings.Contains(c.Message, "resources[1]: v1 ConfigMap setings is not on the hub") {
		t.Errorf("ResourcesSelected %+v; want ResourceNotFound naming resources[1]", c)
	}
	ready := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != fleetv1alpha1.ReasonResourceNotFound {
		t.Errorf("Ready %+v; want False, ResourceNotFound", ready)
	}
	want := []fleetv1alpha1.ResourceIdentifier{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}
	if p.Status.SelectedResourceCount != 1 || !equalIdentifiers(p.Status.SelectedResources, want) {
		t.Errorf("selected %d: %+v; want 1: %+v", p.Status.SelectedResourceCount, p.Status.SelectedResources, want)
	}
	if f.imageIn(member) != "web:1" {
		t.Errorf("%s holds no copy of the Deployment: the entry that selects nothing held the others", member)
	}

	setings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "setings"}, Data: map[string]string{"v": "1"}}
	if err := suite.HubClient.Create(t.Context(), setings); err != nil {
		t.Fatal(err)
	}
	p = selected("ResourcesSelected True, Ready", func(p *fleetv1alpha1.Propagation, c *metav1.Condition) bool {
		return c.Status == metav1.ConditionTrue && meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	})
	if p.Status.SelectedResourceCount != 2 {
		t.Errorf("%d hub objects selected, want 2", p.Status.SelectedResourceCount)
	}
	poll.Until(t, "the ConfigMap copied", func() bool { return f.hasConfigMap(member, "setings") })

	// Deleted from the hub, the object is no longer selected: its copy
	// goes, as the copy of one that stops matching.
	if err := suite.HubClient.Delete(t.Context(), setings); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ConfigMap's copy removed", func() bool { return !f.hasConfigMap(member, "setings") })

	f.edit(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources[1] = fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "none"})}
	})
	p = selected("NothingSelected", func(_ *fleetv1alpha1.Propagation, c *metav1.Condition) bool {
		return c.Reason == fleetv1alpha1.ReasonNothingSelected
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationResourcesSelected); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `resources[1]: the selector "app=none" matches no v1 ConfigMap`) {
		t.Errorf("ResourcesSelected %+v; want False, naming resources[1] and its selector", c)
	}
	if meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady) {
		t.Error("Ready True with an entry that selects nothing")
	}
}

func equalIdentifiers(a, b []fleetv1alpha1.ResourceIdentifier) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestNoMemberIsNeverComplete: a Propagation whose members selector
// matches no member is not Ready, and its rollout is not Complete:
// nothing was rolled out.
func TestNoMemberIsNeverComplete(t *testing.T) {
	f := newFleet(t, 0)
	f.register(0, "a", map[string]string{"env": "dev"})
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Members.Selector.MatchLabels["env"] = "prod"
	}, deploymentKind)
	p := f.waitRollout("of revision 1 to no member", func(r *fleetv1alpha1.RolloutStatus) bool { return r.Revision == 1 })
	r := p.Status.Rollout
	if r.Phase == fleetv1alpha1.RolloutComplete || r.Reason != fleetv1alpha1.ReasonNoMembersSelected {
		t.Errorf("rollout %+v; want Progressing, NoMembersSelected", r)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Reason != fleetv1alpha1.ReasonNoMembersSelected {
		t.Errorf("Ready %+v; want False, NoMembersSelected", c)
	}
}
