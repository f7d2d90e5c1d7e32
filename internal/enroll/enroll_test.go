package enroll_test

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const saUser = "system:serviceaccount:fleet-system:fleet-manager"

// memberObjects returns every object in the member labelled as
// fleet-manager's, as "Kind namespace/name" → resourceVersion. A
// terminating namespace counts as gone.
func memberObjects(t *testing.T, member client.Client) map[string]string {
	t.Helper()
	got := map[string]string{}
	sel := client.MatchingLabels{enroll.ManagedByLabel: enroll.ManagedByValue}
	lists := map[string]client.ObjectList{
		"Namespace": &corev1.NamespaceList{}, "ServiceAccount": &corev1.ServiceAccountList{},
		"Role": &rbacv1.RoleList{}, "RoleBinding": &rbacv1.RoleBindingList{},
		"ClusterRoleBinding": &rbacv1.ClusterRoleBindingList{}, "Secret": &corev1.SecretList{},
	}
	for kind, list := range lists {
		if err := member.List(t.Context(), list, sel); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if obj.GetDeletionTimestamp() == nil {
				got[kind+" "+strings.TrimPrefix(obj.GetNamespace()+"/"+obj.GetName(), "/")] = obj.GetResourceVersion()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func register(t *testing.T, hub client.Client, o enroll.Options) *enroll.Result {
	t.Helper()
	res, err := enroll.Register(t.Context(), memberEnv.Config, hub, o)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return res
}

// hubSecret reads the registration Secret and its parsed kubeconfig, as
// the manager's default policy reads it.
func hubSecret(t *testing.T, hub client.Client, ns, name string) (*corev1.Secret, *rest.Config) {
	t.Helper()
	var s corev1.Secret
	if err := hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeconfig.Policy{}.Parse(s.Data[registry.KubeconfigKey])
	if err != nil {
		t.Fatalf("the manager's default policy refuses the registration: %v", err)
	}
	return &s, cfg
}

func TestRegisterCreatesTheDocumentedObjects(t *testing.T) {
	hub, member, ns := clients(t)
	res := register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns, Labels: map[string]string{"region": "eu"}})

	objs := memberObjects(t, member)
	want := []string{
		"Namespace fleet-system",
		"ServiceAccount fleet-system/fleet-manager",
		"Role fleet-system/fleet-manager-token",
		"RoleBinding fleet-system/fleet-manager-token",
		"ClusterRoleBinding fleet-manager:view",
	}
	if got := slices.Sorted(maps.Keys(objs)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("member objects: %v, want %v", got, want)
	}
	id := fleetID(t, hub, ns)
	for _, c := range res.Member {
		if l := c.Object.GetLabels(); c.Op != "created" || l[enroll.ClusterNameLabel] != "eu-1" || l[fleetv1alpha1.FleetIDLabel] != id {
			t.Errorf("%s %s: %s, labels %v, want the fleet's identity %s", c.Object.GetObjectKind().GroupVersionKind().Kind, c.Object.GetName(), c.Op, l, id)
		}
	}
	var role rbacv1.Role
	if err := member.Get(t.Context(), client.ObjectKey{Namespace: "fleet-system", Name: "fleet-manager-token"}, &role); err != nil {
		t.Fatal(err)
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"fleet-manager"}}}
	if !slices.EqualFunc(role.Rules, wantRules, func(a, b rbacv1.PolicyRule) bool { return a.String() == b.String() }) {
		t.Errorf("token Role rules: %v", role.Rules)
	}

	var secrets corev1.SecretList
	if err := hub.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || secrets.Items[0].Name != "eu-1" {
		t.Fatalf("hub Secrets: %v, want eu-1 alone", secrets.Items)
	}
	s, cfg := hubSecret(t, hub, ns, "eu-1")
	if s.Labels[registry.KubeconfigLabel] != "true" || s.Labels["region"] != "eu" {
		t.Errorf("Secret labels: %v", s.Labels)
	}
	raw, err := clientcmd.Load(s.Data[registry.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.AuthInfos) != 1 || len(raw.Clusters) != 1 || raw.CurrentContext != "eu-1" {
		t.Fatalf("kubeconfig: %d users, %d clusters, context %q", len(raw.AuthInfos), len(raw.Clusters), raw.CurrentContext)
	}
	for _, u := range raw.AuthInfos {
		if u.Token == "" || len(u.ClientCertificateData) > 0 || len(u.ClientKeyData) > 0 || u.Exec != nil {
			t.Errorf("the Secret's user holds more than a token: %+v", u)
		}
	}
	if !bytes.Equal(cfg.CAData, memberEnv.Config.CAData) {
		t.Error("the Secret's CA is not the member's")
	}
	if bytes.Contains(s.Data[registry.KubeconfigKey], memberEnv.Config.KeyData) {
		t.Error("the Secret holds the person's client key")
	}
	if strings.Contains(res.Secret.Object.(*corev1.Secret).StringData["kubeconfig"], cfg.BearerToken) {
		t.Error("the Result shows the token")
	}
	if until := time.Until(res.TokenExpiry); until < 23*time.Hour || until > 25*time.Hour {
		t.Errorf("token expires in %s, want about 24h", until)
	}

	// The minted token authenticates as the ServiceAccount.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(t.Context(), review); err != nil {
		t.Fatal(err)
	}
	if review.Status.UserInfo.Username != saUser {
		t.Errorf("the token authenticates as %q, want %q", review.Status.UserInfo.Username, saUser)
	}

	// Again: nothing changes in the member, the Secret is updated in place.
	res = register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns, Labels: map[string]string{"region": "eu"}})
	if again := memberObjects(t, member); !maps.Equal(again, objs) {
		t.Errorf("a second register changed the member: %v, was %v", again, objs)
	}
	for _, c := range res.Member {
		if c.Op != "unchanged" {
			t.Errorf("second register: %s %s", c.Op, c.Object.GetName())
		}
	}
	s2, cfg2 := hubSecret(t, hub, ns, "eu-1")
	if s2.UID != s.UID || cfg2.BearerToken == cfg.BearerToken {
		t.Errorf("second register: Secret UID %s (was %s), token changed %v", s2.UID, s.UID, cfg2.BearerToken != cfg.BearerToken)
	}
}

// can asks the member whether the ServiceAccount may do attrs.
func can(t *testing.T, member client.Client, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               saUser,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:fleet-system", "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	if err := member.Create(t.Context(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func TestPermissions(t *testing.T) {
	type check struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}
	tokenChecks := []check{
		{authorizationv1.ResourceAttributes{Namespace: "fleet-system", Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: "fleet-manager"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "fleet-system", Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: "default"}, false},
	}
	cases := map[string]struct {
		opts   enroll.Options
		checks []check
	}{
		"view": {
			opts: enroll.Options{Preset: "view"},
			checks: []check{
				{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "list", Resource: "pods"}, true},
				{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets"}, false},
				{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "configmaps"}, false},
			},
		},
		"edit in a": {
			opts: enroll.Options{Preset: "edit", Namespaces: []string{"a"}},
			checks: []check{
				{authorizationv1.ResourceAttributes{Namespace: "a", Verb: "create", Resource: "configmaps"}, true},
				{authorizationv1.ResourceAttributes{Namespace: "b", Verb: "create", Resource: "configmaps"}, false},
				{authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps"}, false},
				{authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub, member, ns := clients(t)
			for _, n := range []string{"a", "b"} {
				if err := member.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); client.IgnoreAlreadyExists(err) != nil {
					t.Fatal(err)
				}
			}
			tc.opts.Name, tc.opts.HubNamespace = "eu-1", ns
			register(t, hub, tc.opts)
			for _, c := range append(tc.checks, tokenChecks...) {
				if got := can(t, member, c.attrs); got != c.want {
					t.Errorf("%s %s/%s in %q named %q: allowed %v, want %v", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Namespace, c.attrs.Name, got, c.want)
				}
			}
		})
	}
}

func TestChangedPresetRemovesTheOldBinding(t *testing.T) {
	hub, member, ns := clients(t)
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "edit", HubNamespace: ns})
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns})
	objs := memberObjects(t, member)
	if _, ok := objs["ClusterRoleBinding fleet-manager:edit"]; ok {
		t.Error("the edit binding is still there after register with view")
	}
	if _, ok := objs["ClusterRoleBinding fleet-manager:view"]; !ok {
		t.Error("no view binding")
	}
}

func TestDryRunCreatesNothing(t *testing.T) {
	hub, member, ns := clients(t)
	for _, mode := range []enroll.DryRun{enroll.DryRunClient, enroll.DryRunServer} {
		t.Run(string(mode), func(t *testing.T) {
			res := register(t, hub, enroll.Options{Name: "eu-1", Preset: "edit", Namespaces: []string{"default"}, HubNamespace: ns, DryRun: mode})
			if objs := memberObjects(t, member); len(objs) > 0 {
				t.Errorf("the member has %v", objs)
			}
			var secrets corev1.SecretList
			if err := hub.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(secrets.Items) > 0 {
				t.Errorf("the hub has Secret %s", secrets.Items[0].Name)
			}
			if id, err := enroll.ReadFleetID(t.Context(), hub, ns); id != "" || err != nil {
				t.Errorf("the dry run gave the fleet an identity: %q, %v", id, err)
			}
			var out bytes.Buffer
			if err := enroll.WriteYAML(&out, res.Objects()); err != nil {
				t.Fatal(err)
			}
			docs := strings.Split(out.String(), "---\n")
			if len(docs) != 6 || !strings.Contains(docs[0], "kind: Namespace") || !strings.Contains(docs[4], "kind: RoleBinding") ||
				!strings.Contains(docs[5], "kind: Secret") || !strings.Contains(docs[5], "token: <redacted>") {
				t.Errorf("dry run YAML:\n%s", out.String())
			}
		})
	}

	// A client dry run sends nothing, so it works with no member at all.
	gone := rest.CopyConfig(memberEnv.Config)
	gone.Host = "https://127.0.0.1:1"
	if _, err := enroll.Register(t.Context(), gone, nil, enroll.Options{Name: "eu-1", Preset: "view", DryRun: enroll.DryRunClient}); err != nil {
		t.Errorf("client dry run with an unreachable member: %v", err)
	}
}

func TestUnregister(t *testing.T) {
	hub, member, ns := clients(t)
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns})
	before := memberObjects(t, member)
	registration, err := enroll.Unregister(t.Context(), hub, ns, "eu-1")
	if err != nil {
		t.Fatal(err)
	}
	if after := memberObjects(t, member); !maps.Equal(before, after) {
		t.Errorf("unregister without cleanup changed the member: %v, was %v", after, before)
	}
	if _, err := enroll.Unregister(t.Context(), hub, ns, "eu-1"); !errors.Is(err, enroll.ErrNotRegistered) {
		t.Errorf("second unregister: %v, want ErrNotRegistered", err)
	}
	// An unlabelled object of the same name, and another cluster's, stay.
	stranger := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-manager:stranger", Labels: map[string]string{enroll.ManagedByLabel: enroll.ManagedByValue, enroll.ClusterNameLabel: "other"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "default"}},
	}
	if err := member.Create(t.Context(), stranger); err != nil {
		t.Fatal(err)
	}
	if _, err := enroll.Cleanup(t.Context(), memberEnv.Config, "eu-1", fleetID(t, hub, ns), registration); err != nil {
		t.Fatal(err)
	}
	if left := memberObjects(t, member); len(left) != 1 || left["ClusterRoleBinding fleet-manager:stranger"] == "" {
		t.Errorf("after cleanup the member has %v, want only the other cluster's binding", left)
	}
}

func TestCleanupKeepsAPreexistingNamespace(t *testing.T) {
	hub, member, ns := clients(t)
	if err := member.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-system"}}); err != nil {
		t.Fatal(err)
	}
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns})
	var fs corev1.Namespace
	if err := member.Get(t.Context(), client.ObjectKey{Name: "fleet-system"}, &fs); err != nil {
		t.Fatal(err)
	}
	if len(fs.Labels[enroll.ManagedByLabel]) > 0 {
		t.Errorf("register labelled a namespace it did not create: %v", fs.Labels)
	}
	if _, err := enroll.Cleanup(t.Context(), memberEnv.Config, "eu-1", fleetID(t, hub, ns), nil); err != nil {
		t.Fatal(err)
	}
	if left := memberObjects(t, member); len(left) > 0 {
		t.Errorf("after cleanup: %v", left)
	}
	if err := member.Get(t.Context(), client.ObjectKey{Name: "fleet-system"}, &fs); err != nil || fs.DeletionTimestamp != nil {
		t.Errorf("the pre-existing fleet-system namespace: %v, deleting %v", err, fs.DeletionTimestamp)
	}
}

func TestRegisterRefuses(t *testing.T) {
	hub, member, ns := clients(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, StringData: map[string]string{"x": "y"}}
	if err := hub.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	insecure := rest.CopyConfig(memberEnv.Config)
	insecure.CAData, insecure.Insecure = nil, true
	unreachable := rest.CopyConfig(memberEnv.Config)
	unreachable.Host = "https://127.0.0.1:1"
	limited := limitedUser(t, member)
	cases := map[string]struct {
		cfg  *rest.Config
		opts enroll.Options
		want string
		as   any
	}{
		"not a registration":  {opts: enroll.Options{Name: "taken", Preset: "view"}, want: "is not a registration"},
		"no permissions":      {opts: enroll.Options{Name: "eu-1"}, want: "name the permissions"},
		"both":                {opts: enroll.Options{Name: "eu-1", Preset: "view", ClusterRole: "x"}, want: "exclude each other"},
		"bad name":            {opts: enroll.Options{Name: "Bad_Name", Preset: "view"}, want: "DNS-1123"},
		"short ttl":           {opts: enroll.Options{Name: "eu-1", Preset: "view", TokenTTL: time.Minute}, want: "minimum"},
		"long ttl":            {opts: enroll.Options{Name: "eu-1", Preset: "view", TokenTTL: 25 * time.Hour}, want: "longer than the maximum, 24h"},
		"missing ClusterRole": {opts: enroll.Options{Name: "eu-1", ClusterRole: "nope"}, want: `no ClusterRole "nope"`},
		"missing namespace":   {opts: enroll.Options{Name: "eu-1", Preset: "edit", Namespaces: []string{"nope"}}, want: `no namespace "nope"`},
		"insecure":            {cfg: insecure, opts: enroll.Options{Name: "eu-1", Preset: "view"}, want: "insecure-skip-tls-verify"},
		"unreachable":         {cfg: unreachable, opts: enroll.Options{Name: "eu-1", Preset: "view"}, as: new(*enroll.UnreachableError)},
		"no RBAC rights":      {cfg: limited, opts: enroll.Options{Name: "eu-1", Preset: "view"}, want: "may not create ClusterRoleBindings", as: new(*enroll.ForbiddenError)},
		"bad label":           {opts: enroll.Options{Name: "eu-1", Preset: "view", Labels: map[string]string{"a b": "c"}}, want: "label key"},
		"no fleet namespace":  {opts: enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: "no-such-fleet"}, want: "the hub has no namespace no-such-fleet"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = memberEnv.Config
			}
			if tc.opts.HubNamespace == "" {
				tc.opts.HubNamespace = ns
			}
			_, err := enroll.Register(t.Context(), cfg, hub, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.as != nil && !errors.As(err, tc.as)) {
				t.Fatalf("Register: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if s := (corev1.Secret{}); hub.Get(t.Context(), client.ObjectKeyFromObject(foreign), &s) != nil || string(s.Data["x"]) != "y" {
		t.Error("the foreign Secret was changed")
	}
}

// limitedUser returns the config of a member user who may write the
// namespaced objects but no ClusterRoleBinding.
func limitedUser(t *testing.T, member client.Client) *rest.Config {
	t.Helper()
	const name = "namespace-admin"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "serviceaccounts"}, Verbs: []string{"get", "list", "create"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"*"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get", "list"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := member.Create(t.Context(), obj); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	user, err := memberEnv.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return user.Config()
}
