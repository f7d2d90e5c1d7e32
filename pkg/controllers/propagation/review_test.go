package propagation_test

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestHandEditedRevisionIsNeverApplied: a revision a member
// already applied (verified once) is edited by hand, its hash label left
// as it was; a drift of the member's copy makes the member run again.
// "a revision edited by hand while members use it | its new
// resourceVersion is checked again: RevisionInvalid, nothing applied".
func TestHandEditedRevisionIsNeverApplied(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))}}
	})
	f.waitStatus("web", "revision 1 rolled out", rolledOut(1))
	f.waitCopy(0, "web", "has v 1", dataIs("v", "1"))

	rev := f.revision("web-1")
	raw := bytes.Replace(rev.Content.Raw, []byte(`"v":"1"`), []byte(`"v":"evil"`), 1)
	if bytes.Equal(raw, rev.Content.Raw) {
		t.Fatalf("revision content %s holds no \"v\":\"1\"", rev.Content.Raw)
	}
	rev.Content.Raw = raw
	if err := f.hub.Client.Update(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	cm := f.copyIn(0, "web")
	cm.Data["v"] = "drifted"
	if err := suite.MemberClients[0].Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "east Failed RevisionInvalid", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonRevisionInvalid))
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got := f.copyIn(0, "web"); got == nil || got.Data["v"] == "evil" {
			t.Fatalf("the copy of a hand-edited revision: %+v", got)
		}
	}
}

// TestRecreatedPropagationIsNeverReadyFromTheOldResults: a
// Propagation applied and Ready is deleted (its finalizer taken off by
// hand) and re-created at once under its name, with the same generation,
// selecting an object the member cannot take (a foreign object of that
// name is there). "status never says Ready when nothing happened": no
// status of the new Propagation may say Ready.
func TestRecreatedPropagationIsNeverReadyFromTheOldResults(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.configMap("blocked", map[string]string{"v": "hub"}, map[string]string{"app": "blocked"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "blocked"}, Data: map[string]string{"v": "theirs"}}
	if err := suite.MemberClients[0].Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}

	// Deleted, then its finalizer taken off by hand (taken off first, the
	// controller may put it back before the delete).
	if err := f.hub.Client.Delete(t.Context(), f.hubPropagation("web")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the old Propagation gone, its finalizer taken off by hand", func() bool {
		old := &fleetv1alpha1.Propagation{}
		err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, old)
		if apierrors.IsNotFound(err) {
			return true
		}
		if err == nil && len(old.Finalizers) > 0 {
			before := old.DeepCopy()
			old.Finalizers = nil
			_ = f.hub.Client.Patch(t.Context(), old, client.MergeFrom(before)) // a conflict is tried again
		}
		return false
	})
	p := f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "blocked"}}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, got); err != nil {
			continue
		}
		if got.UID == p.UID && got.Status.ObservedGeneration == got.Generation && ready(got) {
			t.Fatalf("the re-created Propagation (generation %d) is Ready before its member applied anything: %+v", got.Generation, got.Status)
		}
	}
	f.waitStatus("web", "east Failed AlreadyExists", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonAlreadyExists))
	if got := f.copyIn(0, "blocked"); got == nil || got.UID != foreign.UID || got.Data["v"] != "theirs" {
		t.Errorf("the member's own ConfigMap blocked was changed: %+v", got)
	}
}

// TestAddedKindNeverTakesOverOrRemovesAForeignObject: a kind added
// to a Propagation, its informer started lazily by that run, meets an
// object of that name the member made: AlreadyExists, left alone; the
// kind taken out again and its watch swept, the object stays. "a watch
// not yet started or synced must never cause a copy to be deleted or
// re-created over someone else's object".
func TestAddedKindNeverTakesOverOrRemovesAForeignObject(t *testing.T) {
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.watchSweep = 100 * time.Millisecond
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	theirs := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web", Labels: map[string]string{"owner": "member"}}}
	if err := suite.MemberClients[0].Create(t.Context(), theirs); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	untouched := func(what string) {
		t.Helper()
		got := &corev1.ServiceAccount{}
		if err := suite.MemberClients[0].Get(t.Context(), client.ObjectKeyFromObject(theirs), got); err != nil {
			t.Fatalf("%s: the member's own ServiceAccount: %v", what, err)
		}
		if got.UID != theirs.UID || got.Labels[fleetv1alpha1.FleetLabel] != "" || got.Labels[fleetv1alpha1.PropagationLabel] != "" {
			t.Fatalf("%s: the member's own ServiceAccount was taken over or re-created: %+v", what, got.ObjectMeta)
		}
	}
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "v1", Kind: "ServiceAccount", Name: "web"})
	})
	f.waitStatus("web", "east Failed AlreadyExists", listedAs("east", fleetv1alpha1.ResultFailed, fleetv1alpha1.ReasonAlreadyExists))
	untouched("the kind added")
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = p.Spec.Resources[:1]
	})
	f.waitStatus("web", "Ready again", ready)
	// Let the sweep stop the ServiceAccount watch, then ask again.
	time.Sleep(time.Second)
	f.reconciledAgain("web")
	poll.Until(t, "Ready after the sweep", func() bool { return ready(f.hubPropagation("web")) })
	untouched("the kind taken out and its watch swept")
}
