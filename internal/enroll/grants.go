package enroll

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNotFleetPreset: the member's grant is not FleetPreset's, so
// SyncGrants leaves it as it is.
var ErrNotFleetPreset = errors.New("it was not registered with --permissions=fleet (no ClusterRole " + FleetRoleName + " of this fleet): its rights are the preset or ClusterRole it was registered with; register it again with --permissions=fleet to let them follow the fleet")

// Grants are what SyncGrants did, or would do, in one member.
type Grants struct {
	// Member are the ClusterRole and Roles of FleetPreset and their
	// bindings, as written.
	Member []Change
	// Rights are the rules, as the hub's Propagations want them now.
	Rights *FleetRights
	// Namespaces are those the grant is limited to, as register made it;
	// none for a cluster-wide one.
	Namespaces []string
}

// SyncGrants brings the FleetPreset grant of the member that cfg, the
// person's REST config, reaches, registered as name in the fleet of
// namespace hubNamespace on hub, up to what the hub's Propagations copy
// now: the rules Register would write today, in the namespaces the
// grant already has. It writes nothing else: the ServiceAccount, the
// token and the hub Secret stay as they are. A member whose grant is not
// FleetPreset's fails with ErrNotFleetPreset, and one of another fleet,
// or an earlier register's without a fleet identity, as Register would.
// DryRunClient only reads.
func SyncGrants(ctx context.Context, cfg *rest.Config, hub client.Client, hubNamespace, name string, dryRun DryRun) (*Grants, error) {
	id, err := ReadFleetID(ctx, hub, hubNamespace)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("the fleet of namespace %s has no identity yet: register the member first", hubNamespace)
	}
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the member's server: %w", err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	m := &memberWriter{c: c, name: name, id: id, server: u.String(), dryRun: dryRun == DryRunServer, hubSecret: hubNamespace + "/" + name}
	var role rbacv1.ClusterRole
	switch err := c.Get(ctx, client.ObjectKey{Name: FleetRoleName}, &role); {
	case apierrors.IsNotFound(err):
		return nil, ErrNotFleetPreset
	case err != nil:
		return nil, m.readError(err, "get", "ClusterRoles")
	}
	if err := setKind(&role); err != nil {
		return nil, err
	}
	if err := m.owned(&role); err != nil {
		return nil, err
	}
	roles, _, err := m.list(ctx, &rbacv1.RoleList{})
	if err != nil {
		return nil, m.readError(err, "list", "Roles")
	}
	g := &Grants{}
	for _, r := range roles {
		if r.GetName() == FleetRoleName {
			g.Namespaces = append(g.Namespaces, r.GetNamespace())
		}
	}
	slices.Sort(g.Namespaces)
	if g.Rights, err = fleetRights(ctx, hub, c.RESTMapper(), g.Namespaces); err != nil {
		return nil, err
	}
	o := Options{Name: name, Preset: FleetPreset, Namespaces: g.Namespaces}
	objMeta := func(namespace, objName string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: objName, Labels: labels(name, id)}
	}
	sa := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: MemberNamespace, Name: ServiceAccountName}}
	want := fleetObjects(o, objMeta, sa, g.Rights)
	if dryRun == DryRunClient {
		g.Member, err = m.plan(ctx, want)
		return g, err
	}
	if err := m.check(ctx, o, want); err != nil {
		return nil, err
	}
	g.Member, err = m.apply(ctx, want)
	return g, err
}

// plan says what apply would do to each of want, and writes nothing.
func (m *memberWriter) plan(ctx context.Context, want []client.Object) ([]Change, error) {
	var changes []Change
	for _, obj := range want {
		if err := setKind(obj); err != nil {
			return nil, err
		}
		cur := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
		err := m.c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
		switch {
		case apierrors.IsNotFound(err):
			changes = append(changes, Change{Object: obj, Op: "created"})
			continue
		case err != nil:
			return nil, m.readError(err, "get", kindOf(obj)+"s")
		}
		if err := setKind(cur); err != nil {
			return nil, err
		}
		if err := m.owned(cur); err != nil {
			return nil, err
		}
		op := "configured"
		if equal(cur, obj) {
			op = "unchanged"
		}
		changes = append(changes, Change{Object: obj, Op: op})
	}
	return changes, nil
}
