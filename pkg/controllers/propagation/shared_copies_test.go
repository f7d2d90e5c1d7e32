package propagation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// readyWithMembers is a condition on a Propagation: Ready, with a
// revision, count members selected and applied.
func readyWithMembers(count int) func(p *fleetv1alpha1.Propagation) bool {
	return func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Selected == int32(count) && p.Status.Applied == int32(count) && p.Status.Revision > 0
	}
}

// atNewestRevision reports the members of a Ready p not listed applied
// at its newest revision.
func atNewestRevision(t *testing.T, stage string, p *fleetv1alpha1.Propagation) {
	t.Helper()
	for _, m := range p.Status.Members {
		if m.Result != fleetv1alpha1.ResultApplied || m.Revision != p.Status.Revision {
			t.Errorf("%s: Ready at revision %d, and member %s listed %s (%s) at revision %d", stage, p.Status.Revision, m.Name, m.Result, m.Reason, m.Revision)
		}
	}
}

// TestSharedCopiesStayReadOnlyAcrossMembers: three members take the
// same ConfigMaps and an Envelope's ConfigMap, one member with a data
// override, another with a label override, the third plain (so two
// members share the desired copies, read-only). Each member's copies
// hold only its own overrides, every copy the revision label that gave
// it its content, and a change of one hub object makes exactly one more
// revision and relabels only its copies. Run under -race: a run writing
// into a shared desired copy, a hub-cache object or a revision while
// another member's run reads it is a race.
func TestSharedCopiesStayReadOnlyAcrossMembers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod", "region": "eu", "tier": "gold"})
	f.register(1, "west", map[string]string{"env": "prod", "region": "us", "tier": "silver"})
	f.register(2, "north", map[string]string{"env": "prod", "region": "ap"})
	for _, name := range []string{"web", "plain", "third"} {
		f.configMap(name, map[string]string{"v": "1"}, map[string]string{"app": "web"})
	}
	settings := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "settings", "labels": map[string]any{"from": "envelope"}}, "data": map[string]any{"color": "blue"}}
	f.envelope("app", settings)
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "fleet.fleetkube.io/v1alpha1", Kind: "Envelope", Name: "app"})
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "gold-data",
			Members:    fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"tier": "gold"})},
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"region":"${MEMBER_LABEL:region}"}}`)},
		}, {
			Name:       "silver-label",
			Members:    fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"tier": "silver"})},
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"metadata":{"labels":{"silver":"yes"}},"data":{"color":"silver"}}`)},
		}}
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		p := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(context.Background(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err == nil {
			t.Logf("the Propagation's status at the end: %+v", p.Status)
		}
	})
	first := f.waitStatus("web", "Ready", readyWithMembers(3))
	atNewestRevision(t, "first revision", first)
	r1 := strconv.FormatInt(first.Status.Revision, 10)

	check := func(stage string, revisionOf map[string]string) {
		t.Helper()
		for i, member := range []string{"east", "west", "north"} {
			for _, name := range []string{"web", "plain", "third", "settings"} {
				cm := f.copyIn(i, name)
				if cm == nil {
					t.Errorf("%s: %s has no copy of %s", stage, member, name)
					continue
				}
				if got := cm.Labels[fleetv1alpha1.RevisionLabel]; got != revisionOf[name] {
					t.Errorf("%s: %s's copy of %s carries revision %q, want %q", stage, member, name, got, revisionOf[name])
				}
				if got := cm.Labels[fleetv1alpha1.PropagationLabel]; got != "web" {
					t.Errorf("%s: %s's copy of %s labelled Propagation %q", stage, member, name, got)
				}
				_, region := cm.Data["region"]
				if want := member == "east" && name == "web"; region != want {
					t.Errorf("%s: %s's copy of %s has the gold override's region: %v, want %v (data %v)", stage, member, name, region, want, cm.Data)
				}
				silver := cm.Labels["silver"] == "yes" || cm.Data["color"] == "silver"
				if want := member == "west" && name == "settings"; silver != want {
					t.Errorf("%s: %s's copy of %s has the silver override: %v, want %v (labels %v, data %v)", stage, member, name, silver, want, cm.Labels, cm.Data)
				}
				if name == "settings" && (cm.Labels[fleetv1alpha1.EnvelopeLabel] != "app" || cm.Labels["from"] != "envelope") {
					t.Errorf("%s: %s's copy of settings labels %v, want the Envelope's and its own", stage, member, cm.Labels)
				}
			}
		}
	}
	check("first revision", map[string]string{"web": r1, "plain": r1, "third": r1, "settings": r1})

	// One hub object changes: one more revision, only its copies relabelled.
	cm := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "plain"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "2"
	if err := f.hub.Client.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.waitCopy(i, "plain", "at v 2", dataIs("v", "2"))
	}
	second := f.waitStatus("web", "Ready at the second revision", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision > first.Status.Revision && readyWithMembers(3)(p)
	})
	atNewestRevision(t, "second revision", second)
	if second.Status.Revision != first.Status.Revision+1 {
		t.Errorf("revision %d after one change to revision %d: a revision whose content no hub change made", second.Status.Revision, first.Status.Revision)
	}
	r2 := strconv.FormatInt(second.Status.Revision, 10)
	check("second revision", map[string]string{"web": r1, "plain": r2, "third": r1, "settings": r1})

	var revs fleetv1alpha1.PropagationRevisionList
	if err := f.hub.Client.List(t.Context(), &revs, client.InNamespace(f.team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: "web"}); err != nil {
		t.Fatal(err)
	}
	if len(revs.Items) != 2 {
		var numbers []string
		for _, r := range revs.Items {
			numbers = append(numbers, fmt.Sprint(r.Revision))
		}
		t.Errorf("revisions %v, want 2", numbers)
	}

	// Drift in the shared plain copy of one member is corrected there
	// alone, and the overridden member keeps its override.
	drifted := f.copyIn(2, "third")
	drifted.Data["v"] = "hand"
	if err := suiteMemberUpdate(t, 2, drifted); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(2, "third", "corrected to v 1", dataIs("v", "1"))
	f.reconciledAgain("web")
	atNewestRevision(t, "after drift", f.waitStatus("web", "Ready again", readyWithMembers(3)))
	check("after drift", map[string]string{"web": r1, "plain": r2, "third": r1, "settings": r1})
}

func suiteMemberUpdate(t *testing.T, i int, obj client.Object) error {
	t.Helper()
	return suite.MemberClients[i].Update(t.Context(), obj)
}

// TestReadyOfNewContentFollowsTheMembersWrites changes the hub
// objects a Ready Propagation (strategy All) copies, which changes its
// content and revision but not its generation, and checks that no status
// write says Ready at the last content's revision before the last write
// the manager made in a member for it (the members' audit logs): the
// members' results of the generation are of the old content until they
// apply the new.
func TestReadyOfNewContentFollowsTheMembersWrites(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	f, recorded := recordedFleet(t)
	for i := range 5 {
		f.configMap(fmt.Sprintf("web-%d", i), map[string]string{"v": "1"}, map[string]string{"app": "web"})
	}
	f.propagation("web", nil)
	first := f.waitStatus("web", "Ready", readyWithMembers(memberCount))
	changed := time.Now()
	for i := range 5 {
		cm := &corev1.ConfigMap{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: fmt.Sprintf("web-%d", i)}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "2"
		if err := f.hub.Client.Update(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	for i := range memberCount {
		for j := range 5 {
			f.waitCopy(i, fmt.Sprintf("web-%d", j), "at v 2", dataIs("v", "2"))
		}
	}
	// Member runs make a revision of each content they see: the objects
	// changed one after another may make several. The last content's is
	// the newest, once the last changed copy carries its number (a copy
	// applied before its revision was made keeps its older number until
	// it is labelled).
	var final int64
	f.waitCopy(0, "web-4", "labelled with the newest revision", func(cm *corev1.ConfigMap) bool {
		final = newestRevision(t, f, "web")
		n, _ := strconv.ParseInt(cm.Labels[fleetv1alpha1.RevisionLabel], 10, 64)
		return n > first.Status.Revision && n == final
	})
	f.waitStatus("web", "Ready at the last content's revision", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision >= final && readyWithMembers(memberCount)(p)
	})
	last := lastMemberWrite(t, f.team, changed)
	for _, w := range recorded() {
		if w.ready && w.revision >= final && w.at.Before(last) {
			t.Errorf("a status write said Ready at revision %d %s before the last member write for it; the member writes after it:", w.revision, last.Sub(w.at).Round(time.Millisecond))
			for i := range memberCount {
				for _, mw := range memberWrites(t, i, w.at) {
					if mw.Namespace == f.team {
						t.Errorf("  member %d, %s after: %s", i, mw.Time.Sub(w.at).Round(time.Millisecond), mw)
					}
				}
			}
			break
		}
	}
}

// revisionsRefusedWhile returns, for the Propagation controller of mgr,
// a hub client that refuses to make PropagationRevisions while refused
// reports true, as a stalled hub.
func revisionsRefusedWhile(refused func() bool) func(mgr *fleet.Manager) (client.Client, error) {
	return func(mgr *fleet.Manager) (client.Client, error) {
		cl, err := cachedHubClient(mgr)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(cl, interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*fleetv1alpha1.PropagationRevision); ok && refused() {
					return apierrors.NewServiceUnavailable("the hub is stalled (test)")
				}
				return cl.Create(ctx, obj, opts...)
			},
		}), nil
	}
}

// TestRestartBeforeTheRevisionLabelConverges: under strategy All,
// the hub refuses every revision the first manager makes (a hub error, as
// a stalled or broken hub gives), so the members apply copies no revision
// labels; the manager stops there and a second one starts against a
// working hub. The copies get their revision's label, the status becomes
// Ready at that revision, and no status write says Ready before the
// second manager's last write in a member.
func TestRestartBeforeTheRevisionLabelConverges(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.client = revisionsRefusedWhile(func() bool { return true })
	f.start(nil)
	for i := range memberCount {
		f.register(i, fmt.Sprintf("m%d", i), map[string]string{"env": "prod"})
	}
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	for i := range memberCount {
		f.waitCopy(i, "web", "applied before any revision", exists)
	}
	for i := range memberCount {
		if cm := f.copyIn(i, "web"); cm.Labels[fleetv1alpha1.RevisionLabel] != "" {
			t.Skipf("m%d's copy carries revision %s: the hub refusal did not hold the revision back", i, cm.Labels[fleetv1alpha1.RevisionLabel])
		}
	}
	p := &fleetv1alpha1.Propagation{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
		t.Fatal(err)
	}
	if ready(p) {
		t.Errorf("Ready with no revision made: %+v", p.Status.Conditions)
	}
	f.stop()

	build, recorded := statusWrites(f.team, "web")
	f.client = build
	restarted := time.Now()
	f.start(nil)
	done := f.waitStatus("web", "Ready after the restart", readyWithMembers(memberCount))
	for i := range memberCount {
		f.waitCopy(i, "web", "labelled with the revision", func(cm *corev1.ConfigMap) bool {
			return cm != nil && cm.Labels[fleetv1alpha1.RevisionLabel] == strconv.FormatInt(done.Status.Revision, 10)
		})
	}
	last := lastMemberWrite(t, f.team, restarted) // the labels, at least
	for _, w := range recorded() {
		if w.ready && w.at.Before(last) {
			t.Errorf("a status write said Ready at revision %d, %s before the last member write (the label)", w.revision, last.Sub(w.at).Round(time.Millisecond))
		}
	}
}

// TestConcurrentRunsOverSharedCopiesConverge changes, in quick
// succession, every hub object three members copy and the spec (each
// change starting every member's run again over the same shared desired
// copies, while the runs of the change before may still go on), one
// member with an override. Under -race: no run writes into what another
// reads; at the end each member holds the last content, only east its
// override, every copy labelled with a revision, no newer than the one
// the status says, that holds the copy's content (a member run makes the
// revision of each content it is the first to see, and a copy keeps the
// revision that gave it its content).
func TestConcurrentRunsOverSharedCopiesConverge(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod", "tier": "gold", "region": "eu"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.register(2, "north", map[string]string{"env": "prod"})
	const objects = 8
	for i := range objects {
		f.configMap(fmt.Sprintf("web-%d", i), map[string]string{"v": "0"}, map[string]string{"app": "web"})
	}
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "gold",
			Members:    fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"tier": "gold"})},
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap", Name: "web-0"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"region":"${MEMBER_LABEL:region}"}}`)},
		}}
	})
	f.waitStatus("web", "Ready", readyWithMembers(3))
	const rounds = 4
	for round := 1; round <= rounds; round++ {
		for i := range objects {
			cm := &corev1.ConfigMap{}
			if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: fmt.Sprintf("web-%d", i)}, cm); err != nil {
				t.Fatal(err)
			}
			cm.Data["v"] = strconv.Itoa(round)
			if err := f.hub.Client.Update(t.Context(), cm); err != nil {
				t.Fatal(err)
			}
		}
		f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = !p.Spec.Adopt })
	}
	final := strconv.Itoa(rounds)
	for m := range 3 {
		for i := range objects {
			f.waitCopy(m, fmt.Sprintf("web-%d", i), "at the last content", dataIs("v", final))
		}
	}
	p := f.waitStatus("web", "Ready at the last content", readyWithMembers(3))
	for m, member := range []string{"east", "west", "north"} {
		for i := range objects {
			cm := f.copyIn(m, fmt.Sprintf("web-%d", i))
			label := cm.Labels[fleetv1alpha1.RevisionLabel]
			if n, err := strconv.ParseInt(label, 10, 64); err != nil || n > p.Status.Revision {
				t.Errorf("%s's copy of web-%d carries revision %q, the status says %d", member, i, label, p.Status.Revision)
			} else if v := revisionData(t, f, "web-"+label, fmt.Sprintf("web-%d", i), "v"); v != final {
				t.Errorf("%s's copy of web-%d carries revision %s, which holds v %q, not the copy's %q", member, i, label, v, final)
			}
			_, region := cm.Data["region"]
			if want := member == "east" && i == 0; region != want {
				t.Errorf("%s's copy of web-%d has the override's region: %v, want %v", member, i, region, want)
			}
		}
	}
}

// revisionData returns the value of key in the data of ConfigMap name
// as revision rev of the team's Propagation holds it.
func revisionData(t *testing.T, f *testFleet, rev, name, key string) string {
	t.Helper()
	r := &fleetv1alpha1.PropagationRevision{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: rev}, r); err != nil {
		t.Fatal(err)
	}
	var c content.Content
	if err := json.Unmarshal(r.Content.Raw, &c); err != nil {
		t.Fatal(err)
	}
	for _, o := range c.Objects {
		obj := unstructured.Unstructured{Object: o.Object}
		if obj.GetName() == name {
			v, _, _ := unstructured.NestedString(obj.Object, "data", key)
			return v
		}
	}
	return ""
}

// TestRevisionLabelOfAReportedDriftIsNotLeftStale: under strategy
// All and drift Report, a member whose copy drifted gets its revision's
// label by a merge patch (labelRevision), while the applies set it
// otherwise; docs/rollouts.md says a merge patch would make the label
// another operation's field, which a later apply without a label leaves
// stale. Here: a copy relabelled so (revision N) then takes new content
// before its revision is made (the hub refusing revisions meanwhile), and
// once that revision (N+1) is made the copy must carry N+1, not N.
func TestRevisionLabelOfAReportedDriftIsNotLeftStale(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	var refuse atomic.Bool
	f.client = revisionsRefusedWhile(refuse.Load)
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Drift = fleetv1alpha1.DriftReport })
	f.waitStatus("web", "Ready", readyWithMembers(1))
	setHub := func(v string) {
		t.Helper()
		cm := &corev1.ConfigMap{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = v
		if err := f.hub.Client.Update(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	label := func(want string) func(cm *corev1.ConfigMap) bool {
		return func(cm *corev1.ConfigMap) bool { return cm != nil && cm.Labels[fleetv1alpha1.RevisionLabel] == want }
	}
	revision := func() int64 {
		p := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
			t.Fatal(err)
		}
		return p.Status.Revision
	}

	// New content, applied before its revision: the copy loses its label.
	refuse.Store(true)
	setHub("2")
	f.waitCopy(0, "web", "at v 2, without a revision label", func(cm *corev1.ConfigMap) bool {
		return dataIs("v", "2")(cm) && label("")(cm)
	})
	// Drift in the member, reported, not corrected.
	drifted := f.copyIn(0, "web")
	drifted.Data["v"] = "hand"
	if err := suite.MemberClients[0].Update(t.Context(), drifted); err != nil {
		t.Fatal(err)
	}
	// The revision is made: the drifted copy is labelled by a merge patch.
	refuse.Store(false)
	p := f.waitStatus("web", "a second revision", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Revision >= 2 })
	n := strconv.FormatInt(p.Status.Revision, 10)
	f.waitCopy(0, "web", "labelled "+n+" while drifted", func(cm *corev1.ConfigMap) bool { return label(n)(cm) && cm.Data["v"] == "hand" })
	t.Logf("east's copy, labelled while drifted: managers %v", managersOf(f.copyIn(0, "web")))

	// Newer content, applied before its revision, then the revision.
	refuse.Store(true)
	setHub("3")
	f.waitCopy(0, "web", "at v 3", dataIs("v", "3"))
	t.Logf("east's copy at v 3 before its revision: label %q", f.copyIn(0, "web").Labels[fleetv1alpha1.RevisionLabel])
	refuse.Store(false)
	poll.Until(t, "a third revision", func() bool { return revision() > p.Status.Revision })
	final := f.waitStatus("web", "Ready at the newest revision", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision > 2 && readyWithMembers(1)(p)
	})
	f.reconciledAgain("web")
	want := strconv.FormatInt(final.Status.Revision, 10)
	if cm := f.copyIn(0, "web"); cm.Labels[fleetv1alpha1.RevisionLabel] != want {
		t.Errorf("east's copy holds the content of revision %s (v %s) and carries revision label %q, Ready says %s: the label is stale", want, cm.Data["v"], cm.Labels[fleetv1alpha1.RevisionLabel], want)
	}
}

// newestRevision returns the number of Propagation name's newest
// revision on the hub, 0 if none.
func newestRevision(t *testing.T, f *testFleet, name string) int64 {
	t.Helper()
	var revs fleetv1alpha1.PropagationRevisionList
	if err := f.hub.Client.List(t.Context(), &revs, client.InNamespace(f.team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: name}); err != nil {
		t.Fatal(err)
	}
	var newest int64
	for _, r := range revs.Items {
		newest = max(newest, r.Revision)
	}
	return newest
}
