package registry

import (
	"context"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"go.uber.org/goleak"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

func secret(format, name string) Source {
	return Source{Format: format, NamespacedName: types.NamespacedName{Namespace: "fleet-system", Name: name}}
}

func claimOf(src Source, kubeconfig string, labels map[string]string) Claim {
	return Claim{Source: src, Labels: labels, kubeconfig: []byte(kubeconfig)}
}

// next returns the subscription's next event, failing after 10 s.
func next(t *testing.T, s *Subscription) Event {
	t.Helper()
	got := make(chan Event, 1)
	go func() {
		if e, ok := s.Next(); ok {
			got <- e
		}
	}()
	select {
	case e := <-got:
		s.Done(e)
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return Event{}
	}
}

func TestLateSubscriberGetsTheCurrentState(t *testing.T) {
	r := New("native")
	r.claim("a", claimOf(secret("native", "a"), "kc-a", map[string]string{"env": "prod"}))
	r.claim("b", claimOf(secret("native", "b"), "kc-b", nil))
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, nil)
	r.withdraw(secret("native", "b"))

	s := r.Subscribe(t.Context())
	e := next(t, s)
	if e.Name != "a" || !e.Registered() || e.New.State != fleetv1alpha1.MemberStateReady || e.New.Labels["env"] != "prod" {
		t.Fatalf("first event = %+v, want a registered, Ready, labelled env=prod", e)
	}
	r.claim("a", claimOf(secret("native", "a"), "kc-a", map[string]string{"env": "dev"}))
	r.ObserveState("a", fleetv1alpha1.MemberStateUnhealthy, nil)
	e = next(t, s)
	if !e.LabelsChanged() || !e.StateChanged() || e.New.State != fleetv1alpha1.MemberStateUnhealthy {
		t.Fatalf("event after a label and a state change = %+v, want both folded into one", e)
	}
	r.withdraw(secret("native", "a"))
	if e = next(t, s); !e.Removed() || e.Old == nil {
		t.Fatalf("event after the last claim went = %+v, want removed", e)
	}
}

func TestOneClusterIsHandedOutOnceAtATime(t *testing.T) {
	r := New("native")
	s := r.Subscribe(t.Context())
	r.claim("a", claimOf(secret("native", "a"), "kc", nil))
	first, _ := s.Next()
	r.ObserveState("a", fleetv1alpha1.MemberStateConnecting, nil)
	r.claim("b", claimOf(secret("native", "b"), "kc", nil))
	// a changed while its first event is being handled: b comes next.
	if e, _ := s.Next(); e.Name != "b" {
		t.Fatalf("while a is being handled, got %q, want b", e.Name)
	}
	s.Done(first)
	if e := next(t, s); e.Name != "a" || e.New.State != fleetv1alpha1.MemberStateConnecting {
		t.Fatalf("after Done(a): %+v, want a Connecting", e)
	}
}

func TestClaims(t *testing.T) {
	for name, tc := range map[string]struct {
		claims     []Claim
		wantReason string
		wantFrom   Source
	}{
		"one Secret": {
			claims:   []Claim{claimOf(secret("native", "a"), "kc", nil)},
			wantFrom: secret("native", "a"),
		},
		"two Secrets conflict": {
			claims:     []Claim{claimOf(secret("native", "a"), "kc", nil), claimOf(secret("native", "other"), "kc", nil)},
			wantReason: ReasonClusterNameConflict,
		},
		"one Secret read by two formats is no conflict": {
			claims:   []Claim{claimOf(secret("multicluster-runtime", "a"), "kc", nil), claimOf(secret("native", "a"), "kc", nil)},
			wantFrom: secret("native", "a"),
		},
		"an unreadable Secret is refused": {
			claims:     []Claim{{Source: secret("native", "a"), Refusal: &kubeconfig.RefusedError{Reason: "MissingKubeconfig"}}},
			wantReason: "MissingKubeconfig",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := New("native", "multicluster-runtime")
			for _, c := range tc.claims {
				r.claim("a", c)
			}
			c, ok := r.Get("a")
			if !ok {
				t.Fatal("a is not registered")
			}
			if tc.wantReason != "" {
				if c.Accepted() || c.Refusal == nil || c.Refusal.Reason != tc.wantReason {
					t.Fatalf("refusal = %v, want %s", c.Refusal, tc.wantReason)
				}
				if c.State != "" {
					t.Errorf("a refused cluster has state %q", c.State)
				}
				return
			}
			if !c.Accepted() || c.Claims[0].Source != tc.wantFrom {
				t.Fatalf("accepted = %v from %v, want accepted from %v", c.Accepted(), c.Claims[0].Source, tc.wantFrom)
			}
			if c.State != fleetv1alpha1.MemberStatePending {
				t.Errorf("state = %q, want Pending", c.State)
			}
		})
	}
}

func TestRefuseAppliesOnlyToItsRegistration(t *testing.T) {
	r := New("native")
	r.claim("a", claimOf(secret("native", "a"), "old", nil))
	c, _ := r.Get("a")
	_, oldGeneration, _ := c.Registration()
	r.claim("a", claimOf(secret("native", "a"), "new", nil))
	r.Refuse("a", oldGeneration, &kubeconfig.RefusedError{Reason: "KubeconfigInvalid"})
	if c, _ = r.Get("a"); !c.Accepted() {
		t.Fatalf("a refusal of the old kubeconfig refused the new one: %v", c.Refusal)
	}
	reg, generation, _ := c.Registration()
	if string(reg.Kubeconfig) != "new" {
		t.Fatalf("registration holds %q, want the new kubeconfig", reg.Kubeconfig)
	}
	r.Refuse("a", generation, &kubeconfig.RefusedError{Reason: "KubeconfigInvalid"})
	if c, _ = r.Get("a"); c.Accepted() {
		t.Fatal("the refusal of the current kubeconfig was ignored")
	}
	// A member reporting as it stops changes nothing.
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, nil)
	if c, _ = r.Get("a"); c.State != "" {
		t.Fatalf("a refused cluster took state %q", c.State)
	}
	// A new kubeconfig lifts the refusal.
	r.claim("a", claimOf(secret("native", "a"), "fixed", nil))
	if c, _ = r.Get("a"); !c.Accepted() || c.State != fleetv1alpha1.MemberStatePending {
		t.Fatalf("after a new kubeconfig: accepted %v, state %q; want accepted, Pending", c.Accepted(), c.State)
	}
}

// A Secret deleted and at once created again with another kubeconfig,
// both while a subscriber is busy, reach it as one event: its
// generations must differ, or the member pool takes the new kubeconfig
// for the one it runs (it skips an event of the same generation as
// "only state or labels changed") and keeps the old member for ever.
func TestRegistrationAgainAfterRemovalHasANewGeneration(t *testing.T) {
	r := New("native")
	s := r.Subscribe(t.Context())
	r.claim("a", claimOf(secret("native", "a"), "old", nil))
	if e := next(t, s); !e.Registered() {
		t.Fatalf("first event = %+v, want a registered", e)
	}
	r.withdraw(secret("native", "a"))
	r.claim("a", claimOf(secret("native", "a"), "new", nil))
	e := next(t, s)
	_, was, _ := e.Old.Registration()
	reg, now, ok := e.New.Registration()
	if !ok || string(reg.Kubeconfig) != "new" {
		t.Fatalf("folded event's registration = %q (accepted %v), want the new kubeconfig", reg.Kubeconfig, ok)
	}
	if now == was {
		t.Fatalf("the registration after the removal has the removed one's generation %d: a subscriber cannot tell the new kubeconfig from the old", now)
	}
}

// A refusal of a registration that was removed is not pinned on the
// registration of the same name that came after it.
func TestRefuseOfARemovedRegistrationSparesTheNextOne(t *testing.T) {
	r := New("native")
	r.claim("a", claimOf(secret("native", "a"), "bad", nil))
	c, _ := r.Get("a")
	_, removed, _ := c.Registration()
	r.withdraw(secret("native", "a"))
	r.claim("a", claimOf(secret("native", "a"), "good", nil))
	r.Refuse("a", removed, &kubeconfig.RefusedError{Reason: "KubeconfigInvalid"})
	if c, _ = r.Get("a"); !c.Accepted() {
		t.Fatalf("the refusal of the removed kubeconfig refused the one registered after it: %v", c.Refusal)
	}
}

func TestSyncedWaitsForEveryFormat(t *testing.T) {
	r := New("native", "argocd")
	r.markSynced("native")
	select {
	case <-r.Synced():
		t.Fatal("synced before argocd's first pass")
	default:
	}
	r.markSynced("argocd")
	r.markSynced("argocd")
	select {
	case <-r.Synced():
	default:
		t.Fatal("not synced after every first pass")
	}
}

func TestSubscriptionEndsWithItsContext(t *testing.T) {
	r := New()
	ctx, cancel := context.WithCancel(t.Context())
	s := r.Subscribe(ctx)
	done := make(chan struct{})
	go func() {
		s.Run(ctx, 4, func(context.Context, Event) {})
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	r.claim("a", claimOf(secret("native", "a"), "kc", nil)) // no subscriber left to notify
}

// A probe that succeeds after one that did, in the same state, updates
// the snapshot but sends no event; a failed one does.
func TestRepeatedSuccessfulProbesSendNoEvent(t *testing.T) {
	r := New("native")
	r.claim("a", claimOf(secret("native", "a"), "kc-a", nil))
	s := r.Subscribe(t.Context())
	next(t, s)
	first := &ProbeResult{Time: time.Unix(1, 0)}
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, first)
	if e := next(t, s); e.New.Probe != first {
		t.Fatalf("event after the first probe = %+v, want its probe", e)
	}
	again := &ProbeResult{Time: time.Unix(2, 0)}
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, again)
	if c, _ := r.Get("a"); c.Probe != again {
		t.Fatal("the snapshot does not hold the last probe")
	}
	if s.queue.Len() != 0 {
		t.Fatal("a probe that succeeded like the one before sent an event")
	}
	failed := &ProbeResult{Time: time.Unix(3, 0), Err: context.DeadlineExceeded, ConsecutiveFailures: 1}
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, failed)
	if e := next(t, s); e.New.Probe != failed {
		t.Fatalf("the event after a failed probe = %+v, want its probe", e)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A ClusterProfile and a Secret that claim one cluster name conflict, as
// two Secrets do.
func TestClusterProfileAndSecretConflict(t *testing.T) {
	r := New("native", ClusterProfileFormat)
	profile := Source{Format: ClusterProfileFormat, NamespacedName: types.NamespacedName{Namespace: "inventory", Name: "east"}}
	r.claim("inventory.east", claimOf(profile, "kc-profile", nil))
	r.claim("inventory.east", claimOf(secret("native", "inventory.east"), "kc-secret", nil))
	c, _ := r.Get("inventory.east")
	if c.Accepted() || c.Refusal == nil || c.Refusal.Reason != ReasonClusterNameConflict {
		t.Fatalf("a name claimed by a profile and a Secret: refusal %v, want %s", c.Refusal, ReasonClusterNameConflict)
	}
	r.withdraw(secret("native", "inventory.east"))
	if c, _ := r.Get("inventory.east"); !c.Accepted() {
		t.Fatalf("the profile's claim alone is not accepted: %v", c.Refusal)
	}
}

// tenant is the Cluster API Secret ns/name, outside the fleet namespace.
func tenant(ns, name string) Source {
	return Source{Format: "cluster-api", NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// A registration from outside the fleet namespace that claims a name a
// Secret of the fleet namespace claims changes nothing of that cluster,
// and sends no event; it counts once the fleet namespace lets the name go.
func TestClaimFromElsewhereChangesNothingOfAFleetName(t *testing.T) {
	r := New("native", "cluster-api", ClusterProfileFormat)
	r.fleetNamespace = "fleet-system"
	if r.claim("eu-1", claimOf(secret("native", "eu-1"), "kc-fleet", map[string]string{"env": "prod"})) {
		t.Fatal("the fleet namespace's claim is reported taken")
	}
	r.ObserveState("eu-1", fleetv1alpha1.MemberStateReady, nil)
	before, _ := r.Get("eu-1")
	s := r.Subscribe(t.Context())
	next(t, s)

	profile := Source{Format: ClusterProfileFormat, NamespacedName: types.NamespacedName{Namespace: "fleet-system", Name: "eu-1"}}
	for _, src := range []Source{tenant("tenant-a", "eu-1-kubeconfig"), profile} {
		if !r.claim("eu-1", claimOf(src, "kc-tenant", map[string]string{"env": "tenant"})) {
			t.Fatalf("the claim of %s is not reported taken", src)
		}
	}
	after, _ := r.Get("eu-1")
	if !after.Accepted() || after.State != fleetv1alpha1.MemberStateReady || after.Labels["env"] != "prod" || after.generation != before.generation ||
		len(after.Claims) != 1 || after.Claims[0].Source != secret("native", "eu-1") {
		t.Fatalf("after claims from elsewhere, eu-1 = %+v, want it as before: %+v", after, before)
	}
	if s.queue.Len() != 0 {
		t.Fatal("a claim from elsewhere on a fleet name sent an event")
	}
	r.withdraw(profile)
	if s.queue.Len() != 0 {
		t.Fatal("withdrawing a claim that changed nothing sent an event")
	}

	r.withdraw(secret("native", "eu-1"))
	e := next(t, s)
	if !e.New.Accepted() || e.New.Claims[0].Source != tenant("tenant-a", "eu-1-kubeconfig") || e.New.Labels["env"] != "tenant" {
		t.Fatalf("once the fleet namespace lets eu-1 go, event %+v: want the claim from elsewhere accepted", e)
	}
	// And the fleet namespace takes the name back.
	if r.claim("eu-1", claimOf(secret("native", "eu-1"), "kc-fleet", nil)) {
		t.Fatal("the fleet namespace's claim is reported taken")
	}
	c, _ := r.Get("eu-1")
	if reg, _, ok := c.Registration(); !ok || string(reg.Kubeconfig) != "kc-fleet" || len(c.Claims) != 1 {
		t.Fatalf("eu-1 claimed back by the fleet namespace: %+v, want its kubeconfig and only its claim", c)
	}
	// Two claims of the fleet namespace still conflict.
	r.claim("eu-1", claimOf(Source{Format: "cluster-api", NamespacedName: types.NamespacedName{Namespace: "fleet-system", Name: "eu-kubeconfig"}}, "kc", nil))
	if c, _ := r.Get("eu-1"); c.Accepted() || c.Refusal.Reason != ReasonClusterNameConflict {
		t.Fatalf("two Secrets of the fleet namespace on one name: refusal %v, want %s", c.Refusal, ReasonClusterNameConflict)
	}
}

// TestSharedRegistryAssigns: in a shared registry a new name runs nowhere
// until assigned; a member's reports count only while it runs here; the
// state of a name let go is its owner's to know, and one taken over
// starts Pending. An unshared registry ignores assignments.
func TestSharedRegistryAssigns(t *testing.T) {
	r := NewShared("native")
	r.claim("a", claimOf(secret("native", "a"), "kc", nil))
	c, _ := r.Get("a")
	if c.Ownership != NotOwned || c.RunsHere() || c.State != "" {
		t.Fatalf("a new name in a shared registry: ownership %q, state %q, runs here %v", c.Ownership, c.State, c.RunsHere())
	}
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, nil)
	if c, _ := r.Get("a"); c.State != "" {
		t.Errorf("a report about a member that does not run here was recorded: %q", c.State)
	}

	r.Assign("a", "replica-1", Incoming)
	c, _ = r.Get("a")
	if !c.RunsHere() || c.Owned() || c.State != fleetv1alpha1.MemberStatePending || c.Owner != "replica-1" {
		t.Errorf("incoming: runs here %v, owned %v, state %q, owner %q", c.RunsHere(), c.Owned(), c.State, c.Owner)
	}
	r.ObserveState("a", fleetv1alpha1.MemberStateReady, nil)
	r.Assign("a", "replica-1", Owned)
	if c, _ := r.Get("a"); !c.Owned() || c.State != fleetv1alpha1.MemberStateReady {
		t.Errorf("owned: owned %v, state %q", c.Owned(), c.State)
	}
	r.Assign("a", "replica-2", NotOwned)
	if c, _ := r.Get("a"); c.RunsHere() || c.State != "" || c.Owner != "replica-2" {
		t.Errorf("let go: runs here %v, state %q, owner %q", c.RunsHere(), c.State, c.Owner)
	}

	alone := New("native")
	alone.claim("a", claimOf(secret("native", "a"), "kc", nil))
	alone.Assign("a", "replica-2", NotOwned)
	if c, _ := alone.Get("a"); !c.Owned() || c.Owner != "" {
		t.Errorf("an unshared registry took an assignment: ownership %q, owner %q", c.Ownership, c.Owner)
	}
}
