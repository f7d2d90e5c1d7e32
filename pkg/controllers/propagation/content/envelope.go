package content

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// IsEnvelope reports whether gvk is an Envelope's or a ClusterEnvelope's,
// whose manifests are applied in its place.
func IsEnvelope(gvk schema.GroupVersionKind) bool {
	return gvk.Group == fleetv1alpha1.GroupVersion.Group && (gvk.Kind == "Envelope" || gvk.Kind == "ClusterEnvelope")
}

// Unpack returns the manifests of env, an Envelope or a ClusterEnvelope
// on the hub, as the hub objects they stand for: of env's namespace (none
// for a ClusterEnvelope) and UID, labelled with EnvelopeLabel. A manifest
// that breaks a rule is left out, with a failure naming it: one that is
// no object, names another namespace, is of the other scope than env (as
// the hub knows the kind: one it does not know may be served by members),
// is an Envelope, has the kind and name of an earlier manifest, or is
// refused (see Refusal). Manifests are never cut: the hub bounds an
// Envelope when it is written.
func (b *Builder) Unpack(env *unstructured.Unstructured) ([]*unstructured.Unstructured, []Problem) {
	objs, problems, _ := b.unpack(env)
	return objs, problems
}

// unpack is Unpack, and reports whether the hub knew the kind of every
// manifest.
func (b *Builder) unpack(env *unstructured.Unstructured) (objs []*unstructured.Unstructured, problems []Problem, mapped bool) {
	raw, _, err := unstructured.NestedSlice(env.Object, "manifests")
	if err != nil {
		return nil, []Problem{{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("Envelope %s: manifests is not a list", env.GetName())}}, true
	}
	mapped = true
	seen := map[schema.GroupKind]map[string]int{} // the index of the first manifest of each kind and name
	for i, m := range raw {
		fields, ok := m.(map[string]any)
		if !ok {
			problems = append(problems, Problem{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("manifest %d of %s %s is not an object", i, env.GetKind(), env.GetName())})
			continue
		}
		obj := &unstructured.Unstructured{Object: fields}
		name := fmt.Sprintf("manifest %d (%s %s) of %s %s", i, obj.GetKind(), obj.GetName(), env.GetKind(), env.GetName())
		reason, problem, known := b.manifestProblem(obj, env.GetNamespace())
		mapped = mapped && known
		if problem != "" {
			problems = append(problems, Problem{Reason: reason, Message: name + " " + problem})
			continue
		}
		gk := obj.GroupVersionKind().GroupKind()
		if first, ok := seen[gk][obj.GetName()]; ok {
			problems = append(problems, Problem{Reason: fleetv1alpha1.ReasonInvalid, Message: fmt.Sprintf("%s has the kind and name of manifest %d: it is not applied", name, first)})
			continue
		}
		if seen[gk] == nil {
			seen[gk] = map[string]int{}
		}
		seen[gk][obj.GetName()] = i
		obj = obj.DeepCopy()
		obj.SetNamespace(env.GetNamespace())
		obj.SetUID(env.GetUID())
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[fleetv1alpha1.EnvelopeLabel] = env.GetName()
		obj.SetLabels(labels)
		if rule, refused := Refusal(obj, b.Fleet); refused {
			problems = append(problems, Problem{Reason: fleetv1alpha1.ReasonRefused, Message: name + " is refused: " + rule})
			continue
		}
		objs = append(objs, obj)
	}
	return objs, problems, mapped
}

// manifestProblem says what makes obj, a manifest of an Envelope of
// namespace ("" for a ClusterEnvelope), one that is not applied, and the
// reason; "" if nothing does. known is false when the hub does not know
// obj's kind (it may be served by members), whose scope is not checked.
func (b *Builder) manifestProblem(obj *unstructured.Unstructured, namespace string) (reason, problem string, known bool) {
	gv, err := schema.ParseGroupVersion(obj.GetAPIVersion())
	switch {
	case err != nil || obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "":
		return fleetv1alpha1.ReasonInvalid, "needs apiVersion, kind and metadata.name", true
	case IsEnvelope(gv.WithKind(obj.GetKind())):
		return fleetv1alpha1.ReasonInvalid, "is an Envelope: Envelopes do not nest", true
	case obj.GetNamespace() != "" && namespace == "":
		return fleetv1alpha1.ReasonInvalid, fmt.Sprintf("names namespace %s: a ClusterEnvelope holds cluster-scoped objects", obj.GetNamespace()), true
	case obj.GetNamespace() != "" && obj.GetNamespace() != namespace:
		return fleetv1alpha1.ReasonInvalid, fmt.Sprintf("names namespace %s: an Envelope holds objects of its own namespace", obj.GetNamespace()), true
	}
	mapping, err := b.Mapper.RESTMapping(gv.WithKind(obj.GetKind()).GroupKind(), gv.Version)
	switch clusterScoped := err == nil && mapping.Scope.Name() == meta.RESTScopeNameRoot; {
	case err != nil:
		return "", "", false
	case clusterScoped && namespace != "":
		return fleetv1alpha1.ReasonClusterScoped, "is of a cluster-scoped kind: a Propagation applies objects of its own namespace (a ClusterEnvelope holds it)", true
	case !clusterScoped && namespace == "":
		return fleetv1alpha1.ReasonNamespacedKind, "is of a namespaced kind: a ClusterPropagation applies cluster-scoped objects (an Envelope holds it)", true
	}
	return "", "", true
}
