package enroll

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// memberWriter writes the objects of cluster name, in the fleet of
// identity id, into a member.
type memberWriter struct {
	c      client.Client
	name   string
	id     string
	server string // for errors
	dryRun bool   // server-side
	// hubSecret names the hub's registration Secret, for errors.
	hubSecret string
	// proven: the hub Secret of the name points at this member's server,
	// so objects of an earlier register without a fleet identity are this
	// fleet's too.
	proven bool
	// newNamespace: fleet-system does not exist yet. In a dry run, the
	// objects inside it are then not sent: the API server would refuse
	// them for want of the namespace.
	newNamespace bool
	// warnings say what was left alone.
	warnings []string
}

// owner is whose a member object is, as its labels say.
type owner int

const (
	// notFleetManagers: no register made it.
	notFleetManagers owner = iota
	// otherFleet: made for another fleet, or another cluster name.
	otherFleet
	// unproven: an earlier register's, without a fleet identity, and
	// nothing proves it was this fleet's.
	unproven
	// ours: this cluster's in this fleet, or an earlier register's and
	// proven.
	ours
)

// ownerOf says whose obj is.
func (m *memberWriter) ownerOf(obj client.Object) owner {
	l := obj.GetLabels()
	id := l[fleetv1alpha1.FleetIDLabel]
	switch {
	case l[ManagedByLabel] != ManagedByValue:
		return notFleetManagers
	case l[ClusterNameLabel] != m.name || (id != "" && id != m.id):
		return otherFleet
	case id == "" && !m.proven:
		return unproven
	}
	return ours
}

// check reads what Register needs in the member before writing anything:
// that it answers, that fleet-system is usable, that the ClusterRole and
// namespaces o names exist, and that no object of want's names belongs to
// anyone else.
func (m *memberWriter) check(ctx context.Context, o Options, want []client.Object) error {
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
	if err := m.c.Get(ctx, client.ObjectKey{Name: role}, &rbacv1.ClusterRole{}); err != nil && role != FleetPreset {
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
	for _, obj := range want {
		if _, ok := obj.(*corev1.Namespace); ok {
			continue // used as it is when it is not ours
		}
		cur := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
		err := m.c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return m.readError(err, "get", kindOf(obj)+"s")
		}
		if err := setKind(cur); err != nil {
			return err
		}
		if err := m.owned(cur); err != nil {
			return err
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
		return m.adoptNamespace(ctx, cur, want)
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

// adoptNamespace returns what becomes of an existing fleet-system: it is
// used as it is, and stamped with the fleet's identity only when an
// earlier register of this fleet made it. Anyone else's is never
// labelled, so never deleted.
func (m *memberWriter) adoptNamespace(ctx context.Context, cur, want client.Object) (string, error) {
	switch m.ownerOf(cur) {
	case ours:
		if equal(cur, want) {
			return "unchanged", nil
		}
		copyContent(cur, want)
		if err := m.c.Update(ctx, cur, m.updateOpts()...); err != nil {
			return "", m.writeError(err, "update", "Namespace")
		}
		return "configured", nil
	case unproven:
		m.warnings = append(m.warnings, fmt.Sprintf("%s was made by an earlier register for %q, without a fleet identity, and the hub Secret %s does not point at this member: it is used as it is, and unregister --cleanup will keep it",
			Describe(cur), m.name, m.hubSecret))
	}
	return "unchanged", nil
}

// owned refuses an object that this cluster's register in this fleet did
// not create.
func (m *memberWriter) owned(obj client.Object) error {
	l := obj.GetLabels()
	what := Describe(obj)
	switch m.ownerOf(obj) {
	case notFleetManagers:
		return fmt.Errorf("%s exists in the member and was not created by fleet-manager register: remove it, or register another member", what)
	case otherFleet:
		if name := l[ClusterNameLabel]; name != m.name {
			return fmt.Errorf("%s belongs to cluster %q: the member is registered under that name already; unregister it first, or use that name", what, name)
		}
		return fmt.Errorf("%s belongs to another fleet (%s=%s): the member is registered with that fleet; unregister it there with --cleanup first",
			what, fleetv1alpha1.FleetIDLabel, l[fleetv1alpha1.FleetIDLabel])
	case unproven:
		return fmt.Errorf("%s was made by an earlier fleet-manager register, without a fleet identity, and the hub Secret %s does not point at this member's server, so this fleet cannot prove it is its own: run register from the hub that registered the member, or unregister it there with --cleanup",
			what, m.hubSecret)
	}
	return nil
}

// prune deletes the bindings and roles of this cluster that want no
// longer holds, such as a changed preset's. Without the rights to list
// them it returns a warning instead.
func (m *memberWriter) prune(ctx context.Context, want []client.Object) ([]Change, string, error) {
	wanted := map[string]bool{}
	for _, obj := range want {
		wanted[Describe(obj)] = true
	}
	var changes []Change
	lists := []client.ObjectList{&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleList{}, &rbacv1.RoleList{}}
	for _, list := range lists {
		objs, _, err := m.list(ctx, list)
		if apierrors.IsForbidden(err) {
			return changes, "could not look for bindings and roles of an earlier register to remove: " + err.Error(), nil
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

// list returns the objects of list's kind labelled for this cluster's
// name: those that are ours, and the others, apiVersion and kind set.
func (m *memberWriter) list(ctx context.Context, list client.ObjectList) (mine, others []client.Object, err error) {
	if err := m.c.List(ctx, list, client.MatchingLabels{ManagedByLabel: ManagedByValue, ClusterNameLabel: m.name}); err != nil {
		return nil, nil, err
	}
	err = meta.EachListItem(list, func(o runtime.Object) error {
		obj := o.(client.Object)
		if err := setKind(obj); err != nil {
			return err
		}
		switch m.ownerOf(obj) { // the selector said so already; never trust it alone
		case ours:
			mine = append(mine, obj)
		case otherFleet, unproven:
			others = append(others, obj)
		}
		return nil
	})
	return mine, others, err
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

// Cleanup deletes, in the member that cfg reaches, what Register created
// for cluster name in the fleet of identity fleetID: the objects that
// carry the three labels with those values, and no other. registration is
// the hub's registration Secret of the name as it was, nil if there was
// none: when it points at the member's server, an earlier register's
// objects for the name without a fleet identity are deleted too.
//
// Namespace fleet-system goes last, and only if it is ours and holds
// nothing else than what the API server adds to every namespace. What
// Cleanup leaves that is labelled for the name it returns as kept, with
// the reason.
func Cleanup(ctx context.Context, cfg *rest.Config, name, fleetID string, registration *corev1.Secret) ([]Change, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the member's server: %w", err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	m := &memberWriter{c: c, name: name, id: fleetID, server: u.String()}
	m.proven = registration != nil && registeredServer(registration) == displayServer(u.String())
	if registration != nil {
		m.hubSecret = registration.Namespace + "/" + registration.Name
	}
	var changes []Change
	// Bindings first, so the identity loses its rights before it is gone;
	// the namespace last.
	lists := []client.ObjectList{
		&rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleList{}, &rbacv1.RoleList{},
		&corev1.ServiceAccountList{}, &corev1.NamespaceList{},
	}
	var namespace client.Object
	for _, list := range lists {
		mine, others, err := m.list(ctx, list)
		if err != nil {
			return changes, m.readError(err, "list", kindOf(list)+"s")
		}
		for _, obj := range others {
			changes = append(changes, Change{Object: obj, Op: "kept", Reason: m.notOurs(obj)})
		}
		for _, obj := range mine {
			if obj.GetDeletionTimestamp() != nil {
				continue
			}
			if _, ok := obj.(*corev1.Namespace); ok {
				namespace = obj
				continue
			}
			if err := c.Delete(ctx, obj, m.deleteOpts(obj)...); err != nil && !apierrors.IsNotFound(err) {
				return changes, m.writeError(err, "delete", kindOf(obj))
			}
			changes = append(changes, Change{Object: obj, Op: "deleted"})
		}
	}
	if namespace == nil {
		return changes, nil
	}
	held, err := m.held(ctx, cfg, namespace.GetName())
	if err != nil {
		return changes, err
	}
	if held != "" {
		return append(changes, Change{Object: namespace, Op: "kept", Reason: held}), nil
	}
	if err := c.Delete(ctx, namespace, m.deleteOpts(namespace)...); err != nil && !apierrors.IsNotFound(err) {
		return changes, m.writeError(err, "delete", "Namespace")
	}
	return append(changes, Change{Object: namespace, Op: "deleted"}), nil
}

// notOurs says why Cleanup keeps obj, labelled for the cluster's name.
func (m *memberWriter) notOurs(obj client.Object) string {
	if m.ownerOf(obj) == unproven {
		if m.hubSecret == "" {
			return "an earlier register made it, without a fleet identity, and this hub had no registration Secret to prove it was this fleet's"
		}
		return fmt.Sprintf("an earlier register made it, without a fleet identity, and the hub Secret %s did not point at this member's server to prove it was this fleet's", m.hubSecret)
	}
	return fmt.Sprintf("it belongs to another fleet (%s=%s)", fleetv1alpha1.FleetIDLabel, obj.GetLabels()[fleetv1alpha1.FleetIDLabel])
}

// held says why namespace cannot go: it names an object in it that is
// neither terminating nor added by the API server to every namespace
// (ServiceAccount default, ConfigMap kube-root-ca.crt, the token Secrets
// of those ServiceAccounts), or a kind it could not look at. Events do
// not count. It returns "" when the namespace holds nothing else.
func (m *memberWriter) held(ctx context.Context, cfg *rest.Config, namespace string) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("member discovery: %w", err)
	}
	resources, err := dc.ServerPreferredNamespacedResources()
	if err != nil {
		if len(resources) == 0 {
			return "", m.readError(err, "discover", "the API's kinds")
		}
		return "not every kind of the member could be discovered to look into it: " + err.Error(), nil
	}
	for _, group := range resources {
		gv, err := schema.ParseGroupVersion(group.GroupVersion)
		if err != nil {
			return "", err
		}
		for _, r := range group.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") || r.Name == "events" {
				continue
			}
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gv.WithKind(r.Kind + "List"))
			if err := m.c.List(ctx, list, client.InNamespace(namespace)); err != nil {
				return fmt.Sprintf("its %s could not be listed (%s)", r.Name, apierrors.ReasonForError(err)), nil
			}
			for _, obj := range list.Items {
				if obj.DeletionTimestamp == nil && !addedByTheAPIServer(gv.WithKind(r.Kind), &obj) {
					return "it holds " + r.Kind + " " + namespace + "/" + obj.Name, nil
				}
			}
		}
	}
	return "", nil
}

// addedByTheAPIServer: obj, of kind gvk, is what Kubernetes adds to every
// namespace.
func addedByTheAPIServer(gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata) bool {
	if gvk.Group != "" {
		return false
	}
	switch gvk.Kind {
	case "ServiceAccount":
		return obj.Name == "default"
	case "ConfigMap":
		return obj.Name == "kube-root-ca.crt"
	case "Secret":
		sa := obj.Annotations[corev1.ServiceAccountNameKey]
		return sa == "default" || sa == ServiceAccountName
	}
	return false
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
	case *rbacv1.ClusterRole:
		return equality.Semantic.DeepEqual(cur.(*rbacv1.ClusterRole).Rules, w.Rules)
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
	case *rbacv1.ClusterRole:
		cur.(*rbacv1.ClusterRole).Rules = w.Rules
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
