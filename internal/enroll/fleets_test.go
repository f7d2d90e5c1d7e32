package enroll_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// cleanup runs Cleanup of eu-1 for the fleet of id and returns what it
// did, as "Op Kind namespace/name".
func cleanup(t *testing.T, id string, registration *corev1.Secret) []string {
	t.Helper()
	changes, err := enroll.Cleanup(t.Context(), memberEnv.Config, "eu-1", id, registration)
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.Op+" "+enroll.Describe(c.Object))
	}
	return got
}

func TestTwoFleetsKeepTheirObjectsApart(t *testing.T) {
	hub, member, fleetA := clients(t)
	fleetB := fleetNamespace(t, hub)
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: fleetA})
	before := memberObjects(t, member)

	// Fleet B registers the same member under the same name, with other
	// rights: it must neither re-bind nor prune what fleet A made.
	_, err := enroll.Register(t.Context(), memberEnv.Config, hub, enroll.Options{Name: "eu-1", Preset: "edit", HubNamespace: fleetB})
	if err == nil || !strings.Contains(err.Error(), "belongs to another fleet") {
		t.Fatalf("fleet B's register: %v, want it refused as another fleet's", err)
	}
	if after := memberObjects(t, member); !maps.Equal(after, before) {
		t.Errorf("fleet B's register changed the member: %v, was %v", after, before)
	}
	if err := hub.Get(t.Context(), client.ObjectKey{Namespace: fleetB, Name: "eu-1"}, &corev1.Secret{}); err == nil {
		t.Error("fleet B's register wrote its hub Secret")
	}

	// Fleet B's unregister --cleanup deletes nothing of fleet A's, and
	// says so.
	for _, c := range cleanup(t, fleetID(t, hub, fleetB), nil) {
		if !strings.HasPrefix(c, "kept ") {
			t.Errorf("fleet B's cleanup: %s", c)
		}
	}
	if after := memberObjects(t, member); !maps.Equal(after, before) {
		t.Errorf("fleet B's cleanup changed the member: %v, was %v", after, before)
	}

	// Fleet A's removes everything it made.
	cleanup(t, fleetID(t, hub, fleetA), nil)
	if left := memberObjects(t, member); len(left) > 0 {
		t.Errorf("after fleet A's cleanup: %v", left)
	}
}

func TestCleanupKeepsANamespaceThatHoldsMore(t *testing.T) {
	hub, member, ns := clients(t)
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns})
	// What the API server adds to every namespace (envtest runs no
	// controller to do it) does not count; someone's ConfigMap does.
	added := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-system", Name: "default"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-system", Name: "kube-root-ca.crt"}},
	}
	someones := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-system", Name: "app-settings"}}
	for _, obj := range append(added, someones) {
		if err := member.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	id := fleetID(t, hub, ns)
	changes, err := enroll.Cleanup(t.Context(), memberEnv.Config, "eu-1", id, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(changes, func(c enroll.Change) bool { return enroll.Describe(c.Object) == "Namespace fleet-system" })
	if i < 0 || changes[i].Op != "kept" || !strings.Contains(changes[i].Reason, "ConfigMap fleet-system/app-settings") {
		for _, c := range changes {
			t.Logf("%s %s %s", c.Op, enroll.Describe(c.Object), c.Reason)
		}
		t.Fatal("cleanup did not keep the namespace for the ConfigMap")
	}
	var fs corev1.Namespace
	if err := member.Get(t.Context(), client.ObjectKey{Name: "fleet-system"}, &fs); err != nil || fs.DeletionTimestamp != nil {
		t.Fatalf("fleet-system: %v, deleting %v", err, fs.DeletionTimestamp)
	}

	// Without it, the namespace is only what register made: it goes.
	if err := member.Delete(t.Context(), someones); err != nil {
		t.Fatal(err)
	}
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: ns})
	if got := cleanup(t, id, nil); !slices.Contains(got, "deleted Namespace fleet-system") {
		t.Errorf("cleanup: %v, want the namespace deleted", got)
	}
}

// unstamp removes the fleet identity from every object register made,
// as the register before fleet identities left them.
func unstamp(t *testing.T, member client.Client) {
	t.Helper()
	lists := []client.ObjectList{&corev1.NamespaceList{}, &corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}}
	for _, list := range lists {
		if err := member.List(t.Context(), list, client.HasLabels{fleetv1alpha1.FleetIDLabel}); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			delete(obj.GetLabels(), fleetv1alpha1.FleetIDLabel)
			return member.Update(t.Context(), obj)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// stamped returns the fleet identities on the member objects register
// made, by object.
func stamped(t *testing.T, member client.Client) map[string]string {
	t.Helper()
	got := map[string]string{}
	lists := []client.ObjectList{&corev1.NamespaceList{}, &corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}}
	for _, list := range lists {
		if err := member.List(t.Context(), list, client.MatchingLabels{enroll.ManagedByLabel: enroll.ManagedByValue}); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			got[obj.GetNamespace()+"/"+obj.GetName()] = obj.GetLabels()[fleetv1alpha1.FleetIDLabel]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func TestAnEarlierRegistersObjects(t *testing.T) {
	hub, member, fleetA := clients(t)
	fleetB := fleetNamespace(t, hub)
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: fleetA})
	unstamp(t, member)
	before := memberObjects(t, member)
	idA := fleetID(t, hub, fleetA)

	// A fleet whose Secret does not point at the member proves nothing:
	// it may neither take nor delete them.
	_, err := enroll.Register(t.Context(), memberEnv.Config, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: fleetB})
	if err == nil || !strings.Contains(err.Error(), "without a fleet identity") {
		t.Fatalf("fleet B's register: %v, want it refused", err)
	}
	elsewhere, _ := hubSecret(t, hub, fleetA, "eu-1")
	elsewhere.Data[registry.KubeconfigKey] = []byte(strings.ReplaceAll(string(elsewhere.Data[registry.KubeconfigKey]), memberEnv.Config.Host, "https://10.0.0.7:6443"))
	for _, c := range cleanup(t, idA, elsewhere) {
		if !strings.HasPrefix(c, "kept ") {
			t.Errorf("cleanup with a Secret that points elsewhere: %s", c)
		}
	}
	if after := memberObjects(t, member); !maps.Equal(after, before) {
		t.Errorf("unproven, the member changed: %v, was %v", after, before)
	}

	// The fleet whose Secret points at the member stamps them once...
	register(t, hub, enroll.Options{Name: "eu-1", Preset: "view", HubNamespace: fleetA})
	for obj, id := range stamped(t, member) {
		if id != idA {
			t.Errorf("%s carries fleet identity %q, want %q", obj, id, idA)
		}
	}
	// ...and its unregister --cleanup, with that proof, deletes them.
	unstamp(t, member)
	registration, err := enroll.Unregister(t.Context(), hub, fleetA, "eu-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := cleanup(t, idA, registration); !slices.Contains(got, "deleted Namespace fleet-system") {
		t.Errorf("proven cleanup: %v, want everything deleted", got)
	}
	if left := memberObjects(t, member); len(left) > 0 {
		t.Errorf("after the proven cleanup: %v", left)
	}
}

func TestRegisterWarnsWhenItRepointsTheSecret(t *testing.T) {
	hub, _, ns := clients(t)
	register(t, hub, enroll.Options{Name: "eu-1", ClusterRole: "view", HubNamespace: ns, Server: "https://10.0.0.7:6443"})
	res := register(t, hub, enroll.Options{Name: "eu-1", ClusterRole: "view", HubNamespace: ns})
	if res.PreviousServer != "https://10.0.0.7:6443" || len(res.Warnings) != 1 ||
		!strings.Contains(res.Warnings[0], "https://10.0.0.7:6443") || !strings.Contains(res.Warnings[0], memberEnv.Config.Host) {
		t.Errorf("re-pointing: previous server %q, warnings %q", res.PreviousServer, res.Warnings)
	}
	if res := register(t, hub, enroll.Options{Name: "eu-1", ClusterRole: "view", HubNamespace: ns}); res.PreviousServer != "" || len(res.Warnings) > 0 {
		t.Errorf("the same server again: previous server %q, warnings %q", res.PreviousServer, res.Warnings)
	}
}

func TestWaitsReadOnlyTheirFleetsMemberCluster(t *testing.T) {
	hub, _, ns := clients(t)
	other := &fleetv1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "eu-1", Labels: map[string]string{fleetv1alpha1.FleetLabel: "another-fleet"}},
		Spec:       fleetv1alpha1.MemberClusterSpec{SecretRef: fleetv1alpha1.SecretReference{Namespace: "another-fleet", Name: "eu-1", Format: fleetv1alpha1.FormatNative}},
	}
	if err := hub.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Delete(t.Context(), other) })
	other.Status.State = fleetv1alpha1.MemberStateReady
	meta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"})
	if err := hub.Status().Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	_, err := enroll.WaitReady(t.Context(), hub, ns, "eu-1", time.Second, func(string) {})
	if notReady := (*enroll.NotReadyError)(nil); !errors.As(err, &notReady) || notReady.Member != nil {
		t.Errorf("WaitReady with another fleet's Ready MemberCluster: %v, want not created", err)
	}
	if err := enroll.WaitGone(t.Context(), hub, ns, "eu-1", time.Second); err != nil {
		t.Errorf("WaitGone with another fleet's MemberCluster: %v, want gone", err)
	}
	if err := enroll.WaitGone(t.Context(), hub, "another-fleet", "eu-1", 500*time.Millisecond); err == nil {
		t.Error("WaitGone of the fleet whose MemberCluster is there: gone")
	}
}
