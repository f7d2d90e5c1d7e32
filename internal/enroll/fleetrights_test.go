package enroll_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// propagate creates, in hub namespace ns, a Propagation of the kinds
// given as apiVersion/kind pairs.
func propagate(t *testing.T, hub client.Client, ns, name string, kinds ...string) *fleetv1alpha1.Propagation {
	t.Helper()
	if err := hub.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := 0; i < len(kinds); i += 2 {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: kinds[i], Kind: kinds[i+1], Name: "x"})
	}
	if err := hub.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Delete(context.Background(), p) })
	return p
}

// memberNamespaces creates the member namespaces names.
func memberNamespaces(t *testing.T, member client.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := member.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
}

type access struct {
	attrs authorizationv1.ResourceAttributes
	want  bool
}

func ra(verb, resource, namespace string) authorizationv1.ResourceAttributes {
	res, sub, _ := strings.Cut(resource, "/")
	res, group, _ := strings.Cut(res, ".")
	if g, ok := map[string]string{"deployments": "apps"}[res]; ok && group == "" {
		group = g
	}
	return authorizationv1.ResourceAttributes{Verb: verb, Resource: res, Subresource: sub, Group: group, Namespace: namespace}
}

// denied are what no preset but cluster-admin may do: credentials of
// others, impersonation, granting rights.
var denied = []access{
	{ra("create", "serviceaccounts/token", "kube-system"), false},
	{ra("create", "serviceaccounts/token", "a"), false},
	{ra("impersonate", "serviceaccounts", "kube-system"), false},
	{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"}, false},
	{ra("get", "secrets", "kube-system"), false},
	{ra("list", "secrets", ""), false},
	{authorizationv1.ResourceAttributes{Verb: "escalate", Group: rbacv1.GroupName, Resource: "clusterroles"}, false},
	{authorizationv1.ResourceAttributes{Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles"}, false},
	{authorizationv1.ResourceAttributes{Verb: "create", Group: rbacv1.GroupName, Resource: "rolebindings", Namespace: "a"}, false},
}

func TestPresetsAccess(t *testing.T) {
	cases := map[string]struct {
		opts   enroll.Options
		checks []access
	}{
		"fleet": {
			opts: enroll.Options{Preset: enroll.FleetPreset},
			checks: []access{
				{ra("create", "namespaces", ""), true},
				{ra("get", "namespaces", ""), true},
				{ra("delete", "namespaces", ""), false},
				{ra("patch", "configmaps", "a"), true},
				{ra("watch", "configmaps", ""), true},
				{ra("create", "deployments", "a"), true},
				{ra("create", "pods", "a"), false},
				{ra("get", "secrets", "a"), false}, // credentials: only with --namespaces
			},
		},
		"fleet in a": {
			opts: enroll.Options{Preset: enroll.FleetPreset, Namespaces: []string{"a"}},
			checks: []access{
				{ra("patch", "configmaps", "a"), true},
				{ra("delete", "secrets", "a"), true},
				{ra("get", "secrets", "a"), true},
				{ra("patch", "configmaps", "b"), false},
				{ra("get", "secrets", "b"), false},
				{ra("list", "configmaps", ""), false},
				{authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces", Name: "a"}, true},
				{authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces", Name: "b"}, false},
				{authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces", Name: "kube-system"}, true}, // the cluster's identity
				{ra("create", "namespaces", ""), false},
			},
		},
		"view": {
			opts: enroll.Options{Preset: "view"},
			checks: []access{
				{ra("list", "configmaps", "a"), true},
				{ra("patch", "configmaps", "a"), false},
			},
		},
		"edit in a": {
			opts:   enroll.Options{Preset: "edit", Namespaces: []string{"a"}},
			checks: []access{{ra("patch", "configmaps", "a"), true}, {ra("patch", "configmaps", "b"), false}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub, member, ns := clients(t)
			memberNamespaces(t, member, "a", "b")
			propagate(t, hub, "a", "app", "v1", "ConfigMap", "v1", "Secret", "apps/v1", "Deployment")
			tc.opts.Name, tc.opts.HubNamespace = "eu-1", ns
			register(t, hub, tc.opts)
			checks := tc.checks
			for _, c := range denied {
				// edit in a may impersonate a's ServiceAccounts and read its Secrets
				if tc.opts.Preset != "edit" || c.attrs.Namespace != "a" {
					checks = append(checks, c)
				}
			}
			for _, c := range checks {
				if got := can(t, member, c.attrs); got != c.want {
					t.Errorf("%s %s/%s (group %q) in %q named %q: allowed %v, want %v", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Group, c.attrs.Namespace, c.attrs.Name, got, c.want)
				}
			}
		})
	}
}

// TestEditWithoutNamespacesIsClusterAdminInDisguise shows why register
// warns about it.
func TestEditWithoutNamespacesIsClusterAdminInDisguise(t *testing.T) {
	hub, member, ns := clients(t)
	res := register(t, hub, enroll.Options{Name: "eu-1", Preset: "edit", HubNamespace: ns})
	for _, c := range []authorizationv1.ResourceAttributes{
		ra("create", "serviceaccounts/token", "kube-system"), ra("impersonate", "serviceaccounts", "kube-system"), ra("get", "secrets", "kube-system"),
	} {
		if !can(t, member, c) {
			t.Errorf("edit may not %s %s/%s in %s", c.Verb, c.Resource, c.Subresource, c.Namespace)
		}
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "cluster-admin in disguise") }) {
		t.Errorf("no warning that edit is cluster-admin in disguise: %q", res.Warnings)
	}
}

func TestFleetPresetFollowsThePropagations(t *testing.T) {
	hub, member, ns := clients(t)
	memberNamespaces(t, member, "a")
	o := enroll.Options{Name: "eu-1", Preset: enroll.FleetPreset, HubNamespace: ns}
	res := register(t, hub, o)
	if res.Rights.Propagations != 0 || len(res.Rights.Cluster) != 2 || !strings.Contains(res.Rights.Notes()[0], "run fleet-manager grants sync") {
		t.Errorf("with no Propagation: %+v, notes %q", res.Rights, res.Rights.Notes())
	}
	if can(t, member, ra("patch", "configmaps", "a")) {
		t.Error("with no Propagation, ConfigMaps may be patched")
	}
	p := propagate(t, hub, "a", "app", "v1", "ConfigMap", "v1", "Node", "rbac.authorization.k8s.io/v1", "Role", "example.com/v1", "Widget")
	p.Status.Kinds = []fleetv1alpha1.KindReference{{APIVersion: "apps/v1", Kind: "Deployment"}}
	if err := hub.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	res = register(t, hub, o)
	if !can(t, member, ra("patch", "configmaps", "a")) || !can(t, member, ra("delete", "deployments", "a")) {
		t.Error("register again did not grant what the Propagation copies")
	}
	for _, kind := range []string{"Node", "Role", "Widget"} {
		if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.HasPrefix(w, kind+" ") }) {
			t.Errorf("no warning that %s is left out: %q", kind, res.Warnings)
		}
	}
	if can(t, member, ra("create", "nodes", "")) || can(t, member, ra("create", "roles.rbac.authorization.k8s.io", "a")) {
		t.Error("a cluster-scoped or RBAC kind was granted")
	}
	var cr rbacv1.ClusterRole
	if err := member.Get(t.Context(), client.ObjectKey{Name: enroll.FleetRoleName}, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Labels[fleetv1alpha1.FleetIDLabel] != fleetID(t, hub, ns) {
		t.Errorf("ClusterRole labels %v", cr.Labels)
	}
}

func TestAnotherPresetRemovesTheFleetRoles(t *testing.T) {
	hub, member, ns := clients(t)
	memberNamespaces(t, member, "a")
	o := enroll.Options{Name: "eu-1", Preset: enroll.FleetPreset, HubNamespace: ns, Namespaces: []string{"a"}}
	register(t, hub, o)
	roleInA := client.ObjectKey{Namespace: "a", Name: enroll.FleetRoleName}
	if err := member.Get(t.Context(), roleInA, &rbacv1.Role{}); err != nil {
		t.Fatal(err)
	}
	o.Namespaces = nil
	register(t, hub, o)
	if err := member.Get(t.Context(), roleInA, &rbacv1.Role{}); err == nil {
		t.Error("the Role of namespace a is still there after register without --namespaces")
	}
	o.Preset = "view"
	register(t, hub, o)
	if err := member.Get(t.Context(), client.ObjectKey{Name: enroll.FleetRoleName}, &rbacv1.ClusterRole{}); err == nil {
		t.Error("the fleet ClusterRole is still there after register with view")
	}
}

func TestFleetPresetNamesThePropagationsOutsideItsNamespaces(t *testing.T) {
	hub, member, ns := clients(t)
	memberNamespaces(t, member, "a")
	propagate(t, hub, "b", "elsewhere", "v1", "ConfigMap")
	res := register(t, hub, enroll.Options{Name: "eu-1", Preset: enroll.FleetPreset, HubNamespace: ns, Namespaces: []string{"a"}})
	if res.Rights.Propagations != 0 || !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.HasSuffix(w, "will fail Forbidden in this member: b/elsewhere") }) {
		t.Errorf("Propagations %d, warnings %q", res.Rights.Propagations, res.Warnings)
	}
}
