package registry

import (
	"crypto/sha256"
	"testing"
	"time"
)

// claimAt is a claim of the native Secret name, created at created.
func claimAt(name, kubeconfig string, created time.Time) Claim {
	c := claimOf(secret("native", name), kubeconfig, nil)
	c.Created = created
	return c
}

func fingerprint(kubeconfig string) [sha256.Size]byte { return sha256.Sum256([]byte(kubeconfig)) }

// duplicateOf returns whom name is refused in favour of, "" if accepted.
func duplicateOf(t *testing.T, r *Registry, name string) string {
	t.Helper()
	c, ok := r.Get(name)
	if !ok {
		t.Fatalf("%s is not registered", name)
	}
	if (c.DuplicateOf != "") != (c.Refusal != nil && c.Refusal.Reason == ReasonDuplicateCluster) || (c.DuplicateOf != "") == c.Accepted() {
		t.Fatalf("%s: DuplicateOf %q, refusal %v, accepted %v disagree", name, c.DuplicateOf, c.Refusal, c.Accepted())
	}
	return c.DuplicateOf
}

// TestTheOlderRegistrationKeepsItsCluster (issue 38): of two names of one
// cluster, the one registered first keeps it, whichever member reports
// first; the other is accepted again once the keeper goes.
func TestTheOlderRegistrationKeepsItsCluster(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := New("native")
	r.claim("old", claimAt("old", "kc-old", t0))
	r.claim("young", claimAt("young", "kc-young", t0.Add(time.Second)))

	// The younger name reports first: nothing else is known of the cluster.
	if keeper := r.Identify("young", fingerprint("kc-young"), "uid-1"); keeper != "young" {
		t.Fatalf("the only name known: keeper %q, want young", keeper)
	}
	// The older reports the same cluster: it keeps it, the younger is refused.
	if keeper := r.Identify("old", fingerprint("kc-old"), "uid-1"); keeper != "old" {
		t.Fatalf("keeper %q, want old", keeper)
	}
	if got := duplicateOf(t, r, "young"); got != "old" {
		t.Fatalf("young is a duplicate of %q, want old", got)
	}
	if keeper := r.Identify("young", fingerprint("kc-young"), "uid-1"); keeper != "old" {
		t.Fatalf("young reporting again: keeper %q, want old", keeper)
	}
	// A stale kubeconfig's report is no answer.
	if keeper := r.Identify("old", fingerprint("kc-older"), "uid-1"); keeper != "" {
		t.Fatalf("a report for another kubeconfig: keeper %q, want none", keeper)
	}
	// The keeper goes: the younger name is accepted again.
	r.withdraw(secret("native", "old"))
	if got := duplicateOf(t, r, "young"); got != "" {
		t.Fatalf("after the keeper went: young is a duplicate of %q", got)
	}
}

// TestDuplicatesFollowKubeconfigsAndRecords: a keeper whose kubeconfig
// changes lets its cluster go until its member reports again; the hub's
// record stands for a name whose member has not reported, and a name
// refused for its claims competes for nothing.
func TestDuplicatesFollowKubeconfigsAndRecords(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := New("native")
	// Recorded before this process saw any claim, as at a restart.
	r.Record("a", "uid-1")
	r.claim("a", claimAt("a", "kc-a", t0))
	r.claim("b", claimAt("b", "kc-b", t0)) // same age: the name decides
	if keeper := r.Identify("b", fingerprint("kc-b"), "uid-1"); keeper != "a" {
		t.Fatalf("b against a's record: keeper %q, want a", keeper)
	}
	// a's kubeconfig changes: it may reach another cluster now.
	r.claim("a", claimAt("a", "kc-a2", t0))
	if got := duplicateOf(t, r, "b"); got != "" {
		t.Fatalf("after a's kubeconfig changed: b is a duplicate of %q", got)
	}
	// The hub still records a's old identity: it no longer applies.
	r.Record("a", "uid-0")
	r.Record("a", "uid-1")
	if c, _ := r.Get("a"); c.ClusterID != "" {
		t.Fatalf("a's old record applied after its kubeconfig changed: %q", c.ClusterID)
	}
	if keeper := r.Identify("b", fingerprint("kc-b"), "uid-1"); keeper != "b" {
		t.Fatalf("keeper %q, want b", keeper)
	}
	// a reports the same cluster again: the older name (by name) keeps it.
	if keeper := r.Identify("a", fingerprint("kc-a2"), "uid-1"); keeper != "a" {
		t.Fatalf("keeper %q, want a", keeper)
	}
	if got := duplicateOf(t, r, "b"); got != "a" {
		t.Fatalf("b is a duplicate of %q, want a", got)
	}
	// Another Secret claims the name a: a is refused for the conflict,
	// and competes for nothing; b keeps the cluster.
	r.claim("a", claimAt("a-other", "kc-x", t0))
	if c, _ := r.Get("a"); c.Accepted() || c.Refusal.Reason != ReasonClusterNameConflict {
		t.Fatalf("a: refusal %v, want %s", c.Refusal, ReasonClusterNameConflict)
	}
	if got := duplicateOf(t, r, "b"); got != "" {
		t.Fatalf("b is a duplicate of %q, of a name refused for its claims", got)
	}
}

// TestAllowedDuplicatesAreNotRefused: a registry that allows duplicates
// refuses no name of one cluster, neither for its member's report nor
// for the hub's records, as a manager run once without allowing them
// leaves.
func TestAllowedDuplicatesAreNotRefused(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := New("native")
	r.allowDuplicates = true
	r.Record("old", "uid-1")
	r.claim("old", claimAt("old", "kc-old", t0))
	r.claim("young", claimAt("young", "kc-young", t0.Add(time.Second)))
	r.Record("young", "uid-1")
	if keeper := r.Identify("young", fingerprint("kc-young"), "uid-1"); keeper != "young" {
		t.Fatalf("young: keeper %q, want young", keeper)
	}
	for _, name := range []string{"old", "young"} {
		if got := duplicateOf(t, r, name); got != "" {
			t.Errorf("%s is a duplicate of %q", name, got)
		}
	}
}
