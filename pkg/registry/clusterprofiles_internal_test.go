package registry

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
)

// A profile's kubeconfig carries the provider's server, CA and proxy, the
// file's exec plugin with the profile's extra args (the file allows them),
// and the exec extension as the cluster's, which client-go hands the
// plugin; the first provider of the file that the profile lists wins.
func TestProfileKubeconfig(t *testing.T) {
	providers := access.New([]access.Provider{
		{Name: "other", ExecConfig: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "other-plugin"}},
		{Name: "reader", ProfileSourcedCLIArgsPolicy: access.ProfileSourcedCLIArgsPolicyAppend, ExecConfig: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: "reader-plugin", Args: []string{"--base"}, ProvideClusterInfo: true,
		}},
	})
	raw := func(v any) runtime.RawExtension {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: data}
	}
	cp := &inventoryv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inventory", Name: "east"},
		Status: inventoryv1alpha1.ClusterProfileStatus{AccessProviders: []inventoryv1alpha1.AccessProvider{{Name: "reader", Cluster: clientcmdv1.Cluster{
			Server:                   "https://east.example.com:6443",
			CertificateAuthorityData: []byte("ca"),
			ProxyURL:                 "https://proxy.example.com:3128",
			Extensions: []clientcmdv1.NamedExtension{
				{Name: execExtension, Extension: raw(map[string]string{"clusterName": "east"})},
				{Name: "clusterprofiles.multicluster.x-k8s.io/exec/additional-args", Extension: raw([]string{"--region=east"})},
			},
		}}}},
	}
	data, err := profileKubeconfig(cp, providers)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	cl, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if cl.Server != "https://east.example.com:6443" || string(cl.CertificateAuthorityData) != "ca" || cl.ProxyURL != "https://proxy.example.com:3128" {
		t.Errorf("cluster %+v: want the provider's server, CA and proxy", cl)
	}
	if user.Exec == nil || user.Exec.Command != "reader-plugin" || !user.Exec.ProvideClusterInfo || len(user.Exec.Args) != 2 || user.Exec.Args[1] != "--region=east" {
		t.Errorf("exec %+v: want the reader plugin, with the profile's extra argument", user.Exec)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	unknown, ok := cfg.ExecProvider.Config.(*runtime.Unknown)
	if !ok || string(unknown.Raw) != `{"clusterName":"east"}` {
		t.Errorf("the plugin's cluster config %v: want the profile's exec extension", cfg.ExecProvider.Config)
	}
}
