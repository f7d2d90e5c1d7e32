package fleettest

import (
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

// InstallClusterProfileCRD installs the Cluster Inventory API's
// ClusterProfile CRD on the hub, once for the suite, however many tests,
// parallel or not, ask for it.
func (s *Suite) InstallClusterProfileCRD(t testing.TB) {
	t.Helper()
	s.Need(t)
	s.crdOnce.Do(func() { s.crdErr = controlplane.InstallClusterProfileCRD(s.Hub) })
	if s.crdErr != nil {
		t.Fatal(s.crdErr)
	}
}

// ProfileClient returns an admin client of the hub that knows
// ClusterProfiles.
func (s *Suite) ProfileClient(t testing.TB) client.Client {
	t.Helper()
	s.Need(t)
	s.profileOnce.Do(func() {
		scheme := runtime.NewScheme()
		if s.profileErr = v1alpha1.AddToScheme(scheme); s.profileErr == nil {
			s.profileClient, s.profileErr = client.New(s.Hub.Config, client.Options{Scheme: scheme})
		}
	})
	if s.profileErr != nil {
		t.Fatal(s.profileErr)
	}
	return s.profileClient
}

// CreateProfile creates ClusterProfile ns/name of another cluster
// manager, offering member i through access provider provider with
// clusterName secretName in its exec extension.
func (s *Suite) CreateProfile(t testing.TB, ns, name, provider string, i int, secretName string, labels map[string]string) {
	t.Helper()
	ext, err := json.Marshal(map[string]string{"clusterName": secretName})
	if err != nil {
		t.Fatal(err)
	}
	cp := &v1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       v1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: v1alpha1.ClusterManager{Name: "test-inventory"}},
	}
	cl := s.ProfileClient(t)
	if err := cl.Create(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	cp.Status = v1alpha1.ClusterProfileStatus{
		Conditions: []metav1.Condition{},
		AccessProviders: []v1alpha1.AccessProvider{{Name: provider, Cluster: clientcmdv1.Cluster{
			Server:                   s.Members[i].Config.Host,
			CertificateAuthorityData: s.Members[i].Config.CAData,
			Extensions:               []clientcmdv1.NamedExtension{{Name: "client.authentication.k8s.io/exec", Extension: runtime.RawExtension{Raw: ext}}},
		}}},
	}
	if err := cl.Status().Update(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
}

// GetProfile returns ClusterProfile ns/name, or nil if there is none.
func (s *Suite) GetProfile(t testing.TB, ns, name string) *v1alpha1.ClusterProfile {
	t.Helper()
	cp := &v1alpha1.ClusterProfile{}
	if err := s.ProfileClient(t).Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return cp
}

// HealthyIs reports whether cp's ControlPlaneHealthy condition has
// status.
func HealthyIs(cp *v1alpha1.ClusterProfile, status metav1.ConditionStatus) bool {
	if cp == nil {
		return false
	}
	c := meta.FindStatusCondition(cp.Status.Conditions, v1alpha1.ClusterConditionControlPlaneHealthy)
	return c != nil && c.Status == status
}
