package enroll

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// RemoveCopies deletes, in the member that cfg reaches, the copies the
// fleet of identity fleetID propagated there: objects of the kinds the
// hub's Propagations copy (their resources and the kinds their status
// lists) that carry fleetv1alpha1.FleetIDLabel with that identity and
// fleetv1alpha1.PropagationLabel. It looks in every namespace, or, when
// the person may not list cluster-wide, in the Propagations' namespaces.
// With keep, it deletes nothing and returns them as kept. It reads only
// the copies' metadata, never a Secret's data. The warnings say where it
// could not look.
func RemoveCopies(ctx context.Context, cfg *rest.Config, hub client.Client, fleetID string, keep bool) ([]Change, []string, error) {
	if fleetID == "" {
		return nil, []string{"the hub holds no fleet identity, so no copy in the member can be proven this fleet's: none removed"}, nil
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	kinds, namespaces, err := propagated(ctx, hub)
	if err != nil {
		return nil, nil, err
	}
	var changes []Change
	var warnings []string
	for _, gvk := range kinds {
		m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue // the member has none
		}
		if err != nil {
			return changes, warnings, fmt.Errorf("member discovery of %s: %w", gvk, err)
		}
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			continue // never copied
		}
		copies, warning, err := listCopies(ctx, c, gvk, fleetID, namespaces)
		if err != nil {
			return changes, warnings, err
		}
		if warning != "" {
			warnings = append(warnings, warning)
		}
		for _, obj := range copies {
			of := "Propagation " + obj.Namespace + "/" + obj.Labels[fleetv1alpha1.PropagationLabel]
			if keep {
				changes = append(changes, Change{Object: obj, Op: "kept", Reason: "--keep-copies; it is still labelled a copy of " + of})
				continue
			}
			err := c.Delete(ctx, obj, client.Preconditions{UID: &obj.UID})
			if apierrors.IsForbidden(err) {
				return changes, warnings, &ForbiddenError{Verb: "delete", Resource: gvk.Kind + "s", Err: err}
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return changes, warnings, fmt.Errorf("deleting %s in the member: %w", Describe(obj), err)
			}
			changes = append(changes, Change{Object: obj, Op: "deleted", Reason: "a copy of " + of})
		}
	}
	return changes, warnings, nil
}

// propagated returns the kinds the hub's Propagations copy, and the
// namespaces they copy to.
func propagated(ctx context.Context, hub client.Client) ([]schema.GroupVersionKind, []string, error) {
	kinds, _, _, err := copiedKinds(ctx, hub, nil)
	if err != nil || len(kinds) == 0 {
		return nil, nil, err
	}
	var props fleetv1alpha1.PropagationList
	if err := hub.List(ctx, &props); err != nil {
		return nil, nil, fmt.Errorf("listing Propagations on the hub: %w", err)
	}
	var namespaces []string
	for _, p := range props.Items {
		if !slices.Contains(namespaces, p.Namespace) {
			namespaces = append(namespaces, p.Namespace)
		}
	}
	return kinds, namespaces, nil
}

// listCopies lists the copies of kind gvk the fleet of identity id made,
// cluster-wide, or in namespaces when that is forbidden; the warning
// names where it could not look.
func listCopies(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, id string, namespaces []string) ([]*metav1.PartialObjectMetadata, string, error) {
	sel := client.MatchingLabels{fleetv1alpha1.FleetIDLabel: id}
	list := func(opts ...client.ListOption) ([]*metav1.PartialObjectMetadata, error) {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, l, append(opts, sel, client.HasLabels{fleetv1alpha1.PropagationLabel})...); err != nil {
			return nil, err
		}
		var objs []*metav1.PartialObjectMetadata
		for i := range l.Items {
			obj := &l.Items[i]
			if obj.Labels[fleetv1alpha1.FleetIDLabel] != id || obj.Labels[fleetv1alpha1.PropagationLabel] == "" {
				continue // the selector said so already; never trust it alone
			}
			obj.SetGroupVersionKind(gvk)
			objs = append(objs, obj)
		}
		return objs, nil
	}
	objs, err := list()
	if !apierrors.IsForbidden(err) {
		if err != nil {
			return nil, "", fmt.Errorf("listing %s copies in the member: %w", gvk.Kind, err)
		}
		return objs, "", nil
	}
	var unseen []string
	for _, ns := range namespaces {
		in, err := list(client.InNamespace(ns))
		switch {
		case apierrors.IsForbidden(err):
			unseen = append(unseen, ns)
		case err != nil:
			return nil, "", fmt.Errorf("listing %s copies in namespace %s of the member: %w", gvk.Kind, ns, err)
		}
		objs = append(objs, in...)
	}
	if len(unseen) > 0 {
		return objs, fmt.Sprintf("your member credentials may not list %s in %v: copies there are left", gvk.Kind, unseen), nil
	}
	return objs, "", nil
}
