package fleet_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// secretReader is the module's reference secretreader plugin, built once
// per test binary into a directory TestMain removes, as the test binary
// is built (fleetbinary.BuildProgram): a build of its own configuration
// would compile the Kubernetes libraries once more.
var secretReader = struct {
	once      sync.Once
	dir, path string
	err       error
}{}

// buildSecretReader builds the secretreader plugin, once, and returns it.
func buildSecretReader(t *testing.T) string {
	t.Helper()
	secretReader.once.Do(func() {
		if secretReader.dir, secretReader.err = os.MkdirTemp("", "fleet-plugins-"); secretReader.err != nil {
			return
		}
		secretReader.path = filepath.Join(secretReader.dir, "secretreader-plugin")
		secretReader.err = fleetbinary.BuildProgram(secretReader.path, "sigs.k8s.io/cluster-inventory-api/plugins/secretreader/cmd/plugin")
	})
	if secretReader.err != nil {
		t.Fatalf("building the secretreader plugin: %v", secretReader.err)
	}
	return secretReader.path
}

// staticBuild is the command that builds pkg into out static, without
// -race: the expiring plugin runs at every request of its member, and a
// race build starts too slowly for the member's probes (they fail, and the
// member never turns Ready). Its few dependencies are compiled static once
// more; the secretreader plugin's many are not (buildSecretReader).
func staticBuild(out, pkg string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// secretReaderPlugin builds the module's reference secretreader plugin,
// which reads a member's token from the hub Secret named by the profile's
// clusterName, in the namespace of its kubeconfig's context, and returns
// the plugin and that kubeconfig.
func secretReaderPlugin(t *testing.T, namespace string) (plugin, hubKubeconfig string) {
	t.Helper()
	dir := t.TempDir()
	plugin = buildSecretReader(t)
	kc := suite.AdminKubeconfig(t, suite.Hub, "secretreader")
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
	kc, err := clientcmd.Load(suite.ServiceAccountMember(t, i, ns, 600))
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
	t.Parallel()
	const ns = "inventory-a"
	f := profileFleet(t, ns, 0, "east", true)
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "profiles", ns, fleet.Members, r)
	suite.CreateProfile(t, ns, "east", "secretreader", 0, "member-0", map[string]string{"region": "east"})
	const name = ns + ".east"
	f.WaitState(t, name, fleetv1alpha1.MemberStateReady)
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
	t.Parallel()
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

// The security review: two fleets that export and read ClusterProfiles
// registered each other's profiles recursively (<ns>.<name>,
// <ns>.<ns>.<name>, ...). No fleet reads a profile any fleet-manager
// published, though its provider file names the published access
// provider; it reads the other cluster managers' in the same namespace.
func TestPublishedClusterProfilesAreNotRead(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	f.WaitState(t, ns+".attacker", fleetv1alpha1.MemberStateReady)
}

// ClusterProfiles are read from the namespaces named, none by default:
// whoever writes a profile's status chooses where its credentials go.
func TestClusterProfilesOfNoNamespaceByDefault(t *testing.T) {
	t.Parallel()
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
	if out, err := staticBuild(plugin, "./testdata/expiringplugin").CombinedOutput(); err != nil {
		t.Fatalf("building the test plugin: %v\n%s", err, out)
	}
	kc, err := clientcmd.Load(suite.ServiceAccountMember(t, 0, ns, 600))
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
	f.WaitState(t, name, fleetv1alpha1.MemberStateReady)
	poll.Until(t, "three tokens from the plugin", func() bool {
		data, _ := os.ReadFile(calls)
		return strings.Count(string(data), "\n") >= 3
	})
	if state, _ := f.Manager.MemberState(name); state != fleetv1alpha1.MemberStateReady || unhealthy(f, name) != "" {
		t.Fatalf("member %s while its tokens renewed, or was Unhealthy meanwhile", state)
	}
	if engaged := f.Logs.Count(`"cluster"="`+name+`"`, `"msg"="Engaging member"`); engaged != 1 {
		t.Fatalf("the member was engaged %d times: its cluster was rebuilt for new tokens", engaged)
	}
}
