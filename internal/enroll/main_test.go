package enroll_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
)

// The package's API servers: a hub with the fleet's CRDs, and a member.
var hubEnv, memberEnv *envtest.Environment

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(fleetv1alpha1.AddToScheme(scheme))
}

var suite = &fleettest.Suite{MemberCount: 1, Setup: func(s *fleettest.Suite) error {
	hubEnv, memberEnv = s.Hub, s.Members[0]
	return controlplane.AggregateClusterRoles(memberEnv.Config)
}}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// clients returns admin clients of the hub and the member, and a fresh
// fleet namespace on the hub. Whatever the test registers in the member
// is removed when it ends, so the next test finds the member bare.
func clients(t *testing.T) (hub, member client.Client, fleetNS string) {
	t.Helper()
	suite.Need(t)
	var err error
	if hub, err = client.New(hubEnv.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if member, err = client.New(memberEnv.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resetMember(t) })
	return hub, member, fleetNamespace(t, hub)
}

// fleetNamespace creates a fresh fleet namespace on the hub: a fleet of
// its own, with an identity of its own once register reads it.
func fleetNamespace(t *testing.T, hub client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := hub.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// fleetID returns the identity of the fleet of namespace ns.
func fleetID(t *testing.T, hub client.Client, ns string) string {
	t.Helper()
	id, err := enroll.ReadFleetID(t.Context(), hub, ns)
	if err != nil || id == "" {
		t.Fatalf("the identity of fleet %s: %q, %v", ns, id, err)
	}
	return id
}

// resetMember removes what any register left in the member, whatever its
// fleet, and fleet-system, which envtest, without a namespace controller,
// would otherwise keep terminating forever.
func resetMember(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(memberEnv.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Without a namespace controller, what a removed namespace held would
	// still be there when the next test creates it again.
	inFleetSystem := client.InNamespace(enroll.MemberNamespace)
	lists := map[client.ObjectList]client.ListOption{
		&rbacv1.ClusterRoleBindingList{}: client.HasLabels{enroll.ManagedByLabel},
		&rbacv1.RoleBindingList{}:        client.HasLabels{enroll.ManagedByLabel},
		&rbacv1.ClusterRoleList{}:        client.HasLabels{enroll.ManagedByLabel},
		&rbacv1.RoleList{}:               inFleetSystem,
		new(rbacv1.RoleList):             client.HasLabels{enroll.ManagedByLabel},
		&corev1.ServiceAccountList{}:     inFleetSystem,
		&corev1.ConfigMapList{}:          inFleetSystem,
		&corev1.SecretList{}:             inFleetSystem,
	}
	for list, opt := range lists {
		if err := c.List(ctx, list, opt); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			return client.IgnoreNotFound(c.Delete(ctx, o.(client.Object)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := controlplane.RemoveNamespace(ctx, memberEnv.Config, enroll.MemberNamespace); err != nil {
		t.Fatal(err)
	}
}
