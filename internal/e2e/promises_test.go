package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// promise is a sentence of the docs and the test that checks it.
type promise struct {
	sentence string
	test     string
}

// promises are the sentences of docs/rollouts.md, docs/clusterpropagation.md,
// docs/sharding.md and docs/propagation.md the suite checks, each with its
// test.
var promises = []promise{
	{"A new Propagation's first revision goes in order too: the members not given it yet are `Pending`, `WaitingForRollout`, and hold no copy.",
		"TestFirstRevisionOfANewPropagationGoesOneAtATime"},
	{"`maxConcurrency` (default 1) is how many members may be between revisions at once: given the revision and not yet done, or failed.",
		"TestMaxConcurrencyBoundsMembersBetweenRevisions"},
	{"`minSuccessTime` (default 0) is how long a member must have been Available with the revision to be done.",
		"TestMinSuccessTimeHoldsEachMemberBeforeTheNext"},
	{"A group starts once every member of the groups before it is done.",
		"TestGroupStartsOnceTheGroupsBeforeAreDone"},
	{"Once `maxFailures` members given the revision have failed, the rollout stops: no other member is given it, and those that have it keep it (nothing is rolled back by itself).",
		"TestStoppedRolloutGivesNoOneElseTheRevision"},
	{"A member not in maintenance takes the hub's content as soon as the hub holds it, as before revisions: no member waits for another, and a failure stops nothing (the member's result reports it).",
		"TestStrategyAllGivesEveryMemberTheContentAtOnce"},
	{"`spec.paused: true` gives no member another revision until it is unset.",
		"TestPauseGivesNoMemberAnotherRevision"},
	{"A member given an earlier revision removes the copies that revision does not hold, as any copy no longer wanted.",
		"TestPinnedEarlierRevisionRemovesWhatItDoesNotHold"},
	{"A member that becomes selected (newly registered or labelled, or uncordoned before it was ever given a revision) is given one at once",
		"TestMemberThatJoinsIsGivenARevisionAtOnce"},
	{"A cordoned member takes no new revision and no new Propagation, and keeps the copies its revision makes",
		"TestCordonedMemberTakesNoNewRevision"},
	{"a drained one has each Propagation's copies removed, no more members at once than the Propagation's `disruptionBudget.maxUnavailable` (default 1) allows.",
		"TestDrainRemovesCopiesWithinTheBudget"},
	{"A copy of a container that is no longer wanted is deleted only when it holds nothing but the Propagation's own copies",
		"TestContainerIsRemovedOnlyWhenEmpty"},
	{"In each member the CRD and the Namespace come first; the Gadget waits (`WaitingForKind`, never a failure) until the CRD is Established there, and is applied at once then.",
		"TestClusterPropagationAppliesTheBaselineInOrder"},
	{"`adopt` takes over an object the member made, never deletes it: when no longer wanted it is orphaned",
		"TestAdoptedObjectIsLetGoNeverDeleted"},
	{"Another fleet's copy, even one whose fleet namespace has the same name on another hub, is left alone and reported as `AlreadyExists`; `adopt` does not take it.",
		"TestAnotherFleetsCopyIsLeftAlone"},
	{"A member applies a revision only when `status.rollout.members`, as the hub holds it, gives it",
		"TestShardedRolloutKeepsItsGuardThroughASIGKILL"},
	{"With `run --shard` every replica works, each on its share of the members, so a fleet can outgrow one process",
		"TestShardedRolloutKeepsItsGuardThroughASIGKILL"},
	{"A replica that crashed (SIGKILL) keeps its Lease until it expires: its members move once it has not changed for `--shard-lease-duration` and a quorum read confirms it, then through the handoff.",
		"TestShardedRolloutKeepsItsGuardThroughASIGKILL"},
}

// TestEveryQuotedSentenceIsInTheDocs fails when a sentence the suite
// quotes is no longer in docs/*.md (whitespace aside), or names a test the
// package does not have, or a test of the package quotes nothing: the
// docs and the suite cannot drift apart.
func TestEveryQuotedSentenceIsInTheDocs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	var docs strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs.WriteString(normalize(string(b)))
		docs.WriteString("\n")
	}
	tests := testsOfThePackage(t)
	quoted := map[string]bool{}
	for _, p := range promises {
		if !strings.Contains(docs.String(), normalize(p.sentence)) {
			t.Errorf("%s quotes a sentence no docs/*.md holds: %q", p.test, p.sentence)
		}
		if !tests[p.test] {
			t.Errorf("the sentence %q names %s, which the package does not have", p.sentence, p.test)
		}
		quoted[p.test] = true
	}
	for name := range tests {
		if !quoted[name] && name != t.Name() {
			t.Errorf("%s quotes no sentence of the docs", name)
		}
	}
}

// normalize collapses runs of white space into one space.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// testsOfThePackage returns the names of the package's Test functions.
func testsOfThePackage(t *testing.T) map[string]bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
					out[fn.Name.Name] = true
				}
			}
		}
	}
	return out
}
