package clusterprofile_test

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// A fleet that publishes ClusterProfiles keeps one per member, with its
// health from the manager's probes, its version, its labels
// and its server and CA, and no credential; it follows the member from
// Ready to Unhealthy and back, is deleted with it, and leaves the profiles
// of other cluster managers alone.
func TestClusterProfilesArePublished(t *testing.T) {
	t.Parallel()
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-published"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	foreign := "published-foreign"
	suite.CreateProfile(t, ns, foreign, "secretreader", 0, "nothing", nil)
	before := suite.GetProfile(t, ns, foreign)

	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Configure: fleettest.QuickHealth, Deferred: true})
	if err := clusterprofile.Add(f.Manager, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	f.Start(t)
	kc, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	const name = "published-a"
	secret := f.Register(t, name, kc)
	secret.Labels["tier"] = "gold"
	if err := suite.HubClient.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}

	var cp *v1alpha1.ClusterProfile
	poll.Until(t, "a healthy profile with the member's version and labels", func() bool {
		cp = suite.GetProfile(t, ns, name)
		return fleettest.HealthyIs(cp, metav1.ConditionTrue) && cp.Status.Version.Kubernetes != "" && cp.Labels["tier"] == "gold"
	})
	if cp.Spec.ClusterManager.Name != clusterprofile.ClusterManager || cp.Labels[v1alpha1.LabelClusterManagerKey] != clusterprofile.ClusterManager {
		t.Fatalf("profile's cluster manager %q, label %q: want %q", cp.Spec.ClusterManager.Name, cp.Labels[v1alpha1.LabelClusterManagerKey], clusterprofile.ClusterManager)
	}
	server, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Status.AccessProviders) != 1 || cp.Status.AccessProviders[0].Cluster.Server != server.Clusters[server.Contexts[server.CurrentContext].Cluster].Server ||
		len(cp.Status.AccessProviders[0].Cluster.CertificateAuthorityData) == 0 {
		t.Fatalf("access providers %+v: want the member's server and CA", cp.Status.AccessProviders)
	}
	published, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := kubeconfigtest.CredentialsOf(kc)
	if err != nil {
		t.Fatal(err)
	}
	doc := &fleettest.Logs{}
	doc.Add(string(published))
	if leaked := doc.Holding(secrets); leaked != "" {
		t.Fatalf("the published profile holds credential material: %s", leaked)
	}

	proxy.Down()
	poll.Until(t, "the profile of an Unhealthy member not healthy", func() bool { return fleettest.HealthyIs(suite.GetProfile(t, ns, name), metav1.ConditionFalse) })
	down := meta.FindStatusCondition(suite.GetProfile(t, ns, name).Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy).LastTransitionTime
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile healthy again", func() bool { return fleettest.HealthyIs(suite.GetProfile(t, ns, name), metav1.ConditionTrue) })
	if up := meta.FindStatusCondition(suite.GetProfile(t, ns, name).Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy).LastTransitionTime; !up.After(down.Time) && !up.Equal(&down) {
		t.Fatalf("the condition's transition time %s is before the member went down at %s", up, down)
	}

	if err := suite.HubClient.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile deleted with its member", func() bool { return suite.GetProfile(t, ns, name) == nil })
	if after := suite.GetProfile(t, ns, foreign); after == nil || after.ResourceVersion != before.ResourceVersion {
		t.Fatal("the profile of another cluster manager was touched")
	}
}

// healthReason returns the reason of cp's ControlPlaneHealthy condition
// if its status is status, else "".
func healthReason(cp *v1alpha1.ClusterProfile, status metav1.ConditionStatus) string {
	if !fleettest.HealthyIs(cp, status) {
		return ""
	}
	return meta.FindStatusCondition(cp.Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy).Reason
}

// The security review: a refusal deleted the member's published profile,
// so that consumers of the inventory saw the cluster vanish. A refused
// registration (a kubeconfig the policy refuses, a name conflict) keeps
// its profile, ControlPlaneHealthy Unknown with the refusal's reason, and
// no access provider; the profile goes with the name.
func TestRefusedMemberKeepsItsClusterProfile(t *testing.T) {
	t.Parallel()
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-refused"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Deferred: true})
	if err := clusterprofile.Add(f.Manager, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	f.Start(t)
	const name = "refused-later"
	secret := f.Register(t, name, suite.Kubeconfigs[0])
	poll.Until(t, "a healthy profile", func() bool { return fleettest.HealthyIs(suite.GetProfile(t, ns, name), metav1.ConditionTrue) })

	secret.Data[registry.KubeconfigKey] = fleettest.HostileKubeconfig("https://10.0.0.1", `{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}`)
	if err := suite.HubClient.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile of a refused kubeconfig, Unknown: FileReference", func() bool {
		return healthReason(suite.GetProfile(t, ns, name), metav1.ConditionUnknown) == "FileReference"
	})
	if got := suite.GetProfile(t, ns, name).Status.AccessProviders; len(got) != 0 {
		t.Errorf("access providers of the refused member %+v, want none", got)
	}

	contender := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "contender", Labels: map[string]string{registry.KubeconfigLabel: "true"},
			Annotations: map[string]string{registry.ClusterNameAnnotation: name}},
		Data: map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[1]},
	}
	if err := suite.HubClient.Create(t.Context(), contender); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile of a contested name, Unknown: ClusterNameConflict", func() bool {
		return healthReason(suite.GetProfile(t, ns, name), metav1.ConditionUnknown) == registry.ReasonClusterNameConflict
	})

	for _, s := range []*corev1.Secret{secret, contender} {
		if err := suite.HubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the profile deleted with the name", func() bool { return suite.GetProfile(t, ns, name) == nil })
}
