package controlplane

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AggregateClusterRoles fills the aggregated ClusterRoles (view, edit,
// admin) with the rules of the roles they select, as
// kube-controller-manager would: envtest runs none, so they would be empty.
func AggregateClusterRoles(cfg *rest.Config) error {
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	// Three times, as edit aggregates view and admin aggregates edit.
	for range 3 {
		var roles rbacv1.ClusterRoleList
		if err := c.List(ctx, &roles); err != nil {
			return err
		}
		for _, role := range roles.Items {
			if role.AggregationRule == nil {
				continue
			}
			var rules []rbacv1.PolicyRule
			for _, sel := range role.AggregationRule.ClusterRoleSelectors {
				s, err := metav1.LabelSelectorAsSelector(&sel)
				if err != nil {
					return err
				}
				for _, other := range roles.Items {
					if other.Name != role.Name && s.Matches(labels.Set(other.Labels)) {
						rules = append(rules, other.Rules...)
					}
				}
			}
			role.Rules = rules
			if err := c.Update(ctx, &role); err != nil {
				return err
			}
		}
	}
	return nil
}
