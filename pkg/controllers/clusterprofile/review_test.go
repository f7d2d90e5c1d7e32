package clusterprofile_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// reviewProperties installs the ClusterProperty CRD in member 1 and
// makes properties there, labelled review=<label>, deleted when the test
// ends (the package's other tests read member 1's properties).
func reviewProperties(t *testing.T, label string, props map[string]string) {
	t.Helper()
	if _, err := envtest.InstallCRDs(suite.Members[1].Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{clusterPropertyCRD.DeepCopy()}}); err != nil {
		t.Fatal(err)
	}
	member := suite.MemberClients[1]
	t.Cleanup(func() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(clusterprofile.ClusterPropertyGroupVersion.WithKind("ClusterProperty"))
		_ = member.DeleteAllOf(context.Background(), u, client.MatchingLabels{"review": label})
		poll.Until(t, "review properties gone", func() bool {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(clusterprofile.ClusterPropertyGroupVersion.WithKind("ClusterPropertyList"))
			return member.List(context.Background(), list, client.MatchingLabels{"review": label}) == nil && len(list.Items) == 0
		})
	})
	var wg sync.WaitGroup
	work := make(chan string)
	for range 8 {
		wg.Go(func() {
			for name := range work {
				p := clusterProperty(name, props[name])
				p.SetLabels(map[string]string{"review": label})
				if err := member.Create(t.Context(), p); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for name := range props {
		work <- name
	}
	close(work)
	wg.Wait()
}

// TestManyClusterPropertiesStillPublishHealth: a member holds
// 2,000 ClusterProperty objects, each with a value of 1,000 bytes (each
// one the ClusterProfile API accepts). The profile must still say
// whether the control plane is healthy: "ControlPlaneHealthy from the
// manager's own probes (True when Ready ...)"; a hostile member must not
// keep its profile from saying so.
func TestManyClusterPropertiesStillPublishHealth(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	props := map[string]string{}
	for i := range 2000 {
		props[fmt.Sprintf("review-many-%04d.example.com", i)] = strings.Repeat("x", 1000)
	}
	reviewProperties(t, "many", props)
	const ns = "inventory-review-many"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Configure: fleettest.QuickHealth, Deferred: true})
	if err := clusterprofile.Add(f.Manager, clusterprofile.Options{Namespace: ns, PropertiesInterval: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.Start(t)
	f.Register(t, "review-many", suite.Kubeconfigs[1])
	deadline := time.Now().Add(45 * time.Second)
	for {
		cp := suite.GetProfile(t, ns, "review-many")
		if fleettest.HealthyIs(cp, metav1.ConditionTrue) {
			return
		}
		if time.Now().After(deadline) {
			var errs []string
			for _, l := range f.Logs.Lines() {
				if strings.Contains(l, "Reconciler error") {
					errs = append(errs, l[:min(len(l), 400)])
				}
			}
			var conds any
			if cp != nil {
				conds = cp.Status.Conditions
			}
			t.Fatalf("after 45 s the profile of a Ready member with 2,000 properties says no ControlPlaneHealthy True (conditions %+v); %d reconcile errors, the first: %v", conds, len(errs), errs[:min(1, len(errs))])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestForbiddenPropertyReadKeepsProperties: a member's properties
// are published; its registration then carries a credential that may not
// list ClusterProperty objects. "the read is forbidden ... | the
// published properties are kept"; a label of the same name as a property
// stays a label.
func TestForbiddenPropertyReadKeepsProperties(t *testing.T) {
	suite.InstallClusterProfileCRD(t)
	reviewProperties(t, "forbid", map[string]string{"review-zone": "z1", "location": "eu-review"})
	const ns = "inventory-review-forbid"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Configure: fleettest.QuickHealth, Deferred: true})
	if err := clusterprofile.Add(f.Manager, clusterprofile.Options{Namespace: ns, PropertiesInterval: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.Start(t)
	secret := f.Register(t, "review-forbid", suite.Kubeconfigs[1], map[string]string{"location": "from-label"})
	want := map[string]string{"review-zone": "z1", "location": "eu-review"}
	poll.Until(t, "the properties published", func() bool {
		cp := suite.GetProfile(t, ns, "review-forbid")
		if cp == nil {
			return false
		}
		got := propertiesOf(cp)
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return cp.Labels["location"] == "from-label"
	})

	// A user that may do all but read about.k8s.io.
	const user = "review-no-properties"
	member := suite.MemberClients[1]
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "apps", "apiextensions.k8s.io", "coordination.k8s.io", "authorization.k8s.io", "authentication.k8s.io", "fleet.fleetkube.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	for _, obj := range []client.Object{role, binding} {
		if err := member.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = member.Delete(context.Background(), obj) })
	}
	u := suite.AddUser(t, suite.Members[1], envtest.User{Name: user})
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := suite.HubClient.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.Data[registry.KubeconfigKey] = kc
	if err := suite.HubClient.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the forbidden read logged", func() bool {
		return f.Logs.Find("Cannot read the member's ClusterProperty objects", "Forbidden")
	})
	time.Sleep(time.Second)
	cp := suite.GetProfile(t, ns, "review-forbid")
	got := propertiesOf(cp)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after a forbidden read the published properties are %v, want %v kept", got, want)
			break
		}
	}
	if cp.Labels["location"] != "from-label" {
		t.Errorf("label location = %q, want from-label", cp.Labels["location"])
	}
	_ = maps.Clone(want)
}
