package propagation_test

import (
	"context"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestFirstRevisionGoesOneMemberAtATime: a new Progressive Propagation of
// maxConcurrency 1 and a minSuccessTime over three members gives its
// first revision to one member at a time. Sampled often from its
// creation until the rollout completes, no record the hub holds gives
// the revision to more members than are done plus one, and a member
// holds a copy only once the record gives it the revision.
func TestFirstRevisionGoesOneMemberAtATime(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	names := []string{"m0", "m1", "m2"}
	for i, name := range names {
		f.register(i, name, map[string]string{"env": "prod"})
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	p := f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: time.Second},
		}}
	})
	holding := map[string]bool{}
	poll.Until(t, "the rollout of revision 1 complete", func() bool {
		var got fleetv1alpha1.Propagation
		if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: p.Name}, &got); err != nil {
			t.Fatal(err)
		}
		r := got.Status.Rollout
		var given []string
		for _, name := range names {
			if givenRevision(r, name) == 1 {
				given = append(given, name)
			}
		}
		if r != nil && len(given) > int(r.Updated)+1 {
			t.Fatalf("the hub's record gives revision 1 to %v while %d members are done (maxConcurrency 1): %+v", given, r.Updated, r)
		}
		for i, name := range names {
			if holding[name] || f.copyIn(i, "web") == nil {
				continue
			}
			holding[name] = true
			// The record was read before the copy: a member that holds one
			// was given the revision in it, or in a newer one.
			if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: p.Name}, &got); err != nil {
				t.Fatal(err)
			}
			if givenRevision(got.Status.Rollout, name) != 1 {
				t.Fatalf("member %s holds a copy that status.rollout does not give it: %+v", name, got.Status.Rollout)
			}
		}
		return r != nil && r.Phase == fleetv1alpha1.RolloutComplete && r.Revision == 1 && len(holding) == len(names)
	})
}

// givenRevision is the revision rollout gives member, 0 for none.
func givenRevision(rollout *fleetv1alpha1.RolloutStatus, member string) int64 {
	if rollout == nil {
		return 0
	}
	for _, g := range rollout.Members {
		if slices.Contains(g.Names, member) {
			return g.Revision
		}
	}
	return 0
}

// TestProgressiveClusterPropagationCompletes: a ClusterPropagation's
// revision is taken by the hub, owned by the ClusterPropagation, and a
// Progressive one rolls it out to every member.
func TestProgressiveClusterPropagationCompletes(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: suite.Name("guard-reader")},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}
	if err := f.hub.Client.Create(t.Context(), role); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		t.Cleanup(func() {
			_ = suite.MemberClients[i].Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role.Name}})
		})
	}
	name := suite.Name("guard")
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod", testFleetLabel: f.namespace})},
			Strategy:  fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive},
		},
	}
	if err := f.hub.Client.Create(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	f.waitClusterStatus(name, "rollout of revision 1 complete", func(st *fleetv1alpha1.PropagationStatus) bool {
		return st.Rollout != nil && st.Rollout.Phase == fleetv1alpha1.RolloutComplete && st.Rollout.Revision == 1 && st.Rollout.Updated == 2
	})
	rev := &fleetv1alpha1.PropagationRevision{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.namespace, Name: "clusterpropagation-" + name + "-1"}, rev); err != nil {
		t.Fatalf("the ClusterPropagation's revision 1: %v", err)
	}
	if owner := metav1.GetControllerOf(rev); owner == nil || owner.Kind != "ClusterPropagation" || owner.APIVersion != fleetv1alpha1.GroupVersion.String() || owner.UID != cp.UID {
		t.Errorf("revision 1 is controlled by %+v, want ClusterPropagation %s", owner, name)
	}
	for i := range 2 {
		if err := suite.MemberClients[i].Get(t.Context(), types.NamespacedName{Name: role.Name}, &rbacv1.ClusterRole{}); err != nil {
			t.Errorf("member %d: the ClusterRole's copy: %v", i, err)
		}
	}
}
