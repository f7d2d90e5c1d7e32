package propagation

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
)

// ours reports whether p is this fleet's: labelled FleetLabel with the
// fleet namespace. Another fleet's Propagation, or one no fleet claimed
// yet (see unclaimed), is left alone.
func (r *reconciler) ours(p client.Object) bool {
	return p.GetLabels()[fleetv1alpha1.FleetLabel] == r.fleet
}

// unclaimed reports whether p names no fleet: the first manager that
// handles it claims it for its fleet, setting FleetLabel.
func unclaimed(p client.Object) bool {
	_, ok := p.GetLabels()[fleetv1alpha1.FleetLabel]
	return !ok
}

// concerned passes the events of this fleet's Propagations and of those
// no fleet claimed yet; an update also when the Propagation was this
// fleet's before it, so that the fleet lets it go.
func (r *reconciler) concerned() predicate.Funcs {
	mine := func(o client.Object) bool { return r.ours(o) || unclaimed(o) }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return mine(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return mine(e.ObjectOld) || mine(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return mine(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return mine(e.Object) },
	}
}

// propagations lists the Propagations and ClusterPropagations once the
// manager's cache has started: a list before that fails, and what asked
// for it would be lost.
func (r *reconciler) propagations(ctx context.Context) ([]fleetv1alpha1.Propagation, error) {
	props, err := r.listPropagations(ctx)
	if err != nil {
		return nil, err
	}
	cluster, err := r.listClusterPropagations(ctx)
	return append(props, cluster...), err
}

// listPropagations lists this fleet's (namespaced) Propagations as opts
// say.
func (r *reconciler) listPropagations(ctx context.Context, opts ...client.ListOption) ([]fleetv1alpha1.Propagation, error) {
	if !r.m.GetCache().WaitForCacheSync(ctx) {
		return nil, ctx.Err()
	}
	props := &fleetv1alpha1.PropagationList{}
	err := r.hub.List(ctx, props, append(opts, client.MatchingLabels{fleetv1alpha1.FleetLabel: r.fleet})...)
	return props.Items, err
}

// journalKinds lists the kinds of the copies and owed removals the journal
// holds for member: all, or those of the Propagation key.
func (r *reconciler) journalKinds(member string, key *propagationKey) []schema.GroupVersionKind {
	var kinds []schema.GroupVersionKind
	add := func(gvk schema.GroupVersionKind) {
		if !slices.Contains(kinds, gvk) {
			kinds = append(kinds, gvk)
		}
	}
	owed, _ := r.journal.Owed(member)
	for _, o := range owed {
		if key == nil || (o.Namespace == key.Namespace && o.Propagation == key.Name) {
			for _, gvk := range o.Kinds {
				add(gvk)
			}
		}
	}
	if key != nil {
		copied, _ := r.journal.KindsOf(member, key.Namespace, key.Name)
		for _, gvk := range copied {
			add(gvk)
		}
		return kinds
	}
	copies, _ := r.journal.Copies(member)
	for _, c := range copies {
		add(c.GVK)
	}
	return kinds
}

// memberPropagations lists the Propagations whose removals member owes,
// then every Propagation and those the journal knows copies of there.
func (r *reconciler) memberPropagations(ctx context.Context, member string) []propagationKey {
	var keys []propagationKey
	add := func(key propagationKey) {
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	owed, _ := r.journal.Owed(member)
	for _, o := range owed {
		add(propagationKey{Namespace: o.Namespace, Name: o.Propagation})
	}
	copies, _ := r.journal.Copies(member)
	for _, c := range copies {
		add(propagationKey{Namespace: c.Namespace, Name: c.Propagation})
	}
	props, err := r.propagations(ctx)
	if err != nil {
		return keys
	}
	for i := range props {
		add(client.ObjectKeyFromObject(&props[i]))
	}
	return keys
}

// kindsOf lists the kinds p copies now and those it copied before, or
// copies from Envelopes (status.kinds).
func kindsOf(p *fleetv1alpha1.Propagation) []schema.GroupVersionKind {
	var kinds []schema.GroupVersionKind
	add := func(apiVersion, kind string) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return
		}
		if gvk := gv.WithKind(kind); !slices.Contains(kinds, gvk) {
			kinds = append(kinds, gvk)
		}
	}
	for _, res := range p.Spec.Resources {
		add(res.APIVersion, res.Kind)
	}
	// An Envelope is never copied: status.kinds has its manifests' kinds.
	kinds = slices.DeleteFunc(kinds, content.IsEnvelope)
	for _, k := range p.Status.Kinds {
		add(k.APIVersion, k.Kind)
	}
	return kinds
}

// selects reports whether p selects the member named name, labelled l.
func selects(p *fleetv1alpha1.Propagation, name string, l map[string]string) (bool, error) {
	selected, err := p.Spec.Members.Selects(name, l)
	if err != nil {
		return false, invalidMembersSelector(err)
	}
	return selected, nil
}

// membersSelectorError says why p's members selector does not parse, nil
// if it does.
func membersSelectorError(p *fleetv1alpha1.Propagation) *kindError {
	if _, err := p.Spec.Members.Selector.AsSelector(); err != nil {
		return invalidMembersSelector(err)
	}
	return nil
}

// invalidMembersSelector is why spec.members' selector, which err says
// does not parse, selects nothing.
func invalidMembersSelector(err error) *kindError {
	return &kindError{reason: fleetv1alpha1.ReasonInvalidSelector, message: fmt.Sprintf("the members selector: %v", err)}
}

// propagationKey names a Propagation.
type propagationKey = types.NamespacedName
