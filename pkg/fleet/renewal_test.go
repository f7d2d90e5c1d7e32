package fleet_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// renewSoon renews a 10-minute token after about 1.2 s.
func renewSoon(o *fleet.Options) {
	o.CredentialRenewal.RenewAfter = 0.002
	o.CredentialRenewal.WarnAfter = 0.5
}

// serviceAccountMember sets up, in member i, what fleet-manager register
// does: a service account in namespace ns that may request tokens for
// itself, and returns a kubeconfig with a 10-minute token of it.
func serviceAccountMember(t *testing.T, i int, ns string) []byte {
	t.Helper()
	return serviceAccountMemberFor(t, i, ns, 600)
}

// serviceAccountMemberFor is serviceAccountMember with a token of that
// many seconds.
func serviceAccountMemberFor(t *testing.T, i int, ns string, seconds int64) []byte {
	t.Helper()
	ctx, cl := t.Context(), suite.MemberClients[i]
	fleettest.CreateNamespace(t, cl, ns)
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
	cfg.Clusters["member"] = &clientcmdapi.Cluster{Server: suite.Members[i].Config.Host, CertificateAuthorityData: suite.Members[i].Config.CAData}
	cfg.AuthInfos["fleet-manager"] = &clientcmdapi.AuthInfo{Token: request.Status.Token}
	cfg.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "fleet-manager"}
	cfg.CurrentContext = "member"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// tokenOf returns the token of the kubeconfig in Secret key.
func tokenOf(t *testing.T, key types.NamespacedName) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := suite.HubClient.Get(t.Context(), key, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(s.Data[registry.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

// whoIs returns the user member i takes token for.
func whoIs(t *testing.T, i int, token string) string {
	t.Helper()
	cfg := &rest.Config{Host: suite.Members[i].Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: suite.Members[i].Config.CAData}, BearerToken: token}
	cl, err := authenticationv1client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cl.SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("reviewing the token: %v", err)
	}
	return review.Status.UserInfo.Username
}

func TestTokenIsRenewedInPlace(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: renewSoon})
	name := f.Namespace + "-renewed" // the member namespace, the cluster name: new on every run
	s := f.Register(t, name, serviceAccountMember(t, 0, name))
	key := client.ObjectKeyFromObject(s)
	first := tokenOf(t, key)
	mc := suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	transitions := len(mc.Status.RecentTransitions)
	member, err := f.Manager.GetCluster(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}

	poll.Until(t, "the Secret's token renewed twice", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		return tokenOf(t, key) != first && suite.HubClient.Get(t.Context(), types.NamespacedName{Name: name}, mc) == nil &&
			mc.Status.Credentials != nil && mc.Status.Credentials.LastRenewalTime != nil
	})
	mc = suite.WaitMemberCluster(t, name, "with renewed credentials", func(mc *fleetv1alpha1.MemberCluster) bool {
		c := mc.Status.Credentials
		return c != nil && c.Type == fleetv1alpha1.CredentialTypeToken && c.Renewable && c.ExpirationTime != nil && c.LastRenewalError == ""
	})
	if got := mc.Status.Credentials.ExpirationTime.Sub(time.Now()); got < 9*time.Minute || got > 11*time.Minute {
		t.Errorf("expirationTime is %s from now, want about 10m", got)
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsExpiring); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonValid {
		t.Errorf("CredentialsExpiring = %+v, want False, Valid", c)
	}
	// In place: the same cluster, no state transition.
	if now, err := f.Manager.GetCluster(t.Context(), name); err != nil || now != member {
		t.Errorf("after renewal, GetCluster = %p, %v; want the same cluster %p", now, err, member)
	}
	if mc.Status.State != fleetv1alpha1.MemberStateReady || len(mc.Status.RecentTransitions) != transitions {
		t.Errorf("after renewal: state %s, transitions %+v; want Ready with the %d transitions before", mc.Status.State, mc.Status.RecentTransitions, transitions)
	}
	// The old token works until it expires; the new one is the same
	// service account's.
	want := "system:serviceaccount:" + name + ":fleet-manager"
	if got := whoIs(t, 0, first); got != want {
		t.Errorf("the first token is %q, want %q", got, want)
	}
	if got := whoIs(t, 0, tokenOf(t, key)); got != want {
		t.Errorf("the renewed token is %q, want %q", got, want)
	}
	if expiry := credentialExpiry(t, name); expiry == 0 {
		t.Error("no fleet_member_credential_expiry_timestamp_seconds series for the member")
	}
	for _, token := range []string{first, tokenOf(t, key)} {
		if f.Logs.Find(token) {
			t.Error("a token appeared in the logs")
		}
	}
}

func TestRefusedRenewalWarns(t *testing.T) {
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) {
		fleettest.QuickHealth(o) // a registry event every 200 ms: none may hasten a retry
		o.CredentialRenewal.RenewAfter = 0.002
		o.CredentialRenewal.WarnAfter = 0.004 // 2.4 s of 10 minutes
	}})
	name := f.Namespace + "-unrenewable"
	kc := serviceAccountMember(t, 1, name)
	if err := suite.MemberClients[1].Delete(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "fleet-manager-token"}}); err != nil {
		t.Fatal(err)
	}
	f.Register(t, name, kc)

	mc := suite.WaitMemberCluster(t, name, "CredentialsExpiring", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsExpiring) == metav1.ConditionTrue
	})
	c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsExpiring)
	if c.Reason != fleetv1alpha1.ReasonExpiring || !strings.Contains(c.Message, "renewing it failed") {
		t.Errorf("CredentialsExpiring = %+v, want reason Expiring and the renewal's failure", c)
	}
	if e := mc.Status.Credentials.LastRenewalError; !strings.Contains(e, "403 Forbidden") {
		t.Errorf("lastRenewalError = %q, want the member's refusal", e)
	}
	if mc.Status.State != fleetv1alpha1.MemberStateReady {
		t.Errorf("state = %s, want Ready: the token still works", mc.Status.State)
	}
	// Failed renewals back off, 1 s doubling, whatever else happens to
	// the member meanwhile: counted over 6 s from the first failure, they
	// are the first and those after 1 and 3 s, maybe the one after 7 s.
	failures := func() int { return f.Logs.Count("Renewing the member's token failed", name) }
	poll.Until(t, "a failed renewal", func() bool { return failures() > 0 })
	time.Sleep(6 * time.Second)
	if n := failures(); n < 2 || n > 4 {
		t.Errorf("%d renewals failed in the 6 s from the first failure, want 2 to 4 (backoff from 1 s)", n)
	}
	poll.Until(t, "a CredentialsExpiring Warning Event", func() bool {
		var list eventsv1.EventList
		if err := suite.HubClient.List(t.Context(), &list); err != nil {
			return false
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == name && e.Regarding.Kind == "MemberCluster" && e.Type == corev1.EventTypeWarning && e.Reason == fleetv1alpha1.ReasonExpiring
		})
	})
}

// credentialExpiry returns the member's fleet_member_credential_expiry_timestamp_seconds, 0 without one.
func credentialExpiry(t *testing.T, clusterName string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "fleet_member_credential_expiry_timestamp_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			if label(m, "cluster") == clusterName {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// credentialOf describes the credential of the kubeconfig in Secret key.
func credentialOf(t *testing.T, key types.NamespacedName) kubeconfig.Credential {
	t.Helper()
	s := &corev1.Secret{}
	if err := suite.HubClient.Get(t.Context(), key, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeconfig.Policy{}.Parse(s.Data[registry.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig.DescribeCredential(cfg)
}

// renewNow renews a token from about 2 s into its life, however long.
var renewNow = fleet.RenewalOptions{RenewAfter: 1e-6, WarnAfter: 0.5}

func TestRenewalMintsOnlyThroughTheMemberOfItsKubeconfig(t *testing.T) {
	t.Parallel()
	// The manager's own renewal is off: the test renews, when it chooses.
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) { o.CredentialRenewal.Disabled = true }})
	name := f.Namespace + "-behind"
	onMember0, onMember1 := serviceAccountMember(t, 0, name), serviceAccountMember(t, 1, name)
	s := f.Register(t, name, onMember1)
	key := client.ObjectKeyFromObject(s)
	registered := tokenOf(t, key)
	suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	runsOn := func(i int) {
		t.Helper()
		poll.Until(t, fmt.Sprintf("the member running on member %d", i), func() bool {
			cl, err := f.Manager.GetCluster(t.Context(), name)
			return err == nil && cl.GetConfig().Host == suite.Members[i].Config.Host
		})
	}

	// The pool lags behind the registry: it still runs an earlier
	// kubeconfig, of another server, under the name.
	if err := fleet.SetMember(f.Manager, registry.Registration{ClusterName: name, Kubeconfig: onMember0}); err != nil {
		t.Fatal(err)
	}
	runsOn(0)
	fleet.RenewOnce(t.Context(), f.Manager, renewNow, name)
	if got := tokenOf(t, key); got != registered {
		t.Fatalf("renewed through the member of another kubeconfig: the Secret, which points at member 1, holds a token of %q", whoIs(t, 0, got))
	}
	if !f.Logs.Find("Renewal waits for the member to run the kubeconfig it renews", name) {
		t.Error("no log line says the renewal waits")
	}

	// Once the pool runs the Secret's kubeconfig, the renewal goes ahead.
	if err := fleet.SetMember(f.Manager, registry.Registration{ClusterName: name, Kubeconfig: onMember1}); err != nil {
		t.Fatal(err)
	}
	runsOn(1)
	fleet.RenewOnce(t.Context(), f.Manager, renewNow, name)
	renewed := tokenOf(t, key)
	if want := "system:serviceaccount:" + name + ":fleet-manager"; renewed == registered || whoIs(t, 1, renewed) != want {
		t.Errorf("after the pool caught up: token renewed %v, want a token of %s on member 1", renewed != registered, want)
	}
}

func TestRenewalAsksForADayAtMost(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: func(o *fleet.Options) { o.CredentialRenewal.Disabled = true }})
	name := f.Namespace + "-long"
	s := f.Register(t, name, serviceAccountMemberFor(t, 0, name, 7*24*3600))
	key := client.ObjectKeyFromObject(s)
	if c := credentialOf(t, key); c.Lifetime() < 6*24*time.Hour {
		t.Fatalf("the registered token lives %s, want a week", c.Lifetime())
	}
	suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	time.Sleep(2 * time.Second) // past renewNow's renewal time
	fleet.RenewOnce(t.Context(), f.Manager, renewNow, name)
	c := credentialOf(t, key)
	if c.Lifetime() == 0 || c.Lifetime() > fleetv1alpha1.MaxTokenLifetime {
		t.Errorf("the renewed token lives %s, want at most %s", c.Lifetime(), fleetv1alpha1.MaxTokenLifetime)
	}
}
