package rollouttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestProgressiveRolloutTakesGroupsInOrderTwoAtATime: ten members in
// three groups, canary, eu and us, maxConcurrency 2. Each Deployment is
// available 300ms after it changes. A new image reaches no more than two
// members between revisions at once, and a group starts only once every
// member of the one before it is available.
func TestProgressiveRolloutTakesGroupsInOrderTwoAtATime(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	stages := []string{"canary", "canary", "eu", "eu", "eu", "eu", "us", "us", "us", "us"}
	group := map[string]string{}
	for i, stage := range stages {
		group[f.register(i, "m"+string(rune('0'+i)), map[string]string{"stage": stage})] = stage
	}
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			GroupBy: "stage", Groups: []string{"canary", "eu", "us"}, MaxConcurrency: ptr.To(intstr.FromInt32(2)),
		}}
	}, deploymentKind)
	f.waitRollout("of revision 1 complete", complete(1))

	f.deployment("web:2")
	p := f.waitRollout("of revision 2 complete", complete(2))
	changes := slices.DeleteFunc(f.deployments.Changes(), func(c fleettest.DeploymentChange) bool { return c.Image != "web:2" })
	if len(changes) != len(stages) {
		t.Fatalf("%d members changed to web:2, want %d:%s", len(changes), len(stages), describe(changes))
	}
	if most := maxOverlap(changes, "web:2"); most > 2 {
		t.Errorf("%d members were between revisions at once, want at most 2:%s", most, describe(changes))
	}
	for _, c := range changes {
		for _, before := range changes {
			if slices.Index([]string{"canary", "eu", "us"}, group[before.Member]) < slices.Index([]string{"canary", "eu", "us"}, group[c.Member]) && before.Available.After(c.Seen) {
				t.Errorf("%s (%s) changed before %s (%s) was available:%s", c.Member, group[c.Member], before.Member, group[before.Member], describe(changes))
			}
		}
	}
	if p.Status.Rollout.Updated != int32(len(stages)) || len(p.Status.Rollout.Members) != 1 || p.Status.Rollout.Members[0].Revision != 2 {
		t.Errorf("rollout status %+v, want every member given and running revision 2", p.Status.Rollout)
	}
	if p.Status.Revision != 2 {
		t.Errorf("status.revision %d, want 2", p.Status.Revision)
	}
}

// TestRolloutStopsAtMaxFailuresAndUndoes: revision 2 holds an image whose
// Deployment never becomes available, and a new ConfigMap. The first
// member misses its progress deadline, and the rollout stops there,
// naming it, the object and the reason, on status and in an Event; no
// other member gets revision 2. Pinning revision 1 rolls the member back:
// nothing of revision 2 remains.
func TestRolloutStopsAtMaxFailuresAndUndoes(t *testing.T) {
	f := newFleet(t, 100*time.Millisecond, "web:bad")
	members := []string{f.register(0, "a", nil), f.register(1, "b", nil), f.register(2, "c", nil)}
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.ProgressDeadlineSeconds = ptr.To[int32](3)
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive}
	}, deploymentKind, configMapKind)
	f.waitRollout("of revision 1 complete", complete(1))

	f.deployment("web:bad")
	extra := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "extra", Labels: map[string]string{"app": "web"}}}
	if err := suite.HubClient.Create(t.Context(), extra); err != nil {
		t.Fatal(err)
	}
	// The two changes may make one revision or two: the newest stops.
	p := f.waitRollout("of the newest revision stopped", func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Phase == fleetv1alpha1.RolloutStopped && r.Revision > 1 && f.get().Status.Revision == r.Revision
	})
	bad := p.Status.Rollout.Revision
	for _, want := range []string{members[0], "Deployment web", fleetv1alpha1.ReasonProgressDeadlineExceeded} {
		if !strings.Contains(p.Status.Rollout.Message, want) {
			t.Errorf("rollout message %q does not name %q", p.Status.Rollout.Message, want)
		}
	}
	if f.imageIn(members[0]) != "web:bad" {
		t.Errorf("%s runs %q, want the stopped revision's web:bad", members[0], f.imageIn(members[0]))
	}
	for _, m := range members[1:] {
		if f.imageIn(m) != "web:1" || f.hasConfigMap(m, "extra") {
			t.Errorf("%s got some of revision %d: image %q", m, bad, f.imageIn(m))
		}
	}
	poll.Until(t, "a RolloutStopped Event", func() bool {
		var events corev1.EventList
		if err := suite.HubClient.List(t.Context(), &events); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == fleetv1alpha1.ReasonRolloutStopped && e.InvolvedObject.Namespace == f.team && strings.Contains(e.Message, members[0])
		})
	})

	f.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = ptr.To[int64](1) })
	// Rolled back, but the newest is not rolled out: Pinned, not
	// Complete, and not Ready.
	p = f.waitRollout("of revision 1 pinned", func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Revision == 1 && r.Phase == fleetv1alpha1.RolloutPinned
	})
	if r := p.Status.Rollout; r.Reason != fleetv1alpha1.ReasonPinnedToOlderRevision || !strings.Contains(r.Message, fmt.Sprintf("the newest, revision %d, is not rolled out", p.Status.Revision)) {
		t.Errorf("rollout %+v; want PinnedToOlderRevision naming revision %d", r, p.Status.Revision)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonPinnedToOlderRevision {
		t.Errorf("Ready %+v; want False, PinnedToOlderRevision", c)
	}
	for _, m := range members {
		if f.imageIn(m) != "web:1" || f.hasConfigMap(m, "extra") {
			t.Errorf("%s keeps some of revision %d after the rollback: image %q", m, bad, f.imageIn(m))
		}
	}
}

// TestPausedRolloutHoldsAndJoinersGetTheirGroupsRevision: a rollout
// paused once the canary group has the new revision changes no other
// member until it is resumed; a member that joins the canary group
// meanwhile gets the new revision, one that joins prod the old one.
func TestPausedRolloutHoldsAndJoinersGetTheirGroupsRevision(t *testing.T) {
	f := newFleet(t, 200*time.Millisecond)
	canary := []string{f.register(0, "c0", map[string]string{"stage": "canary"}), f.register(1, "c1", map[string]string{"stage": "canary"})}
	prod := []string{f.register(2, "p0", map[string]string{"stage": "prod"}), f.register(3, "p1", map[string]string{"stage": "prod"})}
	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			GroupBy: "stage", Groups: []string{"canary", "prod"}, MaxConcurrency: ptr.To(intstr.FromInt32(2)),
			MinSuccessTime: &metav1.Duration{Duration: 5 * time.Second},
		}}
	}, deploymentKind)
	f.waitRollout("of revision 1 complete", complete(1))

	f.deployment("web:2")
	f.waitRollout("giving the canary group revision 2", func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Revision == 2 && assigned(r, canary[0]) == 2 && assigned(r, canary[1]) == 2
	})
	f.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Paused = true })
	f.waitRollout("paused", func(r *fleetv1alpha1.RolloutStatus) bool { return r.Phase == fleetv1alpha1.RolloutPaused })
	joinedCanary := f.register(4, "c2", map[string]string{"stage": "canary"})
	joinedProd := f.register(5, "p2", map[string]string{"stage": "prod"})
	poll.Until(t, "the joiners have copies", func() bool { return f.imageIn(joinedCanary) != "" && f.imageIn(joinedProd) != "" })
	if got := f.imageIn(joinedCanary); got != "web:2" {
		t.Errorf("the member that joined the canary group runs %q, want the group's web:2", got)
	}
	if got := f.imageIn(joinedProd); got != "web:1" {
		t.Errorf("the member that joined the prod group runs %q, want the group's web:1", got)
	}
	// Unpaused, prod would start once the canary group has been Available
	// for minSuccessTime: past that, the rollout is planned again.
	poll.Until(t, "the canary group Available for minSuccessTime", func() bool {
		past := map[string]bool{}
		for _, c := range f.deployments.Changes() {
			if c.Image == "web:2" && !c.Available.IsZero() && time.Since(c.Available) > 5*time.Second {
				past[c.Member] = true
			}
		}
		return past[canary[0]] && past[canary[1]] && past[joinedCanary]
	})
	f.reconciledAgain()
	for _, m := range append(prod, joinedProd) {
		if r := f.get().Status.Rollout; assigned(r, m) != 1 {
			t.Errorf("%s is given revision %d while the rollout is paused, want 1", m, assigned(r, m))
		}
		if got := f.imageIn(m); got != "web:1" {
			t.Errorf("%s runs %q while the rollout is paused, want web:1", m, got)
		}
	}

	f.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Paused = false })
	f.waitRollout("of revision 2 complete", complete(2))
	for _, m := range append(append(canary, prod...), joinedCanary, joinedProd) {
		if got := f.imageIn(m); got != "web:2" {
			t.Errorf("%s runs %q once the rollout completed, want web:2", m, got)
		}
	}
}
