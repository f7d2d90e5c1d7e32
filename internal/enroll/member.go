package enroll

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// memberWriter writes the objects of cluster name into a member.
type memberWriter struct {
	c      client.Client
	name   string
	server string // for errors
	dryRun bool   // server-side
	// newNamespace: fleet-system does not exist yet. In a dry run, the
	// objects inside it are then not sent: the API server would refuse
	// them for want of the namespace.
	newNamespace bool
}

// check reads what Register needs in the member before writing anything:
// that it answers, that fleet-system is usable, and that the ClusterRole
// and namespaces o names exist.
func (m *memberWriter) check(ctx context.Context, o Options) error {
	var ns corev1.Namespace
	err := m.c.Get(ctx, client.ObjectKey{Name: MemberNamespace}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		m.newNamespace = true
	case err != nil:
		return m.readError(err, "get", "Namespaces")
	case ns.DeletionTimestamp != nil:
		return fmt.Errorf("namespace %s is being deleted in the member: wait until it is gone", MemberNamespace)
	}
	role := o.Preset
	if role == "" {
		role = o.ClusterRole
	}
	if err := m.c.Get(ctx, client.ObjectKey{Name: role}, &rbacv1.ClusterRole{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("the member has no ClusterRole %q", role)
		}
		return m.readError(err, "get", "ClusterRoles")
	}
	for _, name := range o.Namespaces {
		if err := m.c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("the member has no namespace %q: register creates none but %s", name, MemberNamespace)
			}
			return m.readError(err, "get", "Namespaces")
		}
	}
	return nil
}

// readError makes err, from a read of resource, say what to do.
func (m *memberWriter) readError(err error, verb, resource string) error {
	if apierrors.IsForbidden(err) {
		return &ForbiddenError{Verb: verb, Resource: resource, Err: err}
	}
	if _, ok := err.(apierrors.APIStatus); !ok && !meta.IsNoMatchError(err) && !errors.Is(err, context.Canceled) {
		return &UnreachableError{Server: m.server, Err: err}
	}
	return fmt.Errorf("member: %w", err)
}

// apply creates or updates each of want, in order, and returns what it
// did. An object equal to its wanted state is not written.
func (m *memberWriter) apply(ctx context.Context, want []client.Object) ([]Change, error) {
	var changes []Change
	for _, obj := range want {
		op, err := m.applyOne(ctx, obj)
		if err != nil {
			return changes, err
		}
		if err := setKind(obj); err != nil {
			return changes, err
		}
		changes = append(changes, Change{Object: obj, Op: op})
	}
	return changes, nil
}

func (m *memberWriter) applyOne(ctx context.Context, want client.Object) (string, error) {
	kind := kindOf(want)
	if m.dryRun && m.newNamespace && want.GetNamespace() == MemberNamespace {
		return "created", nil
	}
	cur := reflect.New(reflect.TypeOf(want).Elem()).Interface().(client.Object)
	err := m.c.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err := m.c.Create(ctx, want.DeepCopyObject().(client.Object), m.createOpts()...); err != nil {
			return "", m.writeError(err, "create", kind)
		}
		return "created", nil
	}
	if err != nil {
		return "", m.readError(err, "get", kind+"s")
	}
	if _, ok := want.(*corev1.Namespace); ok {
		return "unchanged", nil // never labelled if someone else made it
	}
	if err := m.owned(cur); err != nil {
		return "", err
	}
	if equal(cur, want) {
		return "unchanged", nil
	}
	if roleRef(cur) != roleRef(want) {
		// A binding's roleRef cannot change: replace the binding.
		if err := m.c.Delete(ctx, cur, m.deleteOpts(cur)...); err != nil && !apierrors.IsNotFound(err) {
			return "", m.writeError(err, "delete", kind)
		}
		if err := m.c.Create(ctx, want.DeepCopyObject().(client.Object), m.createOpts()...); err != nil {
			return "", m.writeError(err, "create", kind)
		}
		return "configured", nil
	}
	copyContent(cur, want)
	if err := m.c.Update(ctx, cur, m.updateOpts()...); err != nil {
		return "", m.writeError(err, "update", kind)
	}
	return "configured", nil
}

// owned refuses an object that this cluster's register did not create.
func (m *memberWriter) owned(obj client.Object) error {
	l := obj.GetLabels()
	what := Describe(obj)
	if l[ManagedByLabel] != ManagedByValue {
		return fmt.Errorf("%s exists in the member and was not created by fleet-manager register: remove it, or register another member", what)
	}
	if name := l[ClusterNameLabel]; name != m.name {
		return fmt.Errorf("%s belongs to cluster %q: the member is registered under that name already; unregister it first, or use that name", what, name)
	}
	return nil
}

// prune deletes the bindings of this cluster that want no longer holds,
// such as a changed preset's. Without the rights to list bindings it
// returns a warning instead.
func (m *memberWriter) prune(ctx context.Context, want []client.Object) ([]Change, string, error) {
	wanted := map[string]bool{}
	for _, obj := range want {
		wanted[Describe(obj)] = true
	}
	var changes []Change
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}} {
		objs, err := m.list(ctx, list)
		if apierrors.IsForbidden(err) {
			return changes, "could not look for bindings of an earlier register to remove: " + err.Error(), nil
		}
		if err != nil {
			return changes, "", err
		}
		for _, obj := range objs {
			if wanted[Describe(obj)] {
				continue
			}
			if err := m.c.Delete(ctx, obj, m.deleteOpts(obj)...); err != nil && !apierrors.IsNotFound(err) {
				return changes, "", m.writeError(err, "delete", kindOf(obj)+"s")
			}
			changes = append(changes, Change{Object: obj, Op: "deleted"})
		}
	}
	return changes, "", nil
}

// list returns the objects of list's kind that carry both labels of this
// cluster, apiVersion and kind set.
func (m *memberWriter) list(ctx context.Context, list client.ObjectList) ([]client.Object, error) {
	if err := m.c.List(ctx, list, client.MatchingLabels(labels(m.name))); err != nil {
		return nil, err
	}
	var objs []client.Object
	err := meta.EachListItem(list, func(o runtime.Object) error {
		obj := o.(client.Object)
		l := obj.GetLabels()
		if l[ManagedByLabel] != ManagedByValue || l[ClusterNameLabel] != m.name {
			return nil // the selector said so already; never trust it alone
		}
		if err := setKind(obj); err != nil {
			return err
		}
		objs = append(objs, obj)
		return nil
	})
	return objs, err
}

// writeError makes err, from a write of kind, say what to do.
func (m *memberWriter) writeError(err error, verb, kind string) error {
	if apierrors.IsForbidden(err) {
		return &ForbiddenError{Verb: verb, Resource: kind + "s", Err: err}
	}
	return m.readError(err, verb, kind+"s")
}

func (m *memberWriter) createOpts() []client.CreateOption {
	if m.dryRun {
		return []client.CreateOption{client.DryRunAll}
	}
	return nil
}

func (m *memberWriter) updateOpts() []client.UpdateOption {
	if m.dryRun {
		return []client.UpdateOption{client.DryRunAll}
	}
	return nil
}

// deleteOpts delete obj only if it is still the object read.
func (m *memberWriter) deleteOpts(obj client.Object) []client.DeleteOption {
	opts := []client.DeleteOption{client.Preconditions{UID: ptr.To(obj.GetUID())}}
	if m.dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return opts
}

// Cleanup deletes, in the member that cfg reaches, every object Register
// created for cluster name: the objects that carry both labels with that
// name, and no other. It returns what it deleted.
func Cleanup(ctx context.Context, cfg *rest.Config, name string) ([]Change, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the member's server: %w", err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	m := &memberWriter{c: c, name: name, server: u.String()}
	var changes []Change
	// Bindings first, so the identity loses its rights before it is gone;
	// the namespace last.
	lists := []client.ObjectList{
		&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}, &rbacv1.RoleList{},
		&corev1.ServiceAccountList{}, &corev1.NamespaceList{},
	}
	for _, list := range lists {
		objs, err := m.list(ctx, list)
		if err != nil {
			return changes, m.readError(err, "list", kindOf(list)+"s")
		}
		for _, obj := range objs {
			if obj.GetDeletionTimestamp() != nil {
				continue
			}
			if err := c.Delete(ctx, obj, m.deleteOpts(obj)...); err != nil && !apierrors.IsNotFound(err) {
				return changes, m.writeError(err, "delete", kindOf(obj))
			}
			changes = append(changes, Change{Object: obj, Op: "deleted"})
		}
	}
	return changes, nil
}

// equal reports whether cur holds want's labels and content.
func equal(cur, want client.Object) bool {
	for k, v := range want.GetLabels() {
		if cur.GetLabels()[k] != v {
			return false
		}
	}
	switch w := want.(type) {
	case *rbacv1.Role:
		return equality.Semantic.DeepEqual(cur.(*rbacv1.Role).Rules, w.Rules)
	case *rbacv1.RoleBinding:
		return equality.Semantic.DeepEqual(cur.(*rbacv1.RoleBinding).Subjects, w.Subjects)
	case *rbacv1.ClusterRoleBinding:
		return equality.Semantic.DeepEqual(cur.(*rbacv1.ClusterRoleBinding).Subjects, w.Subjects)
	}
	return true
}

// roleRef is a binding's roleRef, or nothing for other objects.
func roleRef(obj client.Object) rbacv1.RoleRef {
	switch b := obj.(type) {
	case *rbacv1.RoleBinding:
		return b.RoleRef
	case *rbacv1.ClusterRoleBinding:
		return b.RoleRef
	}
	return rbacv1.RoleRef{}
}

// copyContent sets want's labels and content on cur.
func copyContent(cur, want client.Object) {
	l := cur.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range want.GetLabels() {
		l[k] = v
	}
	cur.SetLabels(l)
	switch w := want.(type) {
	case *rbacv1.Role:
		cur.(*rbacv1.Role).Rules = w.Rules
	case *rbacv1.RoleBinding:
		cur.(*rbacv1.RoleBinding).Subjects = w.Subjects
	case *rbacv1.ClusterRoleBinding:
		cur.(*rbacv1.ClusterRoleBinding).Subjects = w.Subjects
	}
}

// setKind sets obj's apiVersion and kind, which typed reads leave empty.
func setKind(obj runtime.Object) error {
	gvk, err := apiutil.GVKForObject(obj, Scheme)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// kindOf is obj's kind, "RoleBinding" for a RoleBindingList.
func kindOf(obj runtime.Object) string {
	gvk, err := apiutil.GVKForObject(obj, Scheme)
	if err != nil {
		return reflect.TypeOf(obj).Elem().Name()
	}
	kind, _ := strings.CutSuffix(gvk.Kind, "List")
	return kind
}

// Describe names obj for people: its kind, then namespace/name, or name.
func Describe(obj client.Object) string {
	if obj.GetNamespace() == "" {
		return kindOf(obj) + " " + obj.GetName()
	}
	return kindOf(obj) + " " + obj.GetNamespace() + "/" + obj.GetName()
}
