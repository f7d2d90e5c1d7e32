package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// serverFields are fields that a hub API server or a hub controller
// filled in, per kind, which must not reach a member: a member fills in
// its own. Each is a path of map keys under the object.
var serverFields = map[schema.GroupKind][][]string{
	{Kind: "Service"}:               {{"spec", "clusterIP"}, {"spec", "clusterIPs"}, {"spec", "healthCheckNodePort"}},
	{Kind: "ServiceAccount"}:        {{"secrets"}},
	{Kind: "PersistentVolumeClaim"}: {{"spec", "volumeName"}},
	{Kind: "Pod"}:                   {{"spec", "nodeName"}},
	{Group: "batch", Kind: "Job"}: {
		{"spec", "selector"},
		{"spec", "template", "metadata", "labels", "controller-uid"},
		{"spec", "template", "metadata", "labels", "batch.kubernetes.io/controller-uid"},
		{"spec", "template", "metadata", "labels", "job-name"},
		{"spec", "template", "metadata", "labels", "batch.kubernetes.io/job-name"},
	},
}

// hubOnlyAnnotations are annotations of the hub object that are not
// copied.
var hubOnlyAnnotations = []string{
	"kubectl.kubernetes.io/last-applied-configuration",
	"deployment.kubernetes.io/revision",
}

// DesiredCopy is what member should hold for a hub object: the object
// as the hub's author wrote it (no status, no server-set metadata or
// fields), patched by the overrides that select the member, carrying the
// labels and annotations that make it a copy of Propagation p in the fleet
// of namespace fleet and identity fleetID. Its content hash covers all of
// that. An override that does not apply is an error naming it.
func DesiredCopy(hub *unstructured.Unstructured, p *fleetv1alpha1.Propagation, overrides []fleetv1alpha1.Override, fleet, fleetID string, member Member) (*unstructured.Unstructured, error) {
	obj := map[string]any{"apiVersion": hub.GetAPIVersion(), "kind": hub.GetKind()}
	for k, v := range hub.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			obj[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	c := &unstructured.Unstructured{Object: obj}
	removeServerFields(obj, hub.GroupVersionKind().GroupKind())
	c.SetName(hub.GetName())
	c.SetNamespace(hub.GetNamespace())
	c.SetLabels(hub.GetLabels())
	annotations := maps.Clone(hub.GetAnnotations())
	for _, a := range hubOnlyAnnotations {
		delete(annotations, a)
	}
	delete(annotations, fleetv1alpha1.ContentHashAnnotation)
	c.SetAnnotations(annotations)
	if _, err := override(c, overrides, member); err != nil {
		return nil, err
	}
	labels := c.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleetv1alpha1.FleetLabel] = fleet
	labels[fleetv1alpha1.FleetIDLabel] = fleetID
	labels[fleetv1alpha1.PropagationLabel] = p.Name
	c.SetLabels(labels)
	annotations = c.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[fleetv1alpha1.SourceAnnotation] = sourceOf(hub)
	annotations[fleetv1alpha1.SourceUIDAnnotation] = string(hub.GetUID())
	annotations[fleetv1alpha1.DeletionAnnotation] = string(DeletionPolicy(p))
	delete(annotations, fleetv1alpha1.ContentHashAnnotation)
	c.SetAnnotations(annotations)
	annotations[fleetv1alpha1.ContentHashAnnotation] = contentHash(c)
	c.SetAnnotations(annotations)
	return c, nil
}

// removeServerFields removes serverFields from obj, a hub object of kind
// gk, but keeps what its author chose: a headless Service's clusterIP
// None, and a Job's manual selector. A Service's node ports go too: the
// hub allocates them from its own range, where a member may have them
// taken.
func removeServerFields(obj map[string]any, gk schema.GroupKind) {
	if gk == (schema.GroupKind{Kind: "Service"}) {
		removeNodePorts(obj)
	}
	if ip, _, _ := unstructured.NestedString(obj, "spec", "clusterIP"); gk.Kind == "Service" && ip == "None" {
		return
	}
	if manual, _, _ := unstructured.NestedBool(obj, "spec", "manualSelector"); gk.Kind == "Job" && manual {
		return
	}
	for _, path := range serverFields[gk] {
		unstructured.RemoveNestedField(obj, path...)
	}
}

// removeNodePorts removes nodePort from each of a Service's ports.
func removeNodePorts(obj map[string]any) {
	ports, _, _ := unstructured.NestedSlice(obj, "spec", "ports")
	for _, port := range ports {
		if p, ok := port.(map[string]any); ok {
			delete(p, "nodePort")
		}
	}
	if ports != nil {
		_ = unstructured.SetNestedSlice(obj, ports, "spec", "ports")
	}
}

// contentHash hashes an object's JSON, whose map keys encoding/json sorts.
func contentHash(obj *unstructured.Unstructured) string {
	b, err := json.Marshal(obj.Object)
	if err != nil {
		// Unstructured content came from JSON; it encodes.
		panic(fmt.Sprintf("encoding a copy: %v", err))
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// sourceOf names a hub object as SourceAnnotation does.
func sourceOf(obj *unstructured.Unstructured) string {
	return obj.GetAPIVersion() + "/" + obj.GetKind() + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// DeletionPolicy is p's deletion policy, Delete when unset.
func DeletionPolicy(p *fleetv1alpha1.Propagation) fleetv1alpha1.DeletionPolicy {
	if p.Spec.Deletion == "" {
		return fleetv1alpha1.DeletionDelete
	}
	return p.Spec.Deletion
}
