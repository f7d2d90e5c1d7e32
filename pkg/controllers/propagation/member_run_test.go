package propagation_test

// The cheaper member run (a copy keeps its revision label, copies no
// override changes are shared, the drift memo, copies listed without deep
// copies, own writes asking for no run), attacked by an outside review:
// each test holds one of the promises docs/rollouts.md and docs/design.md
// make of it, against real API servers.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// editCopyIn applies edit to member i's ConfigMap name, as a script of
// field manager "intruder" would (a plain update: drift).
func (f *testFleet) editCopyIn(i int, name string, edit func(cm *corev1.ConfigMap)) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := f.copyIn(i, name)
		if cm == nil {
			return fmt.Errorf("member %d holds no ConfigMap %s", i, name)
		}
		edit(cm)
		return suite.MemberClients[i].Update(f.t.Context(), cm, client.FieldOwner("intruder"))
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// labelledRevision says a copy holds data v and revision label rev.
func labelledRevision(v, rev string) func(cm *corev1.ConfigMap) bool {
	return func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == v && cm.Labels[fleetv1alpha1.RevisionLabel] == rev
	}
}

// labelledIn lists the names of member i's ConfigMaps of the team
// namespace labelled with revision rev, as `kubectl get -l` would.
func (f *testFleet) labelledIn(i int, rev string) []string {
	f.t.Helper()
	list := &corev1.ConfigMapList{}
	if err := suite.MemberClients[i].List(f.t.Context(), list, client.InNamespace(f.team), client.MatchingLabels{fleetv1alpha1.RevisionLabel: rev}); err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	slices.Sort(names)
	return names
}

// teamWrites are the controller's writes to member i in the team
// namespace since: those of this test's fleet alone.
func (f *testFleet) teamWrites(i int, since time.Time) []string {
	f.t.Helper()
	var writes []string
	for _, w := range memberWrites(f.t, i, since) {
		if w.Namespace == f.team {
			writes = append(writes, w.String())
		}
	}
	return writes
}

// TestDriftByAnotherFieldManagerIsCorrectedEachTime: a copy checked clean
// (its version memoised) and then changed by another field manager's
// update is compared again and corrected, again and again.
func TestDriftByAnotherFieldManagerIsCorrectedEachTime(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "labelled with revision 1", labelledRevision("1", "1"))
	f.reconciledAgain("web") // a clean check, memoised
	for _, v := range []string{"red", "green", "red"} {
		f.editCopyIn(0, "web", func(cm *corev1.ConfigMap) { cm.Data["v"] = v })
		f.waitCopy(0, "web", "corrected after intruder wrote "+v, dataIs("v", "1"))
		f.reconciledAgain("web")
	}
}

// TestDriftWhileStoppedIsCorrectedAfterRestart: drift made while
// the manager is stopped (an edit, a deletion) is found by the restarted
// manager, whose memo is empty.
func TestDriftWhileStoppedIsCorrectedAfterRestart(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web-a", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.configMap("web-b", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web-a", "labelled", labelledRevision("1", "1"))
	f.waitCopy(0, "web-b", "labelled", labelledRevision("1", "1"))
	f.reconciledAgain("web")

	f.stop()
	f.editCopyIn(0, "web-a", func(cm *corev1.ConfigMap) { cm.Data["v"] = "edited while stopped" })
	if err := suite.MemberClients[0].Delete(t.Context(), f.copyIn(0, "web-b")); err != nil {
		t.Fatal(err)
	}
	f.start(nil)
	poll.Until(t, "the restarted manager engaged east", func() bool { return len(f.mgr.ClusterNames()) == 1 })
	f.waitCopy(0, "web-a", "corrected after the restart", dataIs("v", "1"))
	f.waitCopy(0, "web-b", "created again after the restart", labelledRevision("1", "1"))
}

// TestCopyChangedRightAfterOwnWriteIsCorrected: a copy edited, or deleted, at
// once after the manager's own write of it (before or after its watch
// event came) is corrected or created again: the own-write filter
// swallows neither.
func TestCopyChangedRightAfterOwnWriteIsCorrected(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "labelled", labelledRevision("0", "1"))
	for round := 1; round <= 6; round++ {
		v := fmt.Sprint(round)
		f.setData("web", v)
		// The manager's apply (no label yet under All), then its label.
		var seen *corev1.ConfigMap
		poll.Until(t, "the manager wrote "+v, func() bool { seen = f.copyIn(0, "web"); return seen != nil && seen.Data["v"] == v })
		if round%2 == 0 {
			err := suite.MemberClients[0].Delete(t.Context(), seen)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			f.waitCopy(0, "web", "created again after its deletion right after the write of "+v, dataIs("v", v))
		} else {
			seen.Data["v"] = "hand"
			if err := suite.MemberClients[0].Update(t.Context(), seen, client.FieldOwner("intruder")); err != nil && !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
			f.waitCopy(0, "web", "corrected after an edit right after the write of "+v, dataIs("v", v))
		}
		f.waitCopy(0, "web", "labelled with its revision", func(cm *corev1.ConfigMap) bool {
			return cm != nil && cm.Data["v"] == v && cm.Labels[fleetv1alpha1.RevisionLabel] != ""
		})
		// And still, a moment later, as the manager left it.
		time.Sleep(500 * time.Millisecond)
		if cm := f.copyIn(0, "web"); cm == nil || cm.Data["v"] != v {
			t.Fatalf("round %d: the copy is %v, want v=%s", round, cm, v)
		}
	}
}

// TestOverrideOfAMemberLabelNeverLeaks: a rule selecting members by
// a label, substituting another: a member that starts or stops matching,
// or whose label changes, gets its own values, and a copy no rule
// changes (shared) carries none of them, in either member.
func TestOverrideOfAMemberLabelNeverLeaks(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod", "region": "eu", "tier": "gold"})
	f.register(1, "west", map[string]string{"env": "prod", "region": "us"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.configMap("plain", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "gold-region",
			Members:    fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"tier": "gold"})},
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"region":"${MEMBER_LABEL:region}","member":"${MEMBER_NAME}"}}`)},
		}}
	})
	region := func(want string) func(cm *corev1.ConfigMap) bool {
		return func(cm *corev1.ConfigMap) bool {
			if cm == nil {
				return false
			}
			got, ok := cm.Data["region"]
			if want == "" {
				return !ok && cm.Data["member"] == ""
			}
			return got == want
		}
	}
	check := func(stage, east, west string) {
		t.Helper()
		f.waitCopy(0, "web", stage+": east's region "+east, region(east))
		f.waitCopy(1, "web", stage+": west's region "+west, region(west))
		for i, name := range []string{"east", "west"} {
			if m := f.copyIn(i, "web").Data["member"]; m != "" && m != name {
				t.Errorf("%s: %s's copy names member %q", stage, name, m)
			}
			if cm := f.copyIn(i, "plain"); cm == nil || len(cm.Data) != 1 {
				t.Errorf("%s: %s's copy of plain, which no rule changes, is %v", stage, name, cm)
			}
		}
	}
	check("first", "eu", "")
	f.relabel("west", map[string]string{"env": "prod", "region": "us", "tier": "gold"})
	check("west made gold", "eu", "us")
	f.relabel("east", map[string]string{"env": "prod", "region": "apac", "tier": "gold"})
	check("east moved to apac", "apac", "us")
	f.relabel("east", map[string]string{"env": "prod", "region": "apac"})
	check("east no longer gold", "", "us")
	// A hub change (a new content, the shared copies built again) after
	// the relabels.
	f.setData("plain", "2")
	f.waitCopy(0, "plain", "changed", dataIs("v", "2"))
	f.waitCopy(1, "plain", "changed", dataIs("v", "2"))
	check("after a hub change", "", "us")
}

// TestAdoptLeavesAnotherPropagationsCopy: a second Propagation of the
// fleet that copies, with adopt, the object the first one copies does not
// take the copy over (AlreadyExists naming the first): adopt is for
// objects the member made. A copy moved to it by hand (its Propagation
// label changed) tells the first at once, which then reports
// AlreadyExists naming the second instead of claiming the copy; the copy's
// drift is corrected by its owner alone, without a fight.
func TestAdoptLeavesAnotherPropagationsCopy(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "labelled", labelledRevision("1", "1"))
	f.waitStatus("web", "Ready", ready)
	f.reconciledAgain("web")
	rv := f.copyIn(0, "web").ResourceVersion
	f.propagation("other", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Adopt = true
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "web"}}
	})
	alreadyExists := func(owner string) func(p *fleetv1alpha1.Propagation) bool {
		return func(p *fleetv1alpha1.Propagation) bool {
			e, _ := entry(p, "east")
			return e.Result == fleetv1alpha1.ResultFailed && e.Reason == fleetv1alpha1.ReasonAlreadyExists &&
				strings.Contains(e.Message, "Propagation "+owner+"'s copy") && e.ObservedGeneration == p.Generation
		}
	}
	f.waitStatus("other", "east AlreadyExists, naming Propagation web", alreadyExists("web"))
	if cm := f.copyIn(0, "web"); cm.ResourceVersion != rv || cm.Labels[fleetv1alpha1.PropagationLabel] != "web" {
		t.Errorf("adopt wrote Propagation web's copy (labels %v): it lent web's copy to other", cm.Labels)
	}
	if p := f.hubPropagation("web"); !ready(p) || p.Status.Applied != 1 {
		t.Errorf("Propagation web, whose copy was left alone, reports applied %d, Ready %v", p.Status.Applied, ready(p))
	}

	// A member admin moves the copy to other: web is told by the event.
	f.editCopyIn(0, "web", func(cm *corev1.ConfigMap) { cm.Labels[fleetv1alpha1.PropagationLabel] = "other" })
	p := &fleetv1alpha1.Propagation{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
			t.Fatal(err)
		}
		if alreadyExists("other")(p) && p.Status.Applied == 0 && !ready(p) {
			break
		}
		if time.Now().After(deadline) {
			e, _ := entry(p, "east")
			t.Fatalf("30 s after its copy became Propagation other's, Propagation web reports east %s (%s: %s), applied %d, Ready %v: the event told web nothing",
				e.Result, e.Reason, e.Message, p.Status.Applied, ready(p))
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.waitStatus("other", "Ready, its copy now", ready)
	// No fight: each handles a change of its own, and the copy stays other's.
	rv = f.copyIn(0, "web").ResourceVersion
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = !p.Spec.Adopt })
	f.waitStatus("web", "the new generation reported", alreadyExists("other"))
	f.reconciledAgain("other")
	if cm := f.copyIn(0, "web"); cm.ResourceVersion != rv || cm.Labels[fleetv1alpha1.PropagationLabel] != "other" {
		t.Errorf("the copy changed again after it moved (labels %v): the Propagations fight over it", cm.Labels)
	}
	// Drift of the copy is corrected by other.
	f.editCopyIn(0, "web", func(cm *corev1.ConfigMap) { cm.Data["v"] = "hand" })
	f.waitCopy(0, "web", "corrected by other", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == "1" && cm.Labels[fleetv1alpha1.PropagationLabel] == "other"
	})
}

// TestWritePathsLeaveTheCopyCacheAlone runs the write paths that
// start from a listed (not deep-copied) copy: an adoption mark, a label
// patch of a drifted copy under Report, an orphaning, while the copies
// change under the informers. Run it with -race.
func TestWritePathsLeaveTheCopyCacheAlone(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	fleettest.CreateNamespace(t, suite.MemberClients[0], f.team)
	made := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "made"}, Data: map[string]string{"v": "member"}}
	if err := suite.MemberClients[0].Create(t.Context(), made); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"made", "web-a", "web-b", "web-c"} {
		f.configMap(name, map[string]string{"v": "1"}, map[string]string{"app": "web"})
	}
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Adopt = true
		p.Spec.Drift = fleetv1alpha1.DriftReport
		p.Spec.Deletion = fleetv1alpha1.DeletionOrphan
	})
	for _, name := range []string{"made", "web-a", "web-b", "web-c"} {
		f.waitCopy(0, name, "labelled", labelledRevision("1", "1"))
	}
	if cm := f.copyIn(0, "made"); cm.Annotations[fleetv1alpha1.AdoptedAnnotation] != "true" {
		t.Errorf("the adopted ConfigMap is not marked adopted: %v", cm.Annotations)
	}
	// Churn under the informers, while runs read the cache.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cm := f.copyIn(0, "web-c")
			if cm == nil {
				return
			}
			cm.Data["added"] = fmt.Sprint(i) // not the manager's: no drift
			_ = suite.MemberClients[0].Update(t.Context(), cm, client.FieldOwner("churn"))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// A drifted copy whose label was removed: labelled by a patch alone.
	f.editCopyIn(0, "web-a", func(cm *corev1.ConfigMap) {
		cm.Data["v"] = "drifted"
		delete(cm.Labels, fleetv1alpha1.RevisionLabel)
	})
	f.waitCopy(0, "web-a", "labelled again, its drift kept", labelledRevision("drifted", "1"))
	f.setData("web-b", "2")
	f.waitCopy(0, "web-b", "changed", dataIs("v", "2"))
	p := &fleetv1alpha1.Propagation{}
	p.Namespace, p.Name = f.team, "web"
	if err := f.hub.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"made", "web-a", "web-b"} {
		f.waitCopy(0, name, "orphaned", func(cm *corev1.ConfigMap) bool {
			return cm != nil && cm.Labels[fleetv1alpha1.PropagationLabel] == "" && cm.Labels[fleetv1alpha1.RevisionLabel] == ""
		})
	}
	close(stop)
	wg.Wait()
}

// TestCopyKeepsTheRevisionThatChangedItUnderAPin: under Progressive, a
// copy carries the revision that gave it its content; pinned back to
// revision 1 (rollout undo), a copy put back to revision 1's content
// says revision 1, and unpinned, the newest.
func TestCopyKeepsTheRevisionThatChangedItUnderAPin(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("a", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.configMap("b", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: time.Second},
		}}
	})
	f.waitCopy(0, "a", "revision 1", labelledRevision("1", "1"))
	f.waitCopy(0, "b", "revision 1", labelledRevision("1", "1"))
	bVersion := f.copyIn(0, "b").ResourceVersion
	f.setData("a", "2")
	f.waitCopy(0, "a", "revision 2", labelledRevision("2", "2"))
	f.waitStatus("web", "east runs revision 2", func(p *fleetv1alpha1.Propagation) bool {
		return givenRevision(p.Status.Rollout, "east") == 2 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutComplete
	})
	if cm := f.copyIn(0, "b"); cm.ResourceVersion != bVersion || cm.Labels[fleetv1alpha1.RevisionLabel] != "1" {
		t.Errorf("b, which revision 2 leaves unchanged, was written (labels %v)", cm.Labels)
	}
	if got := f.labelledIn(0, "2"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("-l revision=2 lists %v, want [a], what revision 2 changed", got)
	}
	// rollout undo: pinned to revision 1.
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = ptr.To[int64](1) })
	f.waitCopy(0, "a", "back to revision 1's content", dataIs("v", "1"))
	f.waitStatus("web", "east given revision 1", func(p *fleetv1alpha1.Propagation) bool { return givenRevision(p.Status.Rollout, "east") == 1 })
	if cm := f.copyIn(0, "a"); cm.Labels[fleetv1alpha1.RevisionLabel] != "1" {
		t.Errorf("a, put back to revision 1's content by the pin, is labelled revision %q, want 1", cm.Labels[fleetv1alpha1.RevisionLabel])
	}
	if got := f.labelledIn(0, "1"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("pinned to revision 1: -l revision=1 lists %v, want [a b]", got)
	}
	if got := f.labelledIn(0, "2"); len(got) != 0 {
		t.Errorf("pinned to revision 1: -l revision=2 lists %v, want none", got)
	}
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = nil })
	f.waitCopy(0, "a", "revision 2's content again", dataIs("v", "2"))
	f.waitStatus("web", "east given revision 2", func(p *fleetv1alpha1.Propagation) bool { return givenRevision(p.Status.Rollout, "east") == 2 })
	if cm := f.copyIn(0, "a"); cm.Labels[fleetv1alpha1.RevisionLabel] != "2" {
		t.Errorf("unpinned, a holds revision 2's content labelled revision %q, want 2", cm.Labels[fleetv1alpha1.RevisionLabel])
	}
}

// TestRestartMakesNoWritesUnderProgressiveWithOverrides: the
// restart promise (no write with unchanged content) where copies carry
// different revisions, some are overridden per member and the strategy
// is Progressive.
func TestRestartMakesNoWritesUnderProgressiveWithOverrides(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod", "region": "eu"})
	f.register(1, "west", map[string]string{"env": "prod", "region": "us"})
	for i := range 5 {
		f.configMap(fmt.Sprintf("web-%d", i), map[string]string{"v": "1"}, map[string]string{"app": "web"})
	}
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: time.Second},
		}}
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "region",
			Members:    fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod"})},
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web-0"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"region":"${MEMBER_LABEL:region}"}}`)},
		}}
	})
	complete := func(rev int64) func(p *fleetv1alpha1.Propagation) bool {
		return func(p *fleetv1alpha1.Propagation) bool {
			r := p.Status.Rollout
			return r != nil && r.Revision == rev && r.Phase == fleetv1alpha1.RolloutComplete
		}
	}
	f.waitStatus("web", "revision 1 complete", complete(1))
	f.setData("web-1", "2")
	f.waitStatus("web", "revision 2 complete", complete(2))
	for i := range 2 {
		f.waitCopy(i, "web-1", "revision 2", labelledRevision("2", "2"))
		f.waitCopy(i, "web-0", "revision 1, overridden", func(cm *corev1.ConfigMap) bool {
			return cm != nil && cm.Labels[fleetv1alpha1.RevisionLabel] == "1" && cm.Data["region"] != ""
		})
	}
	f.reconciledAgain("web")
	since := time.Now()
	f.stop()
	f.start(nil)
	poll.Until(t, "the restarted manager engaged both members", func() bool { return len(f.mgr.ClusterNames()) == 2 })
	f.reconciledAgain("web")
	f.waitStatus("web", "revision 2 complete after the restart", complete(2))
	for i := range 2 {
		if writes := f.teamWrites(i, since); len(writes) != 0 {
			t.Errorf("member %d: %d writes after a restart with unchanged content, want 0: %v", i, len(writes), writes)
		}
	}
}

// lyingMember serves member i through a proxy that gives the ConfigMap
// name of namespace, whatever its content, resourceVersion lie, as a
// member restored from an etcd backup may give an object a version it
// gave other content before. It returns the proxy's kubeconfig.
func lyingMember(t *testing.T, i int, namespace, name, lie string) []byte {
	t.Helper()
	upstream, err := clientcmd.RESTConfigFromKubeConfig(suite.Kubeconfigs[i])
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Accept-Encoding")
		},
		Transport:     rt,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if !strings.Contains(resp.Request.URL.Path, "/configmaps") || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
				return nil
			}
			resp.Body = lyingBody(resp.Body, namespace, name, lie)
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
			return nil
		},
	}
	srv := httptest.NewTLSServer(rp)
	t.Cleanup(srv.Close)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lying"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	cfg.AuthInfos["lying"] = &clientcmdapi.AuthInfo{Token: "the-proxy-authenticates-itself"}
	cfg.Contexts["lying"] = &clientcmdapi.Context{Cluster: "lying", AuthInfo: "lying"}
	cfg.CurrentContext = "lying"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lyingBody rewrites, line by line (a watch sends an event a line), the
// resourceVersion of every object named namespace/name to lie.
func lyingBody(body io.ReadCloser, namespace, name, lie string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer body.Close()
		br := bufio.NewReader(body)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				if _, werr := pw.Write(lieIn(line, namespace, name, lie)); werr != nil {
					return
				}
			}
			if err == io.EOF {
				pw.Close()
				return
			} else if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

func lieIn(line []byte, namespace, name, lie string) []byte {
	if lie == "" {
		return line // the control: an honest proxy
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return line
	}
	changed := false
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if m, ok := v["metadata"].(map[string]any); ok && m["name"] == name && m["namespace"] == namespace {
				m["resourceVersion"] = lie
				changed = true
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	if !changed {
		return line
	}
	out, err := json.Marshal(v)
	if err != nil {
		return line
	}
	if bytes.HasSuffix(line, []byte("\n")) {
		out = append(out, '\n')
	}
	return out
}

// TestMemberRepeatingAResourceVersionHasItsDriftFound: a member whose
// API server gives the copy the same resourceVersion for different
// content (an etcd backup restored: versions go back, and are given
// again) has the copy's drift corrected within Options.DriftRecheck of
// its last clean check.
func TestMemberRepeatingAResourceVersionHasItsDriftFound(t *testing.T) {
	t.Parallel()
	t.Run("honest proxy (control)", func(t *testing.T) { t.Parallel(); driftThroughProxy(t, "") })
	t.Run("lying proxy", func(t *testing.T) { t.Parallel(); driftThroughProxy(t, "4242") })
}

func driftThroughProxy(t *testing.T, lie string) {
	const recheck = 2 * time.Second
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.driftRecheck = recheck
	f.start(nil)
	f.registerKubeconfig("east", lyingMember(t, 0, f.team, "web", lie), map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "labelled", labelledRevision("1", "1"))
	f.waitStatus("web", "Ready", ready)
	f.reconciledAgain("web") // a clean check of version 4242, memoised
	f.editCopyIn(0, "web", func(cm *corev1.ConfigMap) { cm.Data["v"] = "restored" })
	// The recheck, and a run's time on a loaded machine.
	deadline := time.Now().Add(recheck + 10*time.Second)
	for f.copyIn(0, "web").Data["v"] != "1" {
		if time.Now().After(deadline) {
			p := f.hubPropagation("web")
			t.Fatalf("the copy's drift was not corrected within the recheck (%s): the member served the changed copy under the resourceVersion the memo checked clean; status applied %d, drifted %d, Ready %v", recheck, p.Status.Applied, p.Status.Drifted, ready(p))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
