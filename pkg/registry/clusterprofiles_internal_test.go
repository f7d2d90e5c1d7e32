package registry

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
)

// testProviders is a provider file of two providers; "reader" takes the
// profile's extra arguments.
func testProviders() *access.Config {
	return access.New([]access.Provider{
		{Name: "other", ExecConfig: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "other-plugin"}},
		{Name: "reader", ProfileSourcedCLIArgsPolicy: access.ProfileSourcedCLIArgsPolicyAppend, ExecConfig: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: "reader-plugin", Args: []string{"--base"}, ProvideClusterInfo: true,
		}},
	})
}

func rawJSON(t *testing.T, v any) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

// testProfile is ClusterProfile inventory/name listing provider "reader"
// with the given exec extension and extra argument.
func testProfile(t *testing.T, name string, execExt any, arg string) *inventoryv1alpha1.ClusterProfile {
	t.Helper()
	return &inventoryv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inventory", Name: name},
		Status: inventoryv1alpha1.ClusterProfileStatus{AccessProviders: []inventoryv1alpha1.AccessProvider{{Name: "reader", Cluster: clientcmdv1.Cluster{
			Server:                   "https://" + name + ".example.com:6443",
			TLSServerName:            "api." + name + ".internal",
			CertificateAuthorityData: []byte("ca"),
			ProxyURL:                 "https://proxy.example.com:3128",
			Extensions: []clientcmdv1.NamedExtension{
				{Name: execExtension, Extension: rawJSON(t, execExt)},
				{Name: "clusterprofiles.multicluster.x-k8s.io/exec/additional-args", Extension: rawJSON(t, []string{arg})},
			},
		}}}},
	}
}

// readProfile returns the kubeconfig of cp as the reader builds it, and
// the REST config client-go makes of it.
func readProfile(t *testing.T, cp *inventoryv1alpha1.ClusterProfile, providers *access.Config) (*clientcmdapi.Config, *rest.Config) {
	t.Helper()
	ap := accessProviderOf(cp, providers)
	if ap == nil {
		t.Fatalf("profile %s lists no provider of the file", cp.Name)
	}
	data, err := profileKubeconfig(cp, cp.Namespace+"."+cp.Name, ap, providers)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return kc, cfg
}

// A profile's kubeconfig carries the provider's server, TLS server name,
// CA and proxy, the file's exec plugin with the profile's extra args (the
// file allows them), and the exec extension as the cluster's, which
// client-go hands the plugin; the first provider of the file that the
// profile lists wins.
func TestProfileKubeconfig(t *testing.T) {
	kc, cfg := readProfile(t, testProfile(t, "east", map[string]string{"clusterName": "east"}, "--region=east"), testProviders())
	ctx := kc.Contexts[kc.CurrentContext]
	cl, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if cl.Server != "https://east.example.com:6443" || string(cl.CertificateAuthorityData) != "ca" || cl.ProxyURL != "https://proxy.example.com:3128" {
		t.Errorf("cluster %+v: want the provider's server, CA and proxy", cl)
	}
	if cl.TLSServerName != "api.east.internal" || cfg.ServerName != "api.east.internal" {
		t.Errorf("TLS server name %q, in the REST config %q: want the provider's, api.east.internal", cl.TLSServerName, cfg.ServerName)
	}
	if user.Exec == nil || user.Exec.Command != "reader-plugin" || !user.Exec.ProvideClusterInfo || len(user.Exec.Args) != 2 || user.Exec.Args[1] != "--region=east" {
		t.Errorf("exec %+v: want the reader plugin, with the profile's extra argument", user.Exec)
	}
	if unknown, ok := cfg.ExecProvider.Config.(*runtime.Unknown); !ok || string(unknown.Raw) != `{"clusterName":"inventory.east"}` {
		t.Errorf("the plugin's cluster config %v: want the profile's exec extension, naming its cluster", cfg.ExecProvider.Config)
	}
}

// The security review: a profile writer chose the clusterName the
// secretreader plugin reads, so a victim's token went to the writer's
// server. The plugin is told the profile's own cluster name, whatever the
// profile says; the rest of its exec extension is the profile's.
func TestProfileCannotChooseItsPluginsClusterName(t *testing.T) {
	for name, ext := range map[string]any{
		"another cluster's name": map[string]any{"clusterName": "victim", "region": "east"},
		"no clusterName":         map[string]any{"region": "east"},
	} {
		t.Run(name, func(t *testing.T) {
			_, cfg := readProfile(t, testProfile(t, "attacker", ext, "--x"), testProviders())
			unknown, ok := cfg.ExecProvider.Config.(*runtime.Unknown)
			if !ok || string(unknown.Raw) != `{"clusterName":"inventory.attacker","region":"east"}` {
				t.Errorf("the plugin's cluster config %v: want clusterName inventory.attacker and the profile's other fields", cfg.ExecProvider.Config)
			}
		})
	}
	cp := testProfile(t, "odd", []string{"victim"}, "--x")
	if _, err := profileKubeconfig(cp, "inventory.odd", accessProviderOf(cp, testProviders()), testProviders()); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("an exec extension that is not an object: error %v, want one that says so", err)
	}
}

// One profile's extra arguments reach its own plugin only: the access
// package appends them to the provider file's exec config, which every
// later profile read with the same file found.
func TestProfileArgumentsStayWithTheirProfile(t *testing.T) {
	providers := testProviders()
	readProfile(t, testProfile(t, "east", map[string]string{}, "--region=east"), providers)
	kc, _ := readProfile(t, testProfile(t, "west", map[string]string{}, "--region=west"), providers)
	if args := kc.AuthInfos["member"].Exec.Args; len(args) != 2 || args[1] != "--region=west" {
		t.Errorf("west's plugin arguments %q: want [--base --region=west]", args)
	}
	if args := providers.Providers[1].ExecConfig.Args; len(args) != 1 {
		t.Errorf("the provider file's arguments became %q", args)
	}
}

// No fleet reads a ClusterProfile that a fleet-manager published, whichever
// fleet published it: two fleets reading each other's registered each
// other's members recursively.
func TestPublishedProfilesAreNotRead(t *testing.T) {
	for name, cp := range map[string]*inventoryv1alpha1.ClusterProfile{
		"label": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{inventoryv1alpha1.LabelClusterManagerKey: PublishedClusterManager}}},
		"spec":  {Spec: inventoryv1alpha1.ClusterProfileSpec{ClusterManager: inventoryv1alpha1.ClusterManager{Name: PublishedClusterManager}}},
	} {
		if !published(cp) {
			t.Errorf("a profile whose %s names %s is read", name, PublishedClusterManager)
		}
	}
	if published(&inventoryv1alpha1.ClusterProfile{Spec: inventoryv1alpha1.ClusterProfileSpec{ClusterManager: inventoryv1alpha1.ClusterManager{Name: "ocm"}}}) {
		t.Error("another cluster manager's profile is not read")
	}
}
