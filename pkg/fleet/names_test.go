package fleet_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// A tenant Secret claiming a member's name changes nothing of that member.
// Names come from the fleet namespace: a Cluster API Secret of a tenant's
// namespace, with the name annotation or a name that its namespace prefix
// makes a member's, and labels of its choosing, neither stops, renames,
// relabels nor reconnects the member; the annotation outside the fleet
// namespace is ignored, and a name the fleet namespace gives is reported
// taken on the tenant's Secret. (The security review: a tenant's
// x-kubeconfig claiming eu-1 stopped the real eu-1.)
func TestTenantSecretClaimingAMembersNameChangesNothing(t *testing.T) {
	const tenantNS = "tenant-a"
	fleettest.CreateNamespace(t, suite.HubClient, tenantNS)
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		fleettest.QuickHealth(o)
		o.SecretFormats = []registry.Format{registry.ClusterAPIFormat(nil)}
	}})
	// eu-1, and a member whose name a tenant-a Cluster API Secret would
	// give its cluster.
	for _, name := range []string{"eu-1", tenantNS + ".db"} {
		s := f.Register(t, name, suite.Kubeconfigs[0])
		s.Labels["env"] = "prod"
		if err := suite.HubClient.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitEngaged(t, "eu-1", tenantNS+".db")
	for _, name := range []string{"eu-1", tenantNS + ".db"} {
		f.WaitState(t, name, fleetv1alpha1.MemberStateReady)
	}

	tenant := func(secretName string, annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: secretName, Annotations: annotations,
				Labels: map[string]string{"env": "tenant", "tier": "gold"}},
			Type: registry.ClusterAPISecretType,
			Data: map[string][]byte{registry.ClusterAPIKey: suite.Kubeconfigs[1]},
		}
	}
	for _, s := range []*corev1.Secret{
		tenant("x-kubeconfig", map[string]string{registry.ClusterNameAnnotation: "eu-1"}),
		tenant("db-kubeconfig", nil),
	} {
		if err := suite.HubClient.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	// The tenant's annotated Secret registers its own cluster, under its
	// namespace; the other is told its name is taken.
	f.WaitEngaged(t, tenantNS+".x")
	poll.Until(t, "ClusterNameTaken reported on the tenant's Secret", func() bool {
		events := &eventsv1.EventList{}
		if err := suite.HubClient.List(t.Context(), events, client.InNamespace(tenantNS)); err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "db-kubeconfig" && e.Reason == registry.ReasonClusterNameTaken && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	})

	for _, name := range []string{"eu-1", tenantNS + ".db"} {
		if state, _ := f.Manager.MemberState(name); state != fleetv1alpha1.MemberStateReady || unhealthy(f, name) != "" {
			t.Errorf("%s is %s, or was Unhealthy, once a tenant claimed its name", name, state)
		}
		wantHost(t, f, name, suite.Members[0])
		poll.Until(t, "MemberCluster "+name+" as the fleet namespace registers it", func() bool {
			mc := &fleetv1alpha1.MemberCluster{}
			err := suite.HubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc)
			return err == nil && mc.Labels["env"] == "prod" && mc.Spec.SecretRef.Namespace == f.Namespace && mc.Spec.SecretRef.Name == name
		})
		if engaged := f.Logs.Count(`"cluster"="`+name+`"`, `"msg"="Engaging member"`); engaged != 1 {
			t.Errorf("%s was engaged %d times: a tenant's claim rebuilt it", name, engaged)
		}
	}
	if f.Logs.Find(registry.ReasonClusterNameConflict) {
		t.Error("a tenant's claim made a name conflict")
	}
}
