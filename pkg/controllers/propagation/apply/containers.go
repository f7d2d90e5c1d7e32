package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// A container is a kind whose deletion deletes other objects that do not
// say so themselves: deleting a Namespace deletes everything in it, and
// deleting a CustomResourceDefinition every custom resource of its kind.
// A copy of a container is deleted only when it holds nothing but the
// Propagation's own copies; otherwise it is orphaned, and the member's
// result says so (ContainerNotEmpty). Not containers: an APIService, whose
// deletion makes its API unreachable but deletes nothing, and an object
// others name as their owner, whose cascade they chose.
var (
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	crdKind       = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

func isContainer(gk schema.GroupKind) bool { return gk == namespaceKind || gk == crdKind }

// contentPageSize bounds each list of a container's content.
const contentPageSize = 100

// notContent are the resources a namespace's content leaves out: records
// of what happened to its objects, which go with them.
var notContent = []schema.GroupResource{{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"}}

// otherContent says what container copy c holds in the member besides the
// run's own copies, or "" if nothing. Every doubt is content: discovery
// that fails, a kind that cannot be listed, a list that fails. Its error
// is only the run's context ending.
func (run *Run) otherContent(ctx context.Context, c *unstructured.Unstructured) (string, error) {
	if c.GroupVersionKind().GroupKind() == namespaceKind {
		return run.namespaceContent(ctx, c.GetName())
	}
	gvr, ok := customResources(c)
	if !ok {
		return "its custom resources cannot be listed: it names no served version", nil
	}
	return run.foreignObjects(ctx, gvr, metav1.NamespaceAll)
}

// namespaceContent says what namespace holds besides the run's own copies
// and what its API server made there itself, listing every namespaced kind
// the member serves, metadata only: discovery once, then one list per
// kind until the first object found.
func (run *Run) namespaceContent(ctx context.Context, namespace string) (string, error) {
	lists, err := run.member.Discovery.ServerPreferredNamespacedResources()
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "the member's API discovery failed, so what it holds is not known", nil
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return "the member's API discovery names an invalid group version, so what it holds is not known", nil
		}
		for _, res := range list.APIResources {
			gvr := gv.WithResource(res.Name)
			// Subresources and kinds that cannot be listed (bindings,
			// reviews) store nothing.
			if strings.Contains(res.Name, "/") || !slices.Contains(res.Verbs, "list") || slices.Contains(notContent, gvr.GroupResource()) {
				continue
			}
			if what, err := run.foreignObjects(ctx, gvr, namespace); what != "" || err != nil {
				return what, err
			}
		}
	}
	return "", nil
}

// foreignObjects says whether resource gvr has objects in namespace (every
// namespace if NamespaceAll) that are neither the run's own copies nor
// made by the member's API server itself: "" if none.
func (run *Run) foreignObjects(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (string, error) {
	opts := metav1.ListOptions{Limit: contentPageSize}
	for {
		list, err := run.member.Metadata.Resource(gvr).Namespace(namespace).List(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return fmt.Sprintf("the manager could not list %s in it (%s), so what it holds is not known", gvr.GroupResource(), DescribeStatus(err)), nil
		}
		for i := range list.Items {
			if o := &list.Items[i]; !run.ownCopy(o) && !madeByServer(gvr.GroupResource(), o) {
				return fmt.Sprintf("it holds %s that are not this Propagation's copies", gvr.GroupResource()), nil
			}
		}
		if list.Continue == "" {
			return "", nil
		}
		opts.Continue = list.Continue
	}
}

// ownCopy reports whether o is this fleet's copy of the run's Propagation:
// in its namespace (none for a ClusterPropagation), with the fleet's
// identity. A copy stamped without one is a doubt, not ours.
func (run *Run) ownCopy(o metav1.Object) bool {
	return o.GetNamespace() == run.key.Namespace && ownerOf(o, run.env.Fleet, run.id, run.key.Name, func() bool { return false }) == ours
}

// madeByServer reports whether o, of resource gr, is what the member's
// controllers make in every namespace: its default ServiceAccount, the
// cluster's CA ConfigMap, and, before Kubernetes 1.24, the default
// ServiceAccount's token Secret.
func madeByServer(gr schema.GroupResource, o metav1.Object) bool {
	switch gr {
	case schema.GroupResource{Resource: "serviceaccounts"}:
		return o.GetName() == "default"
	case schema.GroupResource{Resource: "configmaps"}:
		return o.GetName() == "kube-root-ca.crt"
	case schema.GroupResource{Resource: "secrets"}:
		return strings.HasPrefix(o.GetName(), "default-token-") && o.GetAnnotations()[corev1.ServiceAccountNameKey] == "default"
	}
	return false
}

// customResources names the resource of CRD copy c's custom resources, in
// its storage version if served, else its first served one.
func customResources(c *unstructured.Unstructured) (schema.GroupVersionResource, bool) {
	group, _, _ := unstructured.NestedString(c.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(c.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(c.Object, "spec", "versions")
	version := ""
	for _, v := range versions {
		v, _ := v.(map[string]any)
		name, _, _ := unstructured.NestedString(v, "name")
		served, _, _ := unstructured.NestedBool(v, "served")
		storage, _, _ := unstructured.NestedBool(v, "storage")
		if served && (version == "" || storage) {
			version = name
		}
	}
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
	return gvr, group != "" && plural != "" && version != ""
}

// letGo records that copy k was orphaned rather than deleted, and why
// (reason, message): in the member's result, as a Warning Event on the
// Propagation while it exists, and in the log.
func (run *Run) letGo(ctx context.Context, k Key, reason, message string) {
	run.Orphaned = append(run.Orphaned, Failure{Reason: reason, Message: message})
	logf.FromContext(ctx).Info("Copy orphaned, not deleted", "kind", k.GVK.Kind, "object", k.Name, "reason", reason, "message", message)
	if run.p != nil {
		mc := &fleetv1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: run.member.Name}}
		run.env.Recorder.Eventf(run.env.HubObject(run.p), mc, corev1.EventTypeWarning, reason, "Remove", "member %s: %s", run.member.Name, message)
	}
}
