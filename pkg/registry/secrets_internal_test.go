package registry

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// The Secret cache keeps only what a registration needs: a kubeconfig over
// the budget costs it a few bytes instead of a megabyte, and its refusal
// still reaches the registry with its reason (issue 12, defect 10).
func TestSecretCacheKeepsOnlyRegistration(t *testing.T) {
	big := kubeconfigtest.Flat(kubeconfig.MaxKubeconfigBytes)
	good := kubeconfigtest.Build(t, nil)
	argoBig := []byte(`{"bearerToken":"t"` + string(slices.Repeat([]byte(`,"k":1`), kubeconfig.MaxKubeconfigElements+1)) + `}`)
	for name, tc := range map[string]struct {
		format     Format
		data       map[string][]byte
		wantKeys   []string
		wantReason string // "" means accepted
	}{
		"native, over the budget": {
			format: NativeFormat("fleet"), data: map[string][]byte{KubeconfigKey: big, "notes": big},
			wantKeys: []string{KubeconfigKey}, wantReason: kubeconfig.ReasonKubeconfigTooComplex,
		},
		"native, good": {
			format: NativeFormat("fleet"), data: map[string][]byte{KubeconfigKey: good, "notes": big},
			wantKeys: []string{KubeconfigKey},
		},
		"Cluster API, over the budget": {
			format: ClusterAPIFormat(nil), data: map[string][]byte{ClusterAPIKey: big},
			wantKeys: []string{ClusterAPIKey}, wantReason: kubeconfig.ReasonKubeconfigTooComplex,
		},
		"Argo CD, over the budget": {
			format: ArgoCDFormat("fleet"), data: map[string][]byte{"name": []byte("member-1"), "server": []byte("https://member.example.com"), "config": argoBig},
			wantKeys: []string{"config", "name", "server"}, wantReason: kubeconfig.ReasonKubeconfigTooComplex,
		},
	} {
		t.Run(name, func(t *testing.T) {
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "fleet", Name: "member-1-kubeconfig",
					Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: string(good), ClusterNameAnnotation: "member-1"},
					ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
				},
				Type: ClusterAPISecretType,
				Data: tc.data,
			}
			transform := keepOnlyRegistration(tc.format)
			obj, err := transform(secret)
			if err != nil {
				t.Fatal(err)
			}
			cached := obj.(*corev1.Secret)
			if keys := slices.Sorted(maps.Keys(cached.Data)); !slices.Equal(keys, tc.wantKeys) {
				t.Errorf("cached data keys = %q, want %q", keys, tc.wantKeys)
			}
			size := 0
			for _, v := range cached.Data {
				size += len(v)
			}
			if limit := len(good) + 1024; size > limit {
				t.Errorf("the cached Secret holds %d bytes of data, want at most %d", size, limit)
			}
			if cached.ManagedFields != nil || cached.Annotations[corev1.LastAppliedConfigAnnotation] != "" {
				t.Error("the cached Secret keeps its managed fields or last applied configuration")
			}
			if cached.Annotations[ClusterNameAnnotation] != "member-1" {
				t.Error("the cached Secret lost its cluster name annotation")
			}
			again, _ := transform(cached.DeepCopy())
			if !reflect.DeepEqual(again, cached) {
				t.Error("transforming a cached Secret again changes it")
			}

			r := &secretReader{registry: New(tc.format.Name), format: tc.format}
			r.registry.fleetNamespace = "fleet" // where the annotation names a Cluster API Secret's cluster
			r.read(t.Context(), cached)
			c, ok := r.registry.Get("member-1")
			if !ok {
				t.Fatal("no claim for member-1")
			}
			switch {
			case tc.wantReason == "" && c.Refusal != nil:
				t.Errorf("Refusal = %v, want accepted", c.Refusal)
			case tc.wantReason == "" && string(c.Claims[0].kubeconfig) != string(good):
				t.Error("the accepted claim's kubeconfig is not the Secret's")
			case tc.wantReason != "" && (c.Refusal == nil || c.Refusal.Reason != tc.wantReason):
				t.Errorf("Refusal = %v, want reason %s", c.Refusal, tc.wantReason)
			case tc.wantReason != "" && c.Refusal.Message == "":
				t.Error("the refusal has no message")
			}
		})
	}
}

// The security review: a tenant's Cluster API Secret in tenant-a claiming
// eu-1 with the cluster name annotation stopped the real eu-1. The
// annotation names a Cluster API Secret's cluster only in the fleet
// namespace; elsewhere the name keeps its namespace.
func TestClusterAPIAnnotationOnlyInTheFleetNamespace(t *testing.T) {
	r := &secretReader{registry: New("cluster-api"), format: ClusterAPIFormat(nil)}
	r.registry.fleetNamespace = "fleet"
	for _, ns := range []string{"tenant-a", "fleet"} {
		r.read(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-kubeconfig", Annotations: map[string]string{ClusterNameAnnotation: ns + "-renamed"}},
			Type:       ClusterAPISecretType,
			Data:       map[string][]byte{ClusterAPIKey: kubeconfigtest.Build(t, nil)},
		})
	}
	names := []string{}
	for _, c := range r.registry.List() {
		names = append(names, c.Name)
	}
	if want := []string{"fleet-renamed", "tenant-a.x"}; !slices.Equal(names, want) {
		t.Errorf("registered %q, want %q", names, want)
	}
}
