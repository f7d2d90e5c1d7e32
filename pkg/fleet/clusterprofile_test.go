package fleet_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// secretReaderPlugin builds the module's reference secretreader plugin,
// which reads a member's token from the hub Secret named by the profile's
// clusterName, in the namespace of its kubeconfig's context, and returns
// the plugin and that kubeconfig.
func secretReaderPlugin(t *testing.T, namespace string) (plugin, hubKubeconfig string) {
	t.Helper()
	dir := t.TempDir()
	plugin = filepath.Join(dir, "secretreader-plugin")
	build := exec.Command("go", "build", "-o", plugin, "sigs.k8s.io/cluster-inventory-api/plugins/secretreader/cmd/plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the secretreader plugin: %v\n%s", err, out)
	}
	kc, err := controlplane.AdminKubeconfig(suite.Hub, "secretreader")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = namespace
	hubKubeconfig = filepath.Join(dir, "hub")
	if err := clientcmd.WriteToFile(*cfg, hubKubeconfig); err != nil {
		t.Fatal(err)
	}
	return plugin, hubKubeconfig
}

// profileMember makes member i reachable with a token of a service
// account that may read ConfigMaps, kept in hub Secret ns/secretName for
// the secretreader plugin.
func profileMember(t *testing.T, i int, ns, secretName string) {
	t.Helper()
	kc, err := clientcmd.Load(serviceAccountMember(t, i, ns))
	if err != nil {
		t.Fatal(err)
	}
	// Envtest runs no aggregation controller, so the view role is empty.
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-configmaps"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-configmaps"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns + "-configmaps"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "fleet-manager"}}},
	} {
		if err := suite.MemberClients[i].Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
		Data: map[string][]byte{"token": []byte(kc.AuthInfos["fleet-manager"].Token)}}
	if err := suite.HubClient.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
}

// profileFleet starts a fleet that reads the ClusterProfiles of namespace
// ns through the secretreader plugin, whose hub Secret ns/<ns>.<profile>
// holds a token of member i; the plugin is allowed if allowPlugin.
func profileFleet(t *testing.T, ns string, i int, profile string, allowPlugin bool) *fleettest.Fleet {
	t.Helper()
	suite.InstallClusterProfileCRD(t)
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)
	profileMember(t, i, ns, ns+"."+profile)
	return suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		if allowPlugin {
			o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: profileProviders(plugin, hubKubeconfig)}
	}})
}

// profileProviders is a provider file naming the secretreader plugin,
// run with the hub kubeconfig hubKubeconfig.
func profileProviders(plugin, hubKubeconfig string) *access.Config {
	return access.New([]access.Provider{{Name: "secretreader", ExecConfig: &clientcmdapi.ExecConfig{
		APIVersion:         "client.authentication.k8s.io/v1",
		Command:            plugin,
		Env:                []clientcmdapi.ExecEnvVar{{Name: "KUBECONFIG", Value: hubKubeconfig}},
		ProvideClusterInfo: true,
	}}})
}

// A ClusterProfile that lists an access provider of the provider file is
// a member named <namespace>.<name>, labelled as the profile, reached
// with the credentials its exec plugin (the module's secretreader) gives;
// a plugin the policy does not allow is refused with its reason.
func TestClusterProfileIsAMember(t *testing.T) {
	const ns = "inventory-a"
	f := profileFleet(t, ns, 0, "east", true)
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "profiles", ns, fleet.Members, r)
	suite.CreateProfile(t, ns, "east", "secretreader", 0, "member-0", map[string]string{"region": "east"})
	const name = ns + ".east"
	f.WaitState(t, name, member.StateReady)
	fleettest.CreateConfigMap(t, suite.MemberClients[0], ns, "hello")
	r.WaitFor(t, fleettest.Request(name, ns, "hello"))
	poll.Until(t, "a MemberCluster with the profile's labels and format", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		err := suite.HubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc)
		return err == nil && mc.Labels["region"] == "east" && mc.Spec.SecretRef.Format == fleetv1alpha1.FormatClusterProfile
	})

	if err := suite.ProfileClient(t).Delete(t.Context(), &v1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the member of the deleted profile removed", func() bool {
		_, ok := f.Manager.MemberState(name)
		return !ok
	})
}

func TestClusterProfileWithAPluginNotAllowedIsRefused(t *testing.T) {
	const ns = "inventory-b"
	f := profileFleet(t, ns, 1, "west", false)
	suite.CreateProfile(t, ns, "west", "secretreader", 1, "member-1", nil)
	const name = ns + ".west"
	poll.Until(t, "the profile's member refused", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc); err != nil {
			return false
		}
		c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ExecPluginRefused"
	})
	if _, ok := f.Manager.MemberState(name); ok {
		t.Fatal("a member runs for a profile whose plugin the policy refuses")
	}
}

// A fleet that publishes ClusterProfiles keeps one per member, with its
// health from the manager's probes, its version, its labels as properties
// and its server and CA, and no credential; it follows the member from
// Ready to Unhealthy and back, is deleted with it, and leaves the profiles
// of other cluster managers alone.
func TestClusterProfilesArePublished(t *testing.T) {
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
		return fleettest.HealthyIs(cp, metav1.ConditionTrue) && cp.Status.Version.Kubernetes != "" &&
			slices.ContainsFunc(cp.Status.Properties, func(p v1alpha1.Property) bool { return p.Name == "tier" && p.Value == "gold" })
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

// The security review: two fleets that export and read ClusterProfiles
// registered each other's profiles recursively (<ns>.<name>,
// <ns>.<ns>.<name>, ...). No fleet reads a profile any fleet-manager
// published, though its provider file names the published access
// provider; it reads the other cluster managers' in the same namespace.
func TestPublishedClusterProfilesAreNotRead(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-round-trip"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)

	publisher := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Deferred: true})
	if err := clusterprofile.Add(publisher.Manager, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	publisher.Start(t)
	const name = "round-trip"
	publisher.Register(t, name, suite.Kubeconfigs[1])
	poll.Until(t, "the published profile", func() bool { return fleettest.HealthyIs(suite.GetProfile(t, ns, name), metav1.ConditionTrue) })
	// Another cluster manager's profile, offering the same provider.
	suite.CreateProfile(t, ns, "other", clusterprofile.AccessProvider, 1, "other", nil)

	providers := access.New([]access.Provider{{Name: clusterprofile.AccessProvider, ExecConfig: profileProviders(plugin, hubKubeconfig).Providers[0].ExecConfig}})
	reader := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: providers}
	}})
	reader.WaitSynced(t)
	if _, ok := reader.Manager.Registry().Get(ns + ".other"); !ok {
		t.Fatal("the other cluster manager's profile is not registered")
	}
	if _, ok := reader.Manager.Registry().Get(ns + "." + name); ok {
		t.Fatal("the profile another fleet published is registered")
	}
}

// The security review: a profile writer chose the clusterName the
// secretreader plugin reads, so that a victim's token went to the
// writer's server. The plugin reads the token kept for the profile's own
// cluster name, <namespace>.<name>: here the one that works at the
// server the profile names, unlike the victim's.
func TestClusterProfileCannotChooseItsCredentials(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-attacker"
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)
	profileMember(t, 0, ns, "victim")
	profileMember(t, 1, ns, ns+".attacker")
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: profileProviders(plugin, hubKubeconfig)}
	}})
	// The attacker's server is member 1, where the victim's token of
	// member 0 is worthless and its own works.
	suite.CreateProfile(t, ns, "attacker", "secretreader", 1, "victim", nil)
	f.WaitState(t, ns+".attacker", member.StateReady)
}

// ClusterProfiles are read from the namespaces named, none by default:
// whoever writes a profile's status chooses where its credentials go.
func TestClusterProfilesOfNoNamespaceByDefault(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-unnamed"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	suite.CreateProfile(t, ns, "unnamed", "secretreader", 0, "unnamed", nil)
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		o.ClusterProfiles = &registry.ClusterProfiles{Providers: profileProviders("secretreader-plugin", "")}
	}})
	f.WaitSynced(t)
	if _, ok := f.Manager.Registry().Get(ns + ".unnamed"); ok {
		t.Fatal("a profile of a namespace not named is registered")
	}
	if !f.Logs.Find("Reading no ClusterProfiles") {
		t.Error("no log line says why no ClusterProfile is read")
	}
}

// Credentials from a profile's exec plugin that expire within a second
// are renewed by client-go's exec authenticator, at the member's next
// request (here its probes, each a review): the member stays Ready, and
// its cluster is not rebuilt.
func TestClusterProfileCredentialsRenew(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	const ns = "inventory-renew"
	dir := t.TempDir()
	plugin := filepath.Join(dir, "expiring-plugin")
	if out, err := exec.Command("go", "build", "-o", plugin, "./testdata/expiringplugin").CombinedOutput(); err != nil {
		t.Fatalf("building the test plugin: %v\n%s", err, out)
	}
	kc, err := clientcmd.Load(serviceAccountMember(t, 0, ns))
	if err != nil {
		t.Fatal(err)
	}
	tokenFile, calls := filepath.Join(dir, "token"), filepath.Join(dir, "calls")
	if err := os.WriteFile(tokenFile, []byte(kc.AuthInfos["fleet-manager"].Token), 0o600); err != nil {
		t.Fatal(err)
	}
	providers := access.New([]access.Provider{{Name: "expiring", ExecConfig: &clientcmdapi.ExecConfig{
		APIVersion:         "client.authentication.k8s.io/v1",
		Command:            plugin,
		Env:                []clientcmdapi.ExecEnvVar{{Name: "TOKEN_FILE", Value: tokenFile}, {Name: "TOKEN_TTL", Value: "1s"}, {Name: "CALLS", Value: calls}},
		ProvideClusterInfo: true,
	}}})
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		fleettest.QuickHealth(o)
		o.MemberHealth.ReviewInterval = o.MemberHealth.Interval
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: providers}
	}})
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	suite.CreateProfile(t, ns, "renewing", "expiring", 0, "renewing", nil)
	const name = ns + ".renewing"
	f.WaitState(t, name, member.StateReady)
	poll.Until(t, "three tokens from the plugin", func() bool {
		data, _ := os.ReadFile(calls)
		return strings.Count(string(data), "\n") >= 3
	})
	if state, _ := f.Manager.MemberState(name); state != member.StateReady || unhealthy(f, name) != "" {
		t.Fatalf("member %s while its tokens renewed, or was Unhealthy meanwhile", state)
	}
	if engaged := f.Logs.Count(`"cluster"="`+name+`"`, `"msg"="Engaging member"`); engaged != 1 {
		t.Fatalf("the member was engaged %d times: its cluster was rebuilt for new tokens", engaged)
	}
}
