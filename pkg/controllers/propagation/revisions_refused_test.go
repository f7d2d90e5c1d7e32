package propagation_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// TestForbiddenRevisionHoldsNothingUpAndRemovesNothing: under
// strategy All, once the hub forbids the manager to make revisions (a
// quota exceeded, RBAC taken away: Forbidden, which is not a refusal the
// manager remembers), every member still gets each change of content at
// once, the copy of an unchanged object stays, the revision made before
// stays, and Ready is not said of content no revision holds. It fails
// if a member run waited for the revision, or a failed revision removed
// or pruned anything.
func TestForbiddenRevisionHoldsNothingUpAndRemovesNothing(t *testing.T) {
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	var forbid atomic.Bool
	var attempts atomic.Int32
	f.client = func(mgr *fleet.Manager) (client.Client, error) {
		cached, err := cachedHubClient(mgr)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(cached, interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*fleetv1alpha1.PropagationRevision); ok && forbid.Load() {
					attempts.Add(1)
					return apierrors.NewForbidden(fleetv1alpha1.GroupVersion.WithResource("propagationrevisions").GroupResource(), obj.GetName(),
						fmt.Errorf("exceeded quota: revisions, requested: count/propagationrevisions.fleet.fleetkube.io=1"))
				}
				return cl.Create(ctx, obj, opts...)
			},
		}), nil
	}
	f.start(nil)
	for i := range memberCount {
		f.register(i, fmt.Sprintf("m%d", i), map[string]string{"env": "prod"})
	}
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.configMap("keep", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	first := f.waitStatus("web", "Ready at its first revision", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Revision > 0 })
	for i := range memberCount {
		f.waitCopy(i, "web", "labelled with the first revision", labelledRevision("0", strconv.FormatInt(first.Status.Revision, 10)))
	}

	forbid.Store(true)
	for _, v := range []string{"1", "2", "3"} {
		f.setData("web", v)
		for i := range memberCount {
			f.waitCopy(i, "web", "given "+v+" although no revision may be made", dataIs("v", v))
		}
	}
	poll.Until(t, "the hub was asked for a revision", func() bool { return attempts.Load() > 0 })
	for i := range memberCount {
		if cm := f.copyIn(i, "keep"); cm == nil || cm.Data["v"] != "0" {
			t.Errorf("member m%d: the copy of the unchanged object is %v, want kept", i, cm)
		}
	}
	revs := &fleetv1alpha1.PropagationRevisionList{}
	if err := f.hub.Client.List(t.Context(), revs); err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, rev := range revs.Items {
		kept = kept || rev.Revision == first.Status.Revision && rev.Labels[fleetv1alpha1.PropagationLabel] == "web"
	}
	if !kept {
		t.Errorf("revision %d, which members were given, is gone after revisions were forbidden", first.Status.Revision)
	}
	// Members hold v=3, which the first revision does not: Ready at it
	// would be a lie. The status sums run every StatusInterval; a minute
	// is theirs to stop saying it.
	p := &fleetv1alpha1.Propagation{}
	stillReady := func() bool {
		if err := f.hub.Client.Get(t.Context(), client.ObjectKey{Namespace: f.team, Name: "web"}, p); err != nil {
			t.Fatal(err)
		}
		return ready(p) && p.Status.Revision == first.Status.Revision
	}
	deadline := time.Now().Add(poll.Timeout)
	for stillReady() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if stillReady() {
		t.Errorf("a minute after the members took v=3, status still says Ready at revision %d, whose content they no longer hold; conditions: %+v; rollout: %+v",
			p.Status.Revision, p.Status.Conditions, p.Status.Rollout)
	}
	t.Logf("%d revision creations forbidden for 3 changes and %d members", attempts.Load(), memberCount)
}

// TestBurstUnderATightHistoryLimitLeavesEveryCopyOnALiveRevision:
// strategy All, revisionHistoryLimit 1 (the least kept), and a burst of
// ten changes of one object, faster than the member runs' revision pace:
// member runs make some revisions, the status sums others, and pruning
// deletes all but the newest. Once Ready, every member's copy holds the
// last content and is labelled with the revision status names, and that
// revision exists on the hub. It fails if a copy is left unlabelled, or
// names a revision pruned or of other content.
func TestBurstUnderATightHistoryLimitLeavesEveryCopyOnALiveRevision(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for i := range memberCount {
		f.register(i, fmt.Sprintf("m%d", i), map[string]string{"env": "prod"})
	}
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	limit := int32(1)
	f.propagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.RevisionHistoryLimit = &limit })
	f.waitStatus("web", "Ready", ready)
	for i := 1; i <= 10; i++ {
		f.setData("web", strconv.Itoa(i))
	}
	// Ready at the revision every copy of the last content is labelled
	// with: it fails (not within a minute) if a copy stays unlabelled or
	// the labels and status never agree.
	p := f.waitStatus("web", "Ready at the revision the copies of the burst's last content carry", func(p *fleetv1alpha1.Propagation) bool {
		if !ready(p) || p.Status.Revision < 2 {
			return false
		}
		for i := range memberCount {
			cm := f.copyIn(i, "web")
			if cm == nil || cm.Data["v"] != "10" || cm.Labels[fleetv1alpha1.RevisionLabel] != strconv.FormatInt(p.Status.Revision, 10) {
				return false
			}
		}
		return true
	})
	revs := &fleetv1alpha1.PropagationRevisionList{}
	if err := f.hub.Client.List(t.Context(), revs, client.InNamespace(f.team)); err != nil {
		t.Fatal(err)
	}
	var numbers []int64
	live := false
	for _, rev := range revs.Items {
		if rev.Labels[fleetv1alpha1.PropagationLabel] == "web" {
			numbers = append(numbers, rev.Revision)
			live = live || rev.Revision == p.Status.Revision
		}
	}
	if !live || slices.Max(numbers) != p.Status.Revision {
		t.Errorf("status is Ready at revision %d, which the hub no longer holds (revisions there: %v)", p.Status.Revision, numbers)
	}
	t.Logf("ten changes made revisions up to %d; kept %v", p.Status.Revision, numbers)
}
