package propagation_test

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// TestNamespacedMemberReceivesPropagations registers a member as
// `register --namespaces` does: its user's rights are bound by a
// RoleBinding in the Propagation's namespace only, and it may not read
// Namespaces. The Propagation is Applied there, and its deletion removes
// the copy.
func TestNamespacedMemberReceivesPropagations(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	user := suite.Name("team-editor")
	fleettest.CreateNamespace(t, suite.MemberClients[1], f.team)
	kc := memberUser(t, 1, user, f.team,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.registerKubeconfig("west", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	p := f.waitStatus("web", "Applied in both members", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Applied == 2 || p.Status.Failed > 0 })
	if p.Status.Applied != 2 {
		t.Fatalf("status = %+v, want both members Applied", p.Status)
	}
	f.waitCopy(1, "web", "created by the namespaced member's user", dataIs("color", "blue"))

	if err := f.hub.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(1, "web", "removed with its Propagation", gone)
	poll.Until(t, "the Propagation gone", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
	})
}

// TestMissingNamespaceTheManagerMayNotCreateFailsThatMember registers a
// member whose user may write ConfigMaps everywhere but may neither read
// nor create Namespaces, and lacks the Propagation's namespace: that
// member fails Forbidden, saying the namespace is missing.
func TestMissingNamespaceTheManagerMayNotCreateFailsThatMember(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	user := suite.Name("configmap-writer")
	kc := memberUser(t, 2, user, "",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.registerKubeconfig("lab", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	p := f.waitStatus("web", "lab Failed", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Applied == 1 && p.Status.Failed == 1 })
	if m := p.Status.Members[0]; m.Reason != fleetv1alpha1.ReasonForbidden || !strings.Contains(m.Message, "has no namespace "+f.team) {
		t.Errorf("lab: %s %q, want Forbidden, saying the namespace is missing", m.Reason, m.Message)
	}
}
