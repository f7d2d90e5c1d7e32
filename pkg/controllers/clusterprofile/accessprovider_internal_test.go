package clusterprofile

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The security review: a member's proxy-url was published verbatim, with
// the proxy's password. No URL published carries userinfo; the TLS server
// name, which was dropped, is published.
func TestAccessProviderPublishesNoUserinfo(t *testing.T) {
	const password = "S3cret"
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{
		Server:                   "https://admin:" + password + "@member.example.com:6443/prefix",
		TLSServerName:            "api.member.internal",
		CertificateAuthorityData: []byte("ca"),
		ProxyURL:                 "http://svc:" + password + "@proxy:3128",
	}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "token-" + password}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := accessProvider("member", data)
	if err != nil {
		t.Fatal(err)
	}
	published, err := json.Marshal(ap)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(published), password) || strings.Contains(string(published), "admin") || strings.Contains(string(published), "svc") {
		t.Errorf("the published access provider holds userinfo: %s", published)
	}
	cl := ap.Cluster
	if cl.Server != "https://member.example.com:6443/prefix" || cl.ProxyURL != "http://proxy:3128" {
		t.Errorf("server %q, proxy %q: want the kubeconfig's, without userinfo", cl.Server, cl.ProxyURL)
	}
	if cl.TLSServerName != "api.member.internal" || string(cl.CertificateAuthorityData) != "ca" {
		t.Errorf("TLS server name %q, CA %q: want the kubeconfig's", cl.TLSServerName, cl.CertificateAuthorityData)
	}
}
