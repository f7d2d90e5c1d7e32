package fleet_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// installClusterProfileCRD installs the module's ClusterProfile CRD on
// the hub.
func installClusterProfileCRD(t *testing.T) {
	t.Helper()
	if err := controlplane.InstallClusterProfileCRD(hub); err != nil {
		t.Fatal(err)
	}
}

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
	kc, err := controlplane.AdminKubeconfig(hub, "secretreader")
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
		if err := memberClients[i].Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	createNamespace(t, hubClient, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
		Data: map[string][]byte{"token": []byte(kc.AuthInfos["fleet-manager"].Token)}}
	if err := hubClient.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
}

// createProfile creates ClusterProfile ns/name of another cluster
// manager, offering member i through access provider provider with
// clusterName secretName, which the reader replaces with <ns>.<name>.
func createProfile(t *testing.T, ns, name, provider string, i int, secretName string, labels map[string]string) {
	t.Helper()
	ext, err := json.Marshal(map[string]string{"clusterName": secretName})
	if err != nil {
		t.Fatal(err)
	}
	cp := &v1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       v1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: v1alpha1.ClusterManager{Name: "test-inventory"}},
	}
	cl := profileClient(t)
	if err := cl.Create(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	cp.Status = v1alpha1.ClusterProfileStatus{
		Conditions: []metav1.Condition{},
		AccessProviders: []v1alpha1.AccessProvider{{Name: provider, Cluster: clientcmdv1.Cluster{
			Server:                   members[i].Config.Host,
			CertificateAuthorityData: members[i].Config.CAData,
			Extensions:               []clientcmdv1.NamedExtension{{Name: "client.authentication.k8s.io/exec", Extension: runtime.RawExtension{Raw: ext}}},
		}}},
	}
	if err := cl.Status().Update(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
}

// newProfileClient builds, once, the hub client that knows
// ClusterProfiles: the tests poll through it.
var newProfileClient = sync.OnceValues(func() (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(hub.Config, client.Options{Scheme: scheme})
})

// profileClient returns the hub client that knows ClusterProfiles.
func profileClient(t *testing.T) client.Client {
	t.Helper()
	cl, err := newProfileClient()
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// profileFleet starts a fleet that reads the ClusterProfiles of namespace
// ns through the secretreader plugin, whose hub Secret ns/<ns>.<profile>
// holds a token of member i; the plugin is allowed if allowPlugin.
func profileFleet(t *testing.T, ns string, i int, profile string, allowPlugin bool) *fleetEnv {
	t.Helper()
	installClusterProfileCRD(t)
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)
	profileMember(t, i, ns, ns+"."+profile)
	return startFleetWith(t, func(o *fleet.Options) {
		if allowPlugin {
			o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: profileProviders(plugin, hubKubeconfig)}
	})
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
	r := &recorder{}
	watchConfigMaps(t, f, "profiles", ns, fleet.Members, r)
	createProfile(t, ns, "east", "secretreader", 0, "member-0", map[string]string{"region": "east"})
	const name = ns + ".east"
	f.waitState(t, name, member.StateReady)
	createConfigMap(t, memberClients[0], ns, "hello")
	r.waitFor(t, request(name, ns, "hello"))
	poll.Until(t, "a MemberCluster with the profile's labels and format", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		err := hubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc)
		return err == nil && mc.Labels["region"] == "east" && mc.Spec.SecretRef.Format == fleetv1alpha1.FormatClusterProfile
	})

	if err := profileClient(t).Delete(t.Context(), &v1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the member of the deleted profile removed", func() bool {
		_, ok := f.mgr.MemberState(name)
		return !ok
	})
}

func TestClusterProfileWithAPluginNotAllowedIsRefused(t *testing.T) {
	const ns = "inventory-b"
	f := profileFleet(t, ns, 1, "west", false)
	createProfile(t, ns, "west", "secretreader", 1, "member-1", nil)
	const name = ns + ".west"
	poll.Until(t, "the profile's member refused", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := hubClient.Get(t.Context(), client.ObjectKey{Name: name}, mc); err != nil {
			return false
		}
		c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ExecPluginRefused"
	})
	if _, ok := f.mgr.MemberState(name); ok {
		t.Fatal("a member runs for a profile whose plugin the policy refuses")
	}
}

// getProfile returns ClusterProfile ns/name, or nil if there is none.
func getProfile(t *testing.T, ns, name string) *v1alpha1.ClusterProfile {
	t.Helper()
	cp := &v1alpha1.ClusterProfile{}
	if err := profileClient(t).Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return cp
}

// healthyIs reports whether cp's ControlPlaneHealthy condition has status.
func healthyIs(cp *v1alpha1.ClusterProfile, status metav1.ConditionStatus) bool {
	if cp == nil {
		return false
	}
	c := meta.FindStatusCondition(cp.Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy)
	return c != nil && c.Status == status
}

// A fleet that publishes ClusterProfiles keeps one per member, with its
// health from the manager's probes, its version, its labels as properties
// and its server and CA, and no credential; it follows the member from
// Ready to Unhealthy and back, is deleted with it, and leaves the profiles
// of other cluster managers alone.
func TestClusterProfilesArePublished(t *testing.T) {
	installClusterProfileCRD(t)
	const ns = "inventory-published"
	createNamespace(t, hubClient, ns)
	foreign := "published-foreign"
	createProfile(t, ns, foreign, "secretreader", 0, "nothing", nil)
	before := getProfile(t, ns, foreign)

	f := newFleetOn(t, mclNamespace(t), quickHealth)
	if err := clusterprofile.Add(f.mgr, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	kc, proxy := viaProxy(t, kubeconfigs[0])
	const name = "published-a"
	secret := f.register(t, name, kc)
	secret.Labels["tier"] = "gold"
	if err := hubClient.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}

	var cp *v1alpha1.ClusterProfile
	poll.Until(t, "a healthy profile with the member's version and labels", func() bool {
		cp = getProfile(t, ns, name)
		return healthyIs(cp, metav1.ConditionTrue) && cp.Status.Version.Kubernetes != "" &&
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
	if leaked := (&logLines{lines: []string{string(published)}}).holding(secrets); leaked != "" {
		t.Fatalf("the published profile holds credential material: %s", leaked)
	}

	proxy.Down()
	poll.Until(t, "the profile of an Unhealthy member not healthy", func() bool { return healthyIs(getProfile(t, ns, name), metav1.ConditionFalse) })
	down := meta.FindStatusCondition(getProfile(t, ns, name).Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy).LastTransitionTime
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile healthy again", func() bool { return healthyIs(getProfile(t, ns, name), metav1.ConditionTrue) })
	if up := meta.FindStatusCondition(getProfile(t, ns, name).Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy).LastTransitionTime; !up.After(down.Time) && !up.Equal(&down) {
		t.Fatalf("the condition's transition time %s is before the member went down at %s", up, down)
	}

	if err := hubClient.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile deleted with its member", func() bool { return getProfile(t, ns, name) == nil })
	if after := getProfile(t, ns, foreign); after == nil || after.ResourceVersion != before.ResourceVersion {
		t.Fatal("the profile of another cluster manager was touched")
	}
}

// synced waits until f's registry has read every registration once.
func (f *fleetEnv) synced(t *testing.T) {
	t.Helper()
	poll.Until(t, "the registry synced", func() bool {
		select {
		case <-f.mgr.Registry().Synced():
			return true
		default:
			return false
		}
	})
}

// healthReason returns the reason of cp's ControlPlaneHealthy condition
// if its status is status, else "".
func healthReason(cp *v1alpha1.ClusterProfile, status metav1.ConditionStatus) string {
	if !healthyIs(cp, status) {
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
	installClusterProfileCRD(t)
	const ns = "inventory-refused"
	createNamespace(t, hubClient, ns)
	f := newFleetOn(t, mclNamespace(t), nil)
	if err := clusterprofile.Add(f.mgr, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	const name = "refused-later"
	secret := f.register(t, name, kubeconfigs[0])
	poll.Until(t, "a healthy profile", func() bool { return healthyIs(getProfile(t, ns, name), metav1.ConditionTrue) })

	secret.Data[registry.KubeconfigKey] = hostileKubeconfig("https://10.0.0.1", `{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}`)
	if err := hubClient.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile of a refused kubeconfig, Unknown: FileReference", func() bool {
		return healthReason(getProfile(t, ns, name), metav1.ConditionUnknown) == "FileReference"
	})
	if got := getProfile(t, ns, name).Status.AccessProviders; len(got) != 0 {
		t.Errorf("access providers of the refused member %+v, want none", got)
	}

	contender := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "contender", Labels: map[string]string{registry.KubeconfigLabel: "true"},
			Annotations: map[string]string{registry.ClusterNameAnnotation: name}},
		Data: map[string][]byte{registry.KubeconfigKey: kubeconfigs[1]},
	}
	if err := hubClient.Create(t.Context(), contender); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the profile of a contested name, Unknown: ClusterNameConflict", func() bool {
		return healthReason(getProfile(t, ns, name), metav1.ConditionUnknown) == registry.ReasonClusterNameConflict
	})

	for _, s := range []*corev1.Secret{secret, contender} {
		if err := hubClient.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the profile deleted with the name", func() bool { return getProfile(t, ns, name) == nil })
}

// The security review: two fleets that export and read ClusterProfiles
// registered each other's profiles recursively (<ns>.<name>,
// <ns>.<ns>.<name>, ...). No fleet reads a profile any fleet-manager
// published, though its provider file names the published access
// provider; it reads the other cluster managers' in the same namespace.
func TestPublishedClusterProfilesAreNotRead(t *testing.T) {
	installClusterProfileCRD(t)
	const ns = "inventory-round-trip"
	createNamespace(t, hubClient, ns)
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)

	publisher := newFleetOn(t, mclNamespace(t), nil)
	if err := clusterprofile.Add(publisher.mgr, clusterprofile.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	publisher.start(t)
	const name = "round-trip"
	publisher.register(t, name, kubeconfigs[1])
	poll.Until(t, "the published profile", func() bool { return healthyIs(getProfile(t, ns, name), metav1.ConditionTrue) })
	// Another cluster manager's profile, offering the same provider.
	createProfile(t, ns, "other", clusterprofile.AccessProvider, 1, "other", nil)

	providers := access.New([]access.Provider{{Name: clusterprofile.AccessProvider, ExecConfig: profileProviders(plugin, hubKubeconfig).Providers[0].ExecConfig}})
	reader := startFleetWith(t, func(o *fleet.Options) {
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: providers}
	})
	reader.synced(t)
	if _, ok := reader.mgr.Registry().Get(ns + ".other"); !ok {
		t.Fatal("the other cluster manager's profile is not registered")
	}
	if _, ok := reader.mgr.Registry().Get(ns + "." + name); ok {
		t.Fatal("the profile another fleet published is registered")
	}
}

// The security review: a profile writer chose the clusterName the
// secretreader plugin reads, so that a victim's token went to the
// writer's server. The plugin reads the token kept for the profile's own
// cluster name, <namespace>.<name>: here the one that works at the
// server the profile names, unlike the victim's.
func TestClusterProfileCannotChooseItsCredentials(t *testing.T) {
	installClusterProfileCRD(t)
	const ns = "inventory-attacker"
	plugin, hubKubeconfig := secretReaderPlugin(t, ns)
	profileMember(t, 0, ns, "victim")
	profileMember(t, 1, ns, ns+".attacker")
	f := startFleetWith(t, func(o *fleet.Options) {
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: profileProviders(plugin, hubKubeconfig)}
	})
	// The attacker's server is member 1, where the victim's token of
	// member 0 is worthless and its own works.
	createProfile(t, ns, "attacker", "secretreader", 1, "victim", nil)
	f.waitState(t, ns+".attacker", member.StateReady)
}

// ClusterProfiles are read from the namespaces named, none by default:
// whoever writes a profile's status chooses where its credentials go.
func TestClusterProfilesOfNoNamespaceByDefault(t *testing.T) {
	installClusterProfileCRD(t)
	const ns = "inventory-unnamed"
	createNamespace(t, hubClient, ns)
	createProfile(t, ns, "unnamed", "secretreader", 0, "unnamed", nil)
	f := startFleetWith(t, func(o *fleet.Options) {
		o.ClusterProfiles = &registry.ClusterProfiles{Providers: profileProviders("secretreader-plugin", "")}
	})
	f.synced(t)
	if _, ok := f.mgr.Registry().Get(ns + ".unnamed"); ok {
		t.Fatal("a profile of a namespace not named is registered")
	}
	if !f.logs.find("Reading no ClusterProfiles") {
		t.Error("no log line says why no ClusterProfile is read")
	}
}

// Credentials from a profile's exec plugin that expire within a second
// are renewed by client-go's exec authenticator, at the member's next
// request (here its probes, each a review): the member stays Ready, and
// its cluster is not rebuilt.
func TestClusterProfileCredentialsRenew(t *testing.T) {
	installClusterProfileCRD(t)
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
	f := startFleetWith(t, func(o *fleet.Options) {
		quickHealth(o)
		o.MemberHealth.ReviewInterval = o.MemberHealth.Interval
		o.KubeconfigPolicy.AllowExecCommands = []string{plugin}
		o.ClusterProfiles = &registry.ClusterProfiles{Namespaces: []string{ns}, Providers: providers}
	})
	createNamespace(t, hubClient, ns)
	createProfile(t, ns, "renewing", "expiring", 0, "renewing", nil)
	const name = ns + ".renewing"
	f.waitState(t, name, member.StateReady)
	poll.Until(t, "three tokens from the plugin", func() bool {
		data, _ := os.ReadFile(calls)
		return strings.Count(string(data), "\n") >= 3
	})
	if state, _ := f.mgr.MemberState(name); state != member.StateReady || f.unhealthy(name) != "" {
		t.Fatalf("member %s while its tokens renewed, or was Unhealthy meanwhile", state)
	}
	if engaged := f.logs.count(`"cluster"="`+name+`"`, `"msg"="Engaging member"`); engaged != 1 {
		t.Fatalf("the member was engaged %d times: its cluster was rebuilt for new tokens", engaged)
	}
}
