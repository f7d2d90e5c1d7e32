package propagation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/rollout"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// everyone reaches every member, as where tenancy is Off.
func everyone(*registry.Cluster) bool { return true }

// TestPlannerGivesNoRevisionToAMemberTenancyExcludes: of two members
// spec.members selects, the one no TenancyPolicy lets the namespace reach
// is not planned: given no revision, though it held the previous one, and
// holding no slot of a rollout of one member at a time.
func TestPlannerGivesNoRevisionToAMemberTenancyExcludes(t *testing.T) {
	t.Parallel()
	reach := tenancy.New([]fleetv1alpha1.TenancyPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "team-dev"},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{"team"}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{"dev"}},
		},
	}}).For(tenancy.Namespace{Name: "team"})
	reaches := func(c *registry.Cluster) bool { ok, _ := reach.Reaches(tenancyMember(c, "fleet-system")); return ok }
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 2},
		Spec: fleetv1alpha1.PropagationSpec{
			Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(1))}},
		},
		Status: fleetv1alpha1.PropagationStatus{Rollout: &fleetv1alpha1.RolloutStatus{Revision: 1, Members: []fleetv1alpha1.RevisionMembers{{Revision: 1, Names: []string{"dev", "prod"}}}}},
	}
	var clusters []*registry.Cluster
	for _, name := range []string{"dev", "prod"} {
		clusters = append(clusters, &registry.Cluster{Name: name, Claims: []registry.Claim{{}}, State: fleetv1alpha1.MemberStateReady, Ownership: registry.Owned})
	}
	revs := []fleetv1alpha1.PropagationRevision{madeRevision(1), madeRevision(2)}
	st := &fleetv1alpha1.PropagationStatus{}
	members := plannedMembersOf(p, st, clusters, reaches, nil, nil, revs, 2)
	if len(members) != 1 || members[0].Name != "dev" {
		t.Fatalf("planned %v, want dev only", members)
	}
	plan := rollout.PlanOf(rollout.Input{Spec: &p.Spec, Target: 2, Newest: 2, Members: members, Now: time.Now(), Kept: []int64{1, 2}})
	for _, g := range plan.Status.Members {
		for _, name := range g.Names {
			if name == "prod" {
				t.Errorf("prod, which tenancy excludes, is given revision %d", g.Revision)
			}
		}
	}
	if everyoneMembers := plannedMembersOf(p, st, clusters, everyone, nil, nil, revs, 2); len(everyoneMembers) != 2 {
		t.Errorf("with tenancy Off, planned %d members, want 2", len(everyoneMembers))
	}
}
