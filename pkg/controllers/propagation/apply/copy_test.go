package apply

import (
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func object(content map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: content}
}

func hubService(clusterIP string) *unstructured.Unstructured {
	return object(map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{
			"namespace": "team-a", "name": "web", "uid": "u-1", "resourceVersion": "7", "generation": int64(2),
			"creationTimestamp": "2026-11-24T00:00:00Z", "finalizers": []any{"hub.example/x"},
			"ownerReferences": []any{map[string]any{"name": "owner"}},
			"managedFields":   []any{map[string]any{"manager": "kubectl"}},
			"labels":          map[string]any{"app": "web"},
			"annotations":     map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "kept"},
		},
		"spec":   map[string]any{"clusterIP": clusterIP, "clusterIPs": []any{clusterIP}, "ports": []any{map[string]any{"port": int64(80), "nodePort": int64(31234)}}},
		"status": map[string]any{"loadBalancer": map[string]any{}},
	})
}

func propagationNamed(name string, deletion fleetv1alpha1.DeletionPolicy) *fleetv1alpha1.Propagation {
	return &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Spec: fleetv1alpha1.PropagationSpec{Deletion: deletion}}
}

func TestDesiredCopyStripsWhatTheHubFilledIn(t *testing.T) {
	c := plainCopy(t, hubService("10.0.0.7"), propagationNamed("web", ""), "id-a")
	if _, ok := c.Object["status"]; ok {
		t.Error("status copied")
	}
	for _, field := range [][]string{{"metadata", "uid"}, {"metadata", "resourceVersion"}, {"metadata", "generation"}, {"metadata", "creationTimestamp"}, {"metadata", "finalizers"}, {"metadata", "ownerReferences"}, {"metadata", "managedFields"}, {"spec", "clusterIP"}, {"spec", "clusterIPs"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(c.Object, field...); found {
			t.Errorf("%v copied", field)
		}
	}
	if ports, _, _ := unstructured.NestedSlice(c.Object, "spec", "ports"); len(ports) != 1 || !reflect.DeepEqual(ports[0], map[string]any{"port": int64(80)}) {
		t.Errorf("spec.ports = %v, want the author's port without the hub's node port", ports)
	}
	if got := c.GetLabels(); got["app"] != "web" || got[fleetv1alpha1.FleetLabel] != "fleet-a" || got[fleetv1alpha1.FleetIDLabel] != "id-a" || got[fleetv1alpha1.PropagationLabel] != "web" {
		t.Errorf("labels %v", got)
	}
	a := c.GetAnnotations()
	if _, ok := a["kubectl.kubernetes.io/last-applied-configuration"]; ok || a["note"] != "kept" {
		t.Errorf("annotations %v: want note kept, last-applied dropped", a)
	}
	if a[fleetv1alpha1.SourceAnnotation] != "v1/Service/team-a/web" || a[fleetv1alpha1.SourceUIDAnnotation] != "u-1" || a[fleetv1alpha1.DeletionAnnotation] != "Delete" {
		t.Errorf("annotations %v", a)
	}

	headless := plainCopy(t, hubService("None"), propagationNamed("web", ""), "id-a")
	if ip, _, _ := unstructured.NestedString(headless.Object, "spec", "clusterIP"); ip != "None" {
		t.Errorf("a headless Service's clusterIP = %q, want None kept", ip)
	}
}

func TestContentHashFollowsContentAndPolicy(t *testing.T) {
	hash := func(c *unstructured.Unstructured) string {
		return c.GetAnnotations()[fleetv1alpha1.ContentHashAnnotation]
	}
	a := plainCopy(t, hubService("10.0.0.7"), propagationNamed("web", ""), "id-a")
	if b := plainCopy(t, hubService("10.0.0.9"), propagationNamed("web", ""), "id-a"); hash(a) != hash(b) {
		t.Error("the hash depends on a server-set field")
	}
	changed := hubService("10.0.0.7")
	changed.Object["spec"].(map[string]any)["ports"] = []any{map[string]any{"port": int64(81)}}
	if hash(a) == hash(plainCopy(t, changed, propagationNamed("web", ""), "id-a")) {
		t.Error("the hash ignores a changed port")
	}
	if hash(a) == hash(plainCopy(t, hubService("10.0.0.7"), propagationNamed("web", fleetv1alpha1.DeletionOrphan), "id-a")) {
		t.Error("the hash ignores the deletion policy the copy carries")
	}
	if hash(a) == hash(plainCopy(t, hubService("10.0.0.7"), propagationNamed("web", ""), "id-b")) {
		t.Error("the hash ignores the fleet's identity")
	}
}

func TestDriftComparesOnlyWhatIsApplied(t *testing.T) {
	desired := object(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "web:1"}}}},
		},
	})
	live := func(edit func(spec map[string]any)) *unstructured.Unstructured {
		l := desired.DeepCopy()
		spec := l.Object["spec"].(map[string]any)
		spec["revisionHistoryLimit"] = int64(10) // a default
		container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		container["imagePullPolicy"] = "IfNotPresent" // a default in a list item
		l.SetLabels(map[string]string{"app": "web", "added": "by someone"})
		if edit != nil {
			edit(spec)
		}
		return l
	}
	if d := Drift(desired, live(nil)); len(d) != 0 {
		t.Errorf("defaults and additions counted as drift: %v", d)
	}
	d := Drift(desired, live(func(spec map[string]any) {
		spec["replicas"] = float64(3)
		spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "web:2"
	}))
	if want := []string{".spec.replicas", ".spec.template.spec.containers[0].image"}; !slices.Equal(d, want) {
		t.Errorf("drift = %v, want %v", d, want)
	}
	if d := Drift(desired, live(func(spec map[string]any) { spec["replicas"] = float64(2) })); len(d) != 0 {
		t.Errorf("2 and 2.0 differ: %v", d)
	}
	removedLabel := live(nil)
	removedLabel.SetLabels(nil)
	if d := Drift(desired, removedLabel); !slices.Equal(d, []string{".metadata.labels.app"}) {
		t.Errorf("drift = %v, want the removed label", d)
	}
}

// managedBy returns a managedFields entry for fields (FieldsV1 JSON).
func managedBy(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: subresource, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

func TestFieldsClaimedByOthersAreNotDrift(t *testing.T) {
	desired := object(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "web", "image": "web:1"},
				map[string]any{"name": "sidecar", "image": "proxy:1"},
			}}},
		},
	})
	live := desired.DeepCopy()
	spec := live.Object["spec"].(map[string]any)
	spec["replicas"] = int64(5)
	spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[1].(map[string]any)["image"] = "proxy:2"
	spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "web:9"
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		managedBy(fleetv1alpha1.FieldManager, metav1.ManagedFieldsOperationApply, "", `{"f:spec":{"f:replicas":{}}}`),
		managedBy("autoscaler", metav1.ManagedFieldsOperationUpdate, "scale", `{"f:spec":{"f:replicas":{}}}`),
		managedBy("mesh-injector", metav1.ManagedFieldsOperationApply, "", `{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"sidecar\"}":{".":{},"f:image":{}}}}}}}`),
		managedBy("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", `{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{"f:image":{}}}}}}}`),
	})
	if d := Drift(desired, live); !slices.Equal(d, []string{".spec.template.spec.containers[0].image"}) {
		t.Errorf("drift = %v, want only the plain update's image: replicas (scale) and the sidecar (applied) are claimed", d)
	}
	apply := desired.DeepCopy()
	WithoutClaims(apply, ClaimedByOthers(live))
	if _, found, _ := unstructured.NestedFieldNoCopy(apply.Object, "spec", "replicas"); found {
		t.Error("the copy to apply still sets replicas, which the autoscaler owns")
	}
	if containers, _, _ := unstructured.NestedSlice(apply.Object, "spec", "template", "spec", "containers"); len(containers) != 2 {
		t.Errorf("containers = %v: a claim inside a list item must not remove list items", containers)
	}
}

func TestClaimsCover(t *testing.T) {
	c := Claims{".spec.replicas": {"spec", "replicas"}, ".spec.args": nil}
	for path, want := range map[string]bool{
		".spec.replicas": true, ".spec.args[2]": true, ".spec.replicasX": false, ".spec": false, ".data.x": false,
	} {
		if got := c.covers(path); got != want {
			t.Errorf("covers(%q) = %t, want %t", path, got, want)
		}
	}
}

// plainCopy is the copy of hub, of p in fleet-a of identity id, that a
// member no override selects holds.
func plainCopy(t *testing.T, hub *unstructured.Unstructured, p *fleetv1alpha1.Propagation, id string) *unstructured.Unstructured {
	t.Helper()
	c, err := DesiredCopy(hub, p, p.Spec.Overrides, "fleet-a", id, Member{Name: "east"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
