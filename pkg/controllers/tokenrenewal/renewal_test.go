package tokenrenewal_test

import (
	"bytes"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/tokenrenewal"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// renewSoon renews a 10-minute token after about 1.2 s.
var renewSoon = tokenrenewal.Options{RenewAfter: 0.002, WarnAfter: 0.5}

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
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: renewal(renewSoon)})
	name := f.Namespace + "-renewed" // the member namespace, the cluster name: new on every run
	s := f.Register(t, name, suite.ServiceAccountMember(t, 0, name, 600))
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
	f := suite.StartFleet(t, fleettest.FleetOptions{
		Configure: fleettest.QuickHealth,                                              // a registry event every 200 ms: none may hasten a retry
		Setup:     renewal(tokenrenewal.Options{RenewAfter: 0.002, WarnAfter: 0.004}), // warned 2.4 s into 10 minutes
	})
	name := f.Namespace + "-unrenewable"
	kc := suite.ServiceAccountMember(t, 1, name, 600)
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
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == clusterName {
					return m.GetGauge().GetValue()
				}
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
var renewNow = tokenrenewal.Options{RenewAfter: 1e-6, WarnAfter: 0.5}

func TestRenewalMintsOnlyThroughTheMemberOfItsKubeconfig(t *testing.T) {
	t.Parallel()
	// The manager's own renewal is off: the test renews, when it chooses.
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: renewal(tokenrenewal.Options{Disabled: true})})
	name := f.Namespace + "-behind"
	onMember0, onMember1 := suite.ServiceAccountMember(t, 0, name, 600), suite.ServiceAccountMember(t, 1, name, 600)
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
	// kubeconfig, of another server, under the name, and answers for
	// the Secret's as the pool does then (pkg/member tests that it does).
	lagging := func(clusterName string, kc []byte) (cluster.Cluster, error) {
		if !bytes.Equal(kc, onMember0) {
			return nil, member.ErrOtherKubeconfig
		}
		return f.Manager.GetCluster(t.Context(), clusterName)
	}
	tokenrenewal.RenewOnce(t.Context(), t, f.Manager, renewNow, name, lagging)
	if got := tokenOf(t, key); got != registered {
		t.Fatalf("renewed through the member of another kubeconfig: the Secret, which points at member 1, holds a token of %q", whoIs(t, 0, got))
	}
	if !f.Logs.Find("Renewal waits for the member to run the kubeconfig it renews", name) {
		t.Error("no log line says the renewal waits")
	}

	// Once the pool runs the Secret's kubeconfig, the renewal goes ahead.
	runsOn(1)
	tokenrenewal.RenewOnce(t.Context(), t, f.Manager, renewNow, name, f.Manager.GetRunningCluster)
	renewed := tokenOf(t, key)
	if want := "system:serviceaccount:" + name + ":fleet-manager"; renewed == registered || whoIs(t, 1, renewed) != want {
		t.Errorf("after the pool caught up: token renewed %v, want a token of %s on member 1", renewed != registered, want)
	}
}

func TestRenewalAsksForADayAtMost(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: renewal(tokenrenewal.Options{Disabled: true})})
	name := f.Namespace + "-long"
	s := f.Register(t, name, suite.ServiceAccountMember(t, 0, name, 7*24*3600))
	key := client.ObjectKeyFromObject(s)
	if c := credentialOf(t, key); c.Lifetime() < 6*24*time.Hour {
		t.Fatalf("the registered token lives %s, want a week", c.Lifetime())
	}
	suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	time.Sleep(2 * time.Second) // past renewNow's renewal time
	tokenrenewal.RenewOnce(t.Context(), t, f.Manager, renewNow, name, f.Manager.GetRunningCluster)
	c := credentialOf(t, key)
	if c.Lifetime() == 0 || c.Lifetime() > fleetv1alpha1.MaxTokenLifetime {
		t.Errorf("the renewed token lives %s, want at most %s", c.Lifetime(), fleetv1alpha1.MaxTokenLifetime)
	}
}
