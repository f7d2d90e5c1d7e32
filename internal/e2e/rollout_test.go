package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// minSuccessTime is the Progressive rollouts' minSuccessTime: a change is
// known within a second (the member's managedFields time), so two members
// that change less than a second apart are a certain breach, however
// loaded the machine; short for the suite's time.
const minSuccessTime = 3 * time.Second

// threeMembers registers the team's members a, b and c on member API
// servers 0, 1 and 2, with labels by name.
func (tm *team) threeMembers(labels map[string]map[string]string) []string {
	tm.t.Helper()
	return []string{tm.register(0, "a", labels["a"]), tm.register(1, "b", labels["b"]), tm.register(2, "c", labels["c"])}
}

func oneAtATime(mc int32) fleetv1alpha1.RolloutStrategy {
	return progressive(fleetv1alpha1.ProgressiveRollout{
		MaxConcurrency: ptr.To(intstr.FromInt32(mc)),
		MinSuccessTime: &metav1.Duration{Duration: minSuccessTime},
	})
}

func TestFirstRevisionOfANewPropagationGoesOneAtATime(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	s := tm.sample("web", members...)
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(1) })
	tm.waitRollout("of revision 1 complete", complete(1))
	s.stopSampling()
	samples := s.taken()
	order := checkOneAtATime(t, samples, "1", 1, minSuccessTime)
	if len(order) != len(members) {
		t.Errorf("%d of %d members took revision 1: %v", len(order), len(members), order)
	}
	checkGivenFirst(t, samples, "1", 1)
}

func TestMaxConcurrencyBoundsMembersBetweenRevisions(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(2) })
	tm.waitRollout("of revision 1 complete", complete(1))
	s := tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	tm.waitRollout("of revision 2 complete", complete(2))
	s.stopSampling()
	samples := s.taken()
	if order := checkOneAtATime(t, samples, "2", 2, minSuccessTime); len(order) != len(members) {
		t.Errorf("%d of %d members took revision 2: %v", len(order), len(members), order)
	}
	checkGivenFirst(t, samples, "2", 2)
}

func TestMinSuccessTimeHoldsEachMemberBeforeTheNext(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(1) })
	tm.waitRollout("of revision 1 complete", complete(1))
	s := tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	tm.waitRollout("of revision 2 complete", complete(2))
	s.stopSampling()
	if order := checkOneAtATime(t, s.taken(), "2", 1, minSuccessTime); len(order) != len(members) {
		t.Errorf("%d of %d members took revision 2: %v", len(order), len(members), order)
	}
}

func TestGroupStartsOnceTheGroupsBeforeAreDone(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	// c is the canary: it goes first although its name is last.
	members := tm.threeMembers(map[string]map[string]string{"a": {"stage": "prod"}, "b": {"stage": "prod"}, "c": {"stage": "canary"}})
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = progressive(fleetv1alpha1.ProgressiveRollout{
			GroupBy: "stage", Groups: []string{"canary", "prod"},
			MaxConcurrency: ptr.To(intstr.FromInt32(2)), MinSuccessTime: &metav1.Duration{Duration: minSuccessTime},
		})
	})
	tm.waitRollout("of revision 1 complete", complete(1))
	s := tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	tm.waitRollout("of revision 2 complete", complete(2))
	s.stopSampling()
	samples := s.taken()
	seen := firstSeen(samples, "2")
	canary := members[2]
	for _, m := range members[:2] {
		if gap := seen[m].Sub(changes(samples, "2")[canary].lo); gap < minSuccessTime {
			t.Errorf("%s (prod) took revision 2 %s after the canary %s, before the canary was done (minSuccessTime %s)", m, gap, canary, minSuccessTime)
		}
	}
	// maxConcurrency 2 lets both prod members go together.
	checkOneAtATime(t, samples, "2", 2, minSuccessTime)
}

// failingMember makes the team's ConfigMap extra exist in member, not a
// copy, so that a revision that adds it fails there, AlreadyExists.
func (tm *team) failingMember(member string) {
	tm.t.Helper()
	fleetNamespace(tm, member)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "extra"}, Data: map[string]string{"v": "mine"}}
	if err := tm.member(member).Create(tm.t.Context(), cm); err != nil {
		tm.t.Fatal(err)
	}
}

// fleetNamespace creates the team's namespace in member, where the fleet
// would create it.
func fleetNamespace(tm *team, member string) {
	tm.t.Helper()
	err := tm.member(member).Create(tm.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tm.ns}})
	if err != nil && !isAlreadyExists(err) {
		tm.t.Fatal(err)
	}
}

func TestStoppedRolloutGivesNoOneElseTheRevision(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(1) })
	tm.waitRollout("of revision 1 complete", complete(1))
	// Revision 2 changes web and adds extra, which a, the first in
	// order, holds already: a fails, and maxFailures 1 stops the rollout.
	tm.failingMember(members[0])
	s := tm.sample("web", members...)
	tm.setConfigMap("extra", "2")
	p := tm.waitRollout("of revision 2 stopped", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision == 2 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutStopped
	})
	tm.setConfigMap("web", "3")
	p = tm.waitRollout("of revision 3 stopped", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision == 3 && p.Status.Rollout.Revision == 3 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutStopped
	})
	s.stopSampling()
	for _, smp := range s.taken() {
		for _, m := range members[1:] {
			if v := smp.copies[m].value; v != "1" {
				t.Errorf("%s's web was %q at %s, want revision 1's: the stopped rollout gave it another", m, v, smp.at.Format("15:04:05.000"))
			}
		}
	}
	for _, m := range members[1:] {
		if tm.copyOf(m, "extra") != nil || given(p.Status.Rollout, m) > 1 {
			t.Errorf("%s was given the stopped revision: record %+v", m, p.Status.Rollout)
		}
	}
	if v := tm.valueIn(members[0], "extra"); v != "mine" {
		t.Errorf("%s's own ConfigMap extra is %q, want it untouched", members[0], v)
	}
}

func TestStrategyAllGivesEveryMemberTheContentAtOnce(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(nil)
	tm.waitRollout("of revision 1 complete", complete(1))
	// a fails revision 2 (extra exists there): the others take it all
	// the same.
	tm.failingMember(members[0])
	tm.setConfigMap("extra", "2")
	tm.setConfigMap("web", "2")
	tm.waitRollout("of the newest revision given to every member", func(p *fleetv1alpha1.Propagation) bool {
		r := p.Status.Rollout
		return p.Status.Revision >= 2 && r.Revision == p.Status.Revision && len(r.Members) == 1 && len(r.Members[0].Names) == 3
	})
	for _, m := range members[1:] {
		waitValue(tm, m, "web", "2")
		waitValue(tm, m, "extra", "2")
	}
	p := tm.waitRollout("of member a failed", func(p *fleetv1alpha1.Propagation) bool {
		for _, r := range p.Status.Members {
			if r.Name == members[0] && r.Reason == fleetv1alpha1.ReasonAlreadyExists {
				return true
			}
		}
		return false
	})
	if p.Status.Rollout.Phase == fleetv1alpha1.RolloutStopped {
		t.Errorf("an All rollout stopped on a failure: %+v", p.Status.Rollout)
	}
}

// waitValue waits until member's copy of name holds v=value.
func waitValue(tm *team, member, name, value string) {
	tm.t.Helper()
	pollUntil(tm.t, member+"'s "+name+" at "+value, func() bool { return tm.valueIn(member, name) == value })
}

func TestPauseGivesNoMemberAnotherRevision(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(3) })
	tm.waitRollout("of revision 1 complete", complete(1))
	if out, err := cli(t, "rollout", "pause", "propagation/web", "-n", tm.ns); err != nil {
		t.Fatalf("rollout pause: %v\n%s", err, out)
	}
	s := tm.sample("web", members...)
	tm.setConfigMap("web", "2")
	tm.waitRollout("of revision 2 made, paused", func(p *fleetv1alpha1.Propagation) bool {
		return p.Spec.Paused && p.Status.Revision == 2 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutPaused
	})
	s.stopSampling()
	for _, smp := range s.taken() {
		for _, m := range members {
			if smp.copies[m].value != "1" {
				t.Fatalf("%s took %q while paused", m, smp.copies[m].value)
			}
		}
	}
	if out, err := cli(t, "rollout", "resume", "propagation/web", "-n", tm.ns); err != nil {
		t.Fatalf("rollout resume: %v\n%s", err, out)
	}
	tm.waitRollout("of revision 2 complete", complete(2))
	for _, m := range members {
		if v := tm.valueIn(m, "web"); v != "2" {
			t.Errorf("%s holds %q after the resume, want 2", m, v)
		}
	}
}

func TestPinnedEarlierRevisionRemovesWhatItDoesNotHold(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	members := tm.threeMembers(nil)
	tm.setConfigMap("web", "1")
	tm.propagation(func(p *fleetv1alpha1.Propagation) { p.Spec.Strategy = oneAtATime(3) })
	tm.waitRollout("of revision 1 complete", complete(1))
	tm.setConfigMap("extra", "2")
	tm.waitRollout("of revision 2 complete", complete(2))
	for _, m := range members {
		if tm.copyOf(m, "extra") == nil {
			t.Fatalf("%s has no copy of extra after revision 2", m)
		}
	}
	tm.edit(func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = ptr.To[int64](1) })
	tm.waitRollout("of pinned revision 1 everywhere (Pinned: revision 2 is newer)", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Revision == 2 && p.Status.Rollout.Revision == 1 && p.Status.Rollout.Phase == fleetv1alpha1.RolloutPinned
	})
	for _, m := range members {
		if tm.copyOf(m, "extra") != nil {
			t.Errorf("%s keeps extra, which pinned revision 1 does not hold", m)
		}
		if v := tm.valueIn(m, "web"); v != "1" {
			t.Errorf("%s's web is %q under the pin, want 1", m, v)
		}
	}
}

func TestMemberThatJoinsIsGivenARevisionAtOnce(t *testing.T) {
	t.Parallel()
	quote(t)
	tm := newTeam(t)
	tm.register(0, "a", nil)
	tm.register(1, "b", nil)
	tm.setConfigMap("web", "1")
	tm.propagation(nil)
	tm.waitRollout("of revision 1 complete", complete(1))
	// c joins as a user registers a member: `fleet-manager register`,
	// with the rights the fleet's Propagations need.
	joined := tm.registerByCommand(2, "c")
	waitValue(tm, joined, "web", "1")
	tm.waitRollout("of revision 1 complete with the new member", func(p *fleetv1alpha1.Propagation) bool {
		return complete(1)(p) && given(p.Status.Rollout, joined) == 1
	})
}

// registerByCommand registers member API server i as the team's member
// suffix with `fleet-manager register --permissions=fleet`, which waits
// until it is Ready, and unregisters it with `--cleanup` when the test
// ends: register's objects in the member carry the fleet's identity, and
// another fleet's register of the same server would be refused.
func (tm *team) registerByCommand(i int, suffix string) string {
	tm.t.Helper()
	name := tm.ns + "-" + suffix
	kc := filepath.Join(tm.t.TempDir(), "member.kubeconfig")
	if err := os.WriteFile(kc, suite.Kubeconfigs[i], 0o600); err != nil {
		tm.t.Fatal(err)
	}
	registerCmd.Lock()
	tm.t.Cleanup(registerCmd.Unlock)
	// fleet-system made beforehand is used as it is and never deleted:
	// envtest runs no namespace controller, so one that unregister
	// deleted would stay Terminating, and the next register would wait.
	err := suite.MemberClients[i].Create(tm.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-system"}})
	if err != nil && !isAlreadyExists(err) {
		tm.t.Fatal(err)
	}
	out, err := cli(tm.t, "register", name, "--member-kubeconfig="+kc, "--namespace="+tm.fleetNS, "--permissions=fleet",
		"--labels=e2e.fleetkube.io/team="+tm.ns, "--wait=2m")
	if err != nil {
		tm.t.Fatalf("register: %v\n%s", err, out)
	}
	tm.t.Cleanup(func() {
		if out, err := exec.Command(binary, "unregister", name, "--cleanup", "--member-kubeconfig="+kc, "--namespace="+tm.fleetNS,
			"--hub-kubeconfig="+hubKubeconfig, "--wait=2m").CombinedOutput(); err != nil {
			tm.t.Errorf("unregister: %v\n%s", err, out)
		}
	})
	tm.members[name] = i
	tm.names = append(tm.names, name)
	slices.Sort(tm.names)
	return name
}

// registerCmd serializes the tests that run `fleet-manager register`: a
// member server belongs to one fleet's register at a time.
var registerCmd sync.Mutex
