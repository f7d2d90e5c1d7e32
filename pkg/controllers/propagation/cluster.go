package propagation

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// The controller works on one shape: a Propagation. A ClusterPropagation
// is the Propagation of no namespace, named by a key without one; its
// copies are cluster-scoped, of no namespace either, so each copy is of
// the namespace of its Propagation, as for namespaced ones.

// isCluster reports whether key names a ClusterPropagation.
func isCluster(key propagationKey) bool { return key.Namespace == "" }

// getPropagation reads the Propagation key names, a ClusterPropagation
// when key has no namespace.
func (r *reconciler) getPropagation(ctx context.Context, key propagationKey) (*fleetv1alpha1.Propagation, error) {
	if !isCluster(key) {
		p := &fleetv1alpha1.Propagation{}
		return p, r.hub.Get(ctx, key, p)
	}
	cp := &fleetv1alpha1.ClusterPropagation{}
	if err := r.hub.Get(ctx, key, cp); err != nil {
		return nil, err
	}
	return fromCluster(cp), nil
}

func fromCluster(cp *fleetv1alpha1.ClusterPropagation) *fleetv1alpha1.Propagation {
	return &fleetv1alpha1.Propagation{ObjectMeta: cp.ObjectMeta, Spec: cp.Spec, Status: cp.Status}
}

// hubObject is p as the hub holds it, for writes and Events: a
// ClusterPropagation when p has no namespace.
func hubObject(p *fleetv1alpha1.Propagation) client.Object {
	if p.Namespace != "" {
		return p
	}
	return &fleetv1alpha1.ClusterPropagation{ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: *p.Spec.DeepCopy(), Status: *p.Status.DeepCopy()}
}

// propagationsIn lists the Propagations of namespace, or the
// ClusterPropagations when namespace is "".
func (r *reconciler) propagationsIn(ctx context.Context, namespace string, opts ...client.ListOption) ([]fleetv1alpha1.Propagation, error) {
	if namespace != "" {
		return r.listPropagations(ctx, append(opts, client.InNamespace(namespace))...)
	}
	return r.listClusterPropagations(ctx, opts...)
}

// listClusterPropagations lists this fleet's ClusterPropagations, as
// Propagations of no namespace; none when the hub has no
// ClusterPropagation CRD.
func (r *reconciler) listClusterPropagations(ctx context.Context, opts ...client.ListOption) ([]fleetv1alpha1.Propagation, error) {
	if !r.clusterPropagations {
		return nil, nil
	}
	if !r.m.GetCache().WaitForCacheSync(ctx) {
		return nil, ctx.Err()
	}
	list := &fleetv1alpha1.ClusterPropagationList{}
	if err := r.hub.List(ctx, list, append(opts, client.MatchingLabels{fleetv1alpha1.FleetLabel: r.fleet})...); err != nil {
		return nil, err
	}
	props := make([]fleetv1alpha1.Propagation, len(list.Items))
	for i := range list.Items {
		props[i] = *fromCluster(&list.Items[i])
	}
	return props, nil
}
