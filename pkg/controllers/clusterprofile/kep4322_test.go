package clusterprofile_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/clusterprofile"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// clusterPropertyCRD is KEP-2149's ClusterProperty: cluster-scoped, a
// name and spec.value.
var clusterPropertyCRD = &apiextensionsv1.CustomResourceDefinition{
	ObjectMeta: metav1.ObjectMeta{Name: "clusterproperties.about.k8s.io", Annotations: map[string]string{
		"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/3084",
	}},
	Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "about.k8s.io",
		Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "clusterproperties", Singular: "clusterproperty", Kind: "ClusterProperty", ListKind: "ClusterPropertyList"},
		Scope: apiextensionsv1.ClusterScoped,
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: "v1alpha1", Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"value": {Type: "string"}}},
				},
			}},
		}},
	},
}

func clusterProperty(name, value string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterprofile.ClusterPropertyGroupVersion.WithKind("ClusterProperty"))
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, value, "spec", "value")
	return u
}

func propertiesOf(cp *v1alpha1.ClusterProfile) map[string]string {
	got := map[string]string{}
	for _, p := range cp.Status.Properties {
		got[p.Name] = p.Value
	}
	return got
}

// KEP-4322 (§Properties): a cluster manager copies a cluster's
// ClusterProperty objects into its profile's status.properties, names and
// values unchanged, and publishes no conflicting name of its own; labels
// go where the KEP puts them, on the profile. The manager-level scenarios
// proposed for the conformance suite (cluster-inventory-api#60) are
// checked too: one profile per registered cluster, the manager label
// equal to spec.clusterManager.name, the member's version, properties
// and conditions matching, no duplicates.
func TestClusterPropertiesArePublishedAsKEP4322Says(t *testing.T) {
	t.Parallel()
	suite.InstallClusterProfileCRD(t)
	if _, err := envtest.InstallCRDs(suite.Members[1].Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{clusterPropertyCRD.DeepCopy()}}); err != nil {
		t.Fatal(err)
	}
	member := suite.MemberClients[1]
	for _, p := range []*unstructured.Unstructured{clusterProperty("cluster.clusterset.k8s.io", "kep-b-id"), clusterProperty("location", "eu-west")} {
		if err := member.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = member.Delete(t.Context(), p) })
	}

	const ns = "inventory-kep4322"
	fleettest.CreateNamespace(t, suite.HubClient, ns)
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Configure: fleettest.QuickHealth, Deferred: true})
	if err := clusterprofile.Add(f.Manager, clusterprofile.Options{Namespace: ns, PropertiesInterval: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.Start(t)
	noCRD := f.Register(t, "kep-a", suite.Kubeconfigs[0])
	withCRD := f.Register(t, "kep-b", suite.Kubeconfigs[1])
	noCRD.Labels["tier"] = "gold"
	withCRD.Labels["tier"], withCRD.Labels["location"] = "silver", "from-a-label"
	for _, s := range []client.Object{noCRD, withCRD} {
		if err := suite.HubClient.Update(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]string{"cluster.clusterset.k8s.io": "kep-b-id", "location": "eu-west"}
	poll.Until(t, "kep-b's profile with its ClusterProperty objects as properties, and nothing else", func() bool {
		cp := suite.GetProfile(t, ns, "kep-b")
		return cp != nil && maps.Equal(propertiesOf(cp), want) && cp.Labels["tier"] == "silver"
	})
	poll.Until(t, "kep-a's profile, whose member has no ClusterProperty API, with its labels and no properties", func() bool {
		cp := suite.GetProfile(t, ns, "kep-a")
		return cp != nil && cp.Labels["tier"] == "gold" && len(cp.Status.Properties) == 0 && fleettest.HealthyIs(cp, metav1.ConditionTrue)
	})
	b := suite.GetProfile(t, ns, "kep-b")
	if b.Labels["location"] != "from-a-label" {
		t.Errorf("the member's label location=%q on the profile, want from-a-label: labels stay labels", b.Labels["location"])
	}
	if _, marker := b.Labels[registry.KubeconfigLabel]; marker {
		t.Errorf("the registration's marker label %s was published as the cluster's", registry.KubeconfigLabel)
	}

	// The conformance scenarios.
	list := &v1alpha1.ClusterProfileList{}
	if err := suite.ProfileClient(t).List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.FleetLabel: f.Namespace}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, cp := range list.Items {
		names = append(names, cp.Name)
		if cp.Labels[v1alpha1.LabelClusterManagerKey] != cp.Spec.ClusterManager.Name || cp.Spec.ClusterManager.Name != clusterprofile.ClusterManager {
			t.Errorf("profile %s: manager label %q, spec.clusterManager.name %q", cp.Name, cp.Labels[v1alpha1.LabelClusterManagerKey], cp.Spec.ClusterManager.Name)
		}
		dc, err := discovery.NewDiscoveryClientForConfig(suite.Members[map[string]int{"kep-a": 0, "kep-b": 1}[cp.Name]].Config)
		if err != nil {
			t.Fatal(err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if cp.Status.Version.Kubernetes != v.GitVersion {
			t.Errorf("profile %d %s: version %q, the member serves %q", i, cp.Name, cp.Status.Version.Kubernetes, v.GitVersion)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"kep-a", "kep-b"}) {
		t.Errorf("profiles %v: want exactly one per registered cluster, kep-a and kep-b", names)
	}

	// Properties follow the member; a label taken off the member leaves
	// the profile, and one another writer set on the profile stays.
	location := clusterProperty("location", "")
	if err := member.Get(t.Context(), client.ObjectKeyFromObject(location), location); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(location.Object, "eu-central", "spec", "value")
	if err := member.Update(t.Context(), location); err != nil {
		t.Fatal(err)
	}
	if err := member.Delete(t.Context(), clusterProperty("cluster.clusterset.k8s.io", "")); err != nil {
		t.Fatal(err)
	}
	// A merge patch of the label alone: the manager writes the profile's
	// status meanwhile, and an Update of a read copy could conflict.
	b = suite.GetProfile(t, ns, "kep-b")
	if err := suite.ProfileClient(t).Patch(t.Context(), b, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"someone-else"}}}`))); err != nil {
		t.Fatal(err)
	}
	delete(withCRD.Labels, "tier")
	if err := suite.HubClient.Get(t.Context(), client.ObjectKeyFromObject(withCRD), withCRD); err != nil {
		t.Fatal(err)
	}
	delete(withCRD.Labels, "tier")
	if err := suite.HubClient.Update(t.Context(), withCRD); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "kep-b's profile following its member's properties and labels", func() bool {
		cp := suite.GetProfile(t, ns, "kep-b")
		_, tier := cp.Labels["tier"]
		return maps.Equal(propertiesOf(cp), map[string]string{"location": "eu-central"}) && !tier
	})
	if got := suite.GetProfile(t, ns, "kep-b").Labels["owner"]; got != "someone-else" {
		t.Errorf("a label another writer set on the profile is %q, want it left alone", got)
	}
}
