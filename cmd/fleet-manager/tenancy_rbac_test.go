package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// checkTenants checks, on a hub where deploy/ is applied (its aggregated
// ClusterRoles filled in), that a tenant with every right a platform team
// grants in its own namespace cannot widen what the namespace may reach:
// it may write Propagations there, but may not create, change or delete a
// TenancyPolicy, nor label its Namespace into a label-selected policy.
// The chart grants what deploy/ does (hack/manifests compares them).
func (d *deployment) checkTenants(t *testing.T) {
	const ns, tenant, wildTenant = "tenancy-team-a", "tenant-a", "tenant-a-wildcard"
	d.createNamespace(t, ns)
	// As a platform team grants: the built-in admin ClusterRole in the
	// namespace, and every verb on the fleet's namespaced objects there.
	d.create(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-tenant"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"propagations", "envelopes"}, Verbs: []string{"*"}}},
	})
	for role, kind := range map[string]string{"admin": "ClusterRole", "fleet-tenant": "Role"} {
		d.create(t, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenant}},
		})
	}
	// A careless grant: every verb on every resource, in the namespace.
	d.create(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "everything"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	})
	d.create(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wildTenant},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: wildTenant}},
	})
	existing := &fleetv1alpha1.TenancyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenancy-team-a-dev"},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{ns}},
			Members:    fleetv1alpha1.ReachableMembers{Names: []string{"dev-eu"}},
		},
	}
	d.create(t, existing)

	for _, user := range []string{tenant, wildTenant} {
		c := d.impersonate(t, user)
		ctx := t.Context()
		// The tenant's rights are real: the hub authorizes with RBAC and
		// lets it write Propagations in its namespace.
		p := &fleetv1alpha1.Propagation{
			// Labelled with a fleet no manager runs, which none claims.
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-" + user, Labels: map[string]string{fleetv1alpha1.FleetLabel: "no-manager"}},
			Spec:       fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatalf("%s may not create a Propagation in %s, which it was granted: %v", user, ns, err)
		}
		t.Cleanup(func() { _ = d.admin.Delete(context.Background(), p) })
		if err := c.Create(ctx, &fleetv1alpha1.TenancyPolicy{ObjectMeta: metav1.ObjectMeta{Name: "by-" + user}, Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{ns}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
		}}); !apierrors.IsForbidden(err) {
			t.Errorf("%s creating a TenancyPolicy: %v, want Forbidden", user, err)
		}
		wider := existing.DeepCopy()
		wider.Spec.Members = fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}}
		if err := c.Update(ctx, wider); !apierrors.IsForbidden(err) {
			t.Errorf("%s updating TenancyPolicy %s: %v, want Forbidden", user, existing.Name, err)
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"members":{"selector":{}}}}`))
		if err := c.Patch(ctx, existing.DeepCopy(), patch); !apierrors.IsForbidden(err) {
			t.Errorf("%s patching TenancyPolicy %s: %v, want Forbidden", user, existing.Name, err)
		}
		if err := c.Delete(ctx, existing.DeepCopy()); !apierrors.IsForbidden(err) {
			t.Errorf("%s deleting TenancyPolicy %s: %v, want Forbidden", user, existing.Name, err)
		}
		if err := c.DeleteAllOf(ctx, &fleetv1alpha1.TenancyPolicy{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s deleting every TenancyPolicy: %v, want Forbidden", user, err)
		}
	}

	// Its Namespace's labels: the admin ClusterRole grants no write on
	// Namespaces, so a policy selecting namespaces by label holds.
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"prod-access"}}}`))
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := d.impersonate(t, tenant).Patch(t.Context(), namespace, label); !apierrors.IsForbidden(err) {
		t.Errorf("%s labelling its Namespace %s: %v, want Forbidden", tenant, ns, err)
	}
	// The caveat docs/tenancy.md states: RBAC checks a request on
	// Namespace X as a request in namespace X, so a Role there that grants
	// every resource also grants labelling X. Such a tenant could bring
	// its namespace under a label-selected policy, never under one that
	// names namespaces.
	if err := d.impersonate(t, wildTenant).Patch(t.Context(), namespace, label); err != nil {
		t.Errorf("%s, with every right in %s, could not label it (%v): docs/tenancy.md says it can", wildTenant, ns, err)
	}
}

// impersonate returns a hub client acting as user, an authenticated user
// of no group but system:authenticated.
func (d *deployment) impersonate(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testHub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
