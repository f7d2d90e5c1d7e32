package fleettest

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountMember sets up, in member i, what fleet-manager register
// does: a service account in namespace ns that may request tokens for
// itself, and returns a kubeconfig with a token of it that lives seconds.
func (s *Suite) ServiceAccountMember(t *testing.T, i int, ns string, seconds int64) []byte {
	t.Helper()
	ctx, cl := t.Context(), s.MemberClients[i]
	CreateNamespace(t, cl, ns)
	const name = "fleet-manager"
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-manager-token"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{name}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-manager-token"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-manager-token"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
	} {
		if err := cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(seconds)}}
	if err := cl.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, request); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["member"] = &clientcmdapi.Cluster{Server: s.Members[i].Config.Host, CertificateAuthorityData: s.Members[i].Config.CAData}
	cfg.AuthInfos["fleet-manager"] = &clientcmdapi.AuthInfo{Token: request.Status.Token}
	cfg.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "fleet-manager"}
	cfg.CurrentContext = "member"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
