package enroll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// FleetPreset is the preset whose rights Register computes from the hub's
// Propagations, rather than a built-in ClusterRole's.
const FleetPreset = "fleet"

// FleetRoleName names the ClusterRole, and with Options.Namespaces the
// Roles, of FleetPreset, and their bindings.
const FleetRoleName = "fleet-manager:fleet"

// clusterPropertiesRule lets the manager read the member's KEP-2149
// ClusterProperty objects, which the ClusterProfile export publishes as
// the profile's properties: a cluster's identity and facts, no secret.
var clusterPropertiesRule = rbacv1.PolicyRule{APIGroups: []string{"about.k8s.io"}, Resources: []string{"clusterproperties"}, Verbs: []string{"get", "list"}}

// copyVerbs are what the manager does to copies: read and watch them,
// apply them server-side (patch), and remove them.
var copyVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// FleetRights are the rules of FleetPreset: what the fleet's controllers
// need in a member and nothing else. The membercluster controller's probe
// is a SelfSubjectReview, which every authenticated user may create, and
// needs no rule.
type FleetRights struct {
	// Cluster are the ClusterRole's rules: Namespaces, and, without
	// Options.Namespaces, the copied kinds in every namespace.
	Cluster []rbacv1.PolicyRule
	// Namespaced are the rules of the Role in each of Options.Namespaces.
	Namespaced []rbacv1.PolicyRule
	// Propagations is how many of the hub's Propagations they follow.
	Propagations int
	// Skipped say which copied kinds are left out, and why.
	Skipped []string
}

// copiedKinds returns the kinds the hub's Propagations copy, in
// namespaces when given, from their resources and the kinds their status
// says they copied, and the names of the Propagations it followed and of
// those outside namespaces.
func copiedKinds(ctx context.Context, hub client.Client, namespaces []string) (kinds []schema.GroupVersionKind, followed, outside []string, err error) {
	var props fleetv1alpha1.PropagationList
	err = hub.List(ctx, &props)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, nil, nil, nil // a hub without the CRD has no Propagations
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing Propagations on the hub: %w", err)
	}
	add := func(apiVersion, kind string) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if gvk := gv.WithKind(kind); err == nil && !slices.Contains(kinds, gvk) {
			kinds = append(kinds, gvk)
		}
	}
	for _, p := range props.Items {
		name := p.Namespace + "/" + p.Name
		if len(namespaces) > 0 && !slices.Contains(namespaces, p.Namespace) {
			outside = append(outside, name)
			continue
		}
		followed = append(followed, name)
		for _, r := range p.Spec.Resources {
			if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil && gv.Group == fleetv1alpha1.GroupVersion.Group && r.Kind == "Envelope" {
				continue // never copied: status.kinds has its manifests' kinds
			}
			add(r.APIVersion, r.Kind)
		}
		for _, k := range p.Status.Kinds {
			add(k.APIVersion, k.Kind)
		}
	}
	return kinds, followed, outside, nil
}

// fleetRights computes FleetPreset's rules from the hub's Propagations,
// mapping their kinds to the member's resources with mapper.
func fleetRights(ctx context.Context, hub client.Client, mapper meta.RESTMapper, namespaces []string) (*FleetRights, error) {
	if hub == nil {
		return nil, errors.New("the fleet preset reads the hub's Propagations: it needs the hub")
	}
	kinds, followed, outside, err := copiedKinds(ctx, hub, namespaces)
	if err != nil {
		return nil, err
	}
	r := &FleetRights{Propagations: len(followed)}
	if len(outside) > 0 {
		r.Skipped = append(r.Skipped, fmt.Sprintf("Propagations outside --namespaces get no rights, and will fail Forbidden in this member: %s", strings.Join(outside, ", ")))
	}
	byGroup := map[string][]string{}
	for _, gvk := range kinds {
		what := gvk.Kind + " (" + gvk.GroupVersion().String() + ")"
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case meta.IsNoMatchError(err):
			r.Skipped = append(r.Skipped, what+": the member does not serve it; run fleet-manager grants sync once it does")
			continue
		case err != nil:
			return nil, fmt.Errorf("member discovery of %s: %w", what, err)
		case m.Scope.Name() != meta.RESTScopeNameNamespace:
			r.Skipped = append(r.Skipped, what+": it is cluster-scoped, and Propagations copy namespaced kinds only")
			continue
		case gvk.Group == rbacv1.GroupName:
			r.Skipped = append(r.Skipped, what+": writing it would let the manager grant rights")
			continue
		case gvk.Group == "" && gvk.Kind == "Secret" && len(namespaces) == 0:
			r.Skipped = append(r.Skipped, what+": Secrets are granted only with --namespaces, in those namespaces, never cluster-wide")
			continue
		}
		if res := m.Resource.Resource; !slices.Contains(byGroup[gvk.Group], res) {
			byGroup[gvk.Group] = append(byGroup[gvk.Group], res)
		}
	}
	var copies []rbacv1.PolicyRule
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		slices.Sort(byGroup[g])
		copies = append(copies, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: byGroup[g], Verbs: copyVerbs})
	}
	if len(namespaces) == 0 {
		// The manager creates a Propagation's namespace when it is missing.
		r.Cluster = append([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}}, clusterPropertiesRule}, copies...)
		return r, nil
	}
	// Register's namespaces exist: the manager reads them, creates none.
	// It reads kube-system too, whose UID identifies the cluster, so that
	// the cluster registered under another name is recognised.
	named := append(slices.Clone(namespaces), metav1.NamespaceSystem)
	slices.Sort(named)
	r.Cluster = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}, ResourceNames: slices.Compact(named)}, clusterPropertiesRule}
	r.Namespaced = copies
	return r, nil
}

// Notes say what the rights follow, for people.
func (r *FleetRights) Notes() []string {
	if r.Propagations == 0 {
		return []string{"no Propagation on the hub copies anything yet, so the fleet preset grants only what namespaces need; its rights follow the hub's Propagations at the time of register: run fleet-manager grants sync when they change"}
	}
	return []string{fmt.Sprintf("the fleet preset grants what the hub's %d Propagation(s) copy now: run fleet-manager grants sync when they change", r.Propagations)}
}

// DescribeRule says what rule allows, in one line: "get, create
// namespaces" or "get, list deployments.apps named a, b".
func DescribeRule(rule rbacv1.PolicyRule) string {
	var resources []string
	for _, g := range rule.APIGroups {
		for _, res := range rule.Resources {
			if g != "" {
				res += "." + g
			}
			resources = append(resources, res)
		}
	}
	s := strings.Join(rule.Verbs, ", ") + " " + strings.Join(resources, ", ")
	if len(rule.ResourceNames) > 0 {
		s += " named " + strings.Join(rule.ResourceNames, ", ")
	}
	return s
}

// PresetWarning says what a built-in preset allows that people may not
// expect, or "" for none.
func PresetWarning(o Options) string {
	switch {
	case o.Preset == "cluster-admin":
		return "--permissions=cluster-admin lets the fleet's manager do everything in the member; --permissions=fleet grants only what the hub's Propagations need"
	case o.Preset == "edit" && len(o.Namespaces) == 0:
		return "--permissions=edit without --namespaces is cluster-admin in disguise: it lets the manager read every Secret, and create tokens for and impersonate any ServiceAccount of the member, a cluster-admin one in kube-system included; --permissions=fleet grants only what the hub's Propagations need"
	case o.Preset == "edit":
		return "--permissions=edit lets the manager read every Secret of " + strings.Join(o.Namespaces, ", ") + ", and create tokens for and impersonate their ServiceAccounts; --permissions=fleet grants only what the hub's Propagations need"
	case o.Preset == "view":
		return "--permissions=view only reads: Propagations to this member will fail Forbidden; --permissions=fleet grants what they need"
	}
	return ""
}

// fleetObjects are FleetPreset's ClusterRole and binding, and with
// o.Namespaces a Role and RoleBinding in each.
func fleetObjects(o Options, meta func(namespace, name string) metav1.ObjectMeta, sa []rbacv1.Subject, rights *FleetRights) []client.Object {
	objs := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: meta("", FleetRoleName), Rules: rights.Cluster},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: meta("", FleetRoleName),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: FleetRoleName},
			Subjects:   sa,
		},
	}
	for _, ns := range o.Namespaces {
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: meta(ns, FleetRoleName), Rules: rights.Namespaced},
			&rbacv1.RoleBinding{
				ObjectMeta: meta(ns, FleetRoleName),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: FleetRoleName},
				Subjects:   sa,
			})
	}
	return objs
}
