package main

// An outside review of "fleet-manager uninstall": attacks on what
// docs/install.md's Uninstall section and the command's help promise.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// hubSnapshot is what the hub holds of a fleet that uninstall could
// change: every Propagation, registration Secret, MemberCluster and
// ConfigMap of its namespace, by identity, labels, finalizers, deletion,
// spec and data (not status, which the running manager writes).
func hubSnapshot(t *testing.T, f *uninstallFleet) map[string]string {
	t.Helper()
	snap := map[string]string{}
	var props fleetv1alpha1.PropagationList
	var mcs fleetv1alpha1.MemberClusterList
	var secrets corev1.SecretList
	var cms corev1.ConfigMapList
	for _, l := range []struct {
		list client.ObjectList
		opts []client.ListOption
	}{
		{&props, []client.ListOption{client.MatchingLabels{fleetv1alpha1.FleetLabel: f.ns}}},
		{&mcs, []client.ListOption{client.MatchingLabels{fleetv1alpha1.FleetLabel: f.ns}}},
		{&secrets, []client.ListOption{client.InNamespace(f.ns)}},
		{&cms, []client.ListOption{client.InNamespace(f.ns)}},
	} {
		if err := f.hub.List(t.Context(), l.list, l.opts...); err != nil {
			t.Fatal(err)
		}
	}
	meta := func(o client.Object) string {
		return fmt.Sprintf("uid=%s labels=%v finalizers=%v deleting=%v", o.GetUID(), o.GetLabels(), o.GetFinalizers(), o.GetDeletionTimestamp())
	}
	for i := range props.Items {
		p := &props.Items[i]
		snap["Propagation "+p.Namespace+"/"+p.Name] = meta(p) + fmt.Sprintf(" spec=%+v", p.Spec)
	}
	for i := range mcs.Items {
		m := &mcs.Items[i]
		snap["MemberCluster "+m.Name] = meta(m) + fmt.Sprintf(" spec=%+v", m.Spec)
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		snap["Secret "+s.Name] = meta(s) + " rv=" + s.ResourceVersion
	}
	for i := range cms.Items {
		c := &cms.Items[i]
		snap["ConfigMap "+c.Name] = meta(c) + fmt.Sprintf(" data=%v", c.Data)
	}
	return snap
}

func diffSnapshots(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if a, ok := after[k]; !ok {
			t.Errorf("%s: %s is gone", what, k)
		} else if a != v {
			t.Errorf("%s: %s changed:\n before %s\n after  %s", what, k, v, a)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared", what, k)
		}
	}
}

// credentialsOf returns the credentials of the registration kubeconfigs
// of the fleet, to check uninstall never prints them.
func credentialsOf(t *testing.T, f *uninstallFleet) []string {
	t.Helper()
	var secrets corev1.SecretList
	if err := f.hub.List(t.Context(), &secrets, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	var creds []string
	for _, s := range secrets.Items {
		for _, d := range s.Data {
			if found, err := kubeconfigtest.CredentialsOf(d); err == nil {
				creds = append(creds, found...)
			}
		}
	}
	return creds
}

func checkNoCredential(t *testing.T, res cliResult, creds []string) {
	t.Helper()
	for _, c := range creds {
		if len(c) >= 8 && (strings.Contains(res.stdout, c) || strings.Contains(res.stderr, c)) {
			t.Errorf("uninstall printed a credential (%.6s...)", c)
		}
	}
}

// startSecondFleet starts a second fleet on the hub, its own namespace and
// manager, with the test member registered by a hand-written registration
// Secret (register refuses a second name for the same member), and a
// Propagation named as first's, "settings", in a hub namespace of its own.
func startSecondFleet(t *testing.T, first *uninstallFleet) *uninstallFleet {
	t.Helper()
	hub, member, ns, flags := enrollSetup(t)
	f := &uninstallFleet{hub: hub, member: member, ns: ns, name: suite.Name("review-b")}
	f.flags = []string{flags[0], "--namespace=" + ns, first.flags[2]}
	f.stop = startUninstallManager(t, flags[0], ns)
	kc, err := controlplane.AdminKubeconfig(testMember, "review-b")
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": kc},
	}
	if err := hub.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.p = f.propagate(t)
	return f
}

// TestUninstallTouchesNoOtherFleet: two fleets on one hub sharing a member,
// each with a Propagation named "settings"; fleet A also has a
// ClusterPropagation of a Namespace that the member then fills with a
// ConfigMap of its own, and the member puts a ConfigMap of its own in A's
// copies' namespace. Dry-runs of A change neither fleet; uninstall of A
// (twice) leaves B's Propagation, copy, registration, MemberCluster and
// identity untouched, and the member's own objects and their namespaces.
func TestUninstallTouchesNoOtherFleet(t *testing.T) {
	a := startUninstallFleet(t)
	b := startSecondFleet(t, a)
	ctx := t.Context()

	// A ClusterPropagation of namespace shared, which the member fills.
	shared := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: suite.Name("review-shared")}}
	if err := a.hub.Create(ctx, shared); err != nil {
		t.Fatal(err)
	}
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: shared.Name, Labels: map[string]string{fleetv1alpha1.FleetLabel: a.ns}},
		Spec:       fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "Namespace", Name: shared.Name}}},
	}
	if err := a.hub.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the copy of namespace "+shared.Name, func() bool {
		return a.member.Get(ctx, client.ObjectKey{Name: shared.Name}, &corev1.Namespace{}) == nil
	})
	own := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: shared.Name, Name: "members-own"}, Data: map[string]string{"k": "v"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: a.p.Namespace, Name: "members-own"}, Data: map[string]string{"k": "v"}},
	}
	for _, cm := range own {
		if err := a.member.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	creds := append(credentialsOf(t, a), credentialsOf(t, b)...)

	beforeA, beforeB := hubSnapshot(t, a), hubSnapshot(t, b)
	for _, args := range [][]string{{"--dry-run"}, {"--dry-run", "--keep-copies"}, {"--dry-run", "--leave-owed"}} {
		res := a.uninstall(t, args...)
		checkNoCredential(t, res, creds)
		if res.code != 0 {
			t.Errorf("uninstall %v: exit %d", args, res.code)
		}
	}
	diffSnapshots(t, "A after dry-run", beforeA, hubSnapshot(t, a))
	diffSnapshots(t, "B after A's dry-run", beforeB, hubSnapshot(t, b))
	if c := a.copyOf(t); c == nil || c.Labels[fleetv1alpha1.PropagationLabel] == "" {
		t.Errorf("dry-run touched A's copy: %v", c)
	}

	res := a.uninstall(t)
	checkNoCredential(t, res, creds)
	if res.code != 0 {
		t.Errorf("uninstall A: exit %d", res.code)
	}
	secretA, mcA := a.registration(a.name)
	a.checkGone(t, a.p, cp, secretA, mcA, a.identity())
	if c := a.copyOf(t); c != nil && c.DeletionTimestamp == nil {
		t.Errorf("A's copy is still in the member: %v", c.Labels)
	}
	diffSnapshots(t, "B after A's uninstall", beforeB, hubSnapshot(t, b))
	if c := b.copyOf(t); c == nil || c.DeletionTimestamp != nil || c.Labels[fleetv1alpha1.PropagationLabel] != "settings" {
		t.Errorf("B's copy was touched by A's uninstall: %+v", c)
	}
	for _, cm := range own {
		got := &corev1.ConfigMap{}
		if err := a.member.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("the member's own ConfigMap %s/%s: %v, deleting %v", cm.Namespace, cm.Name, err, got.DeletionTimestamp)
		}
		ns := &corev1.Namespace{}
		if err := a.member.Get(ctx, client.ObjectKey{Name: cm.Namespace}, ns); err != nil || ns.DeletionTimestamp != nil {
			t.Errorf("namespace %s, holding the member's own ConfigMap: %v, deleting %v", cm.Namespace, err, ns.DeletionTimestamp)
		}
	}

	res = a.uninstall(t)
	checkNoCredential(t, res, creds)
	if res.code != 0 {
		t.Errorf("uninstall A again: exit %d", res.code)
	}
	diffSnapshots(t, "B after A's second uninstall", beforeB, hubSnapshot(t, b))
}

// TestUninstallForceOnAPropagationNeverDeleted: the manager is gone, and the
// fleet's Propagation was never deleted (the common case: the manager was
// removed first). --force must let it go in one run.
func TestUninstallForceOnAPropagationNeverDeleted(t *testing.T) {
	f := startUninstallFleet(t)
	f.stop()
	// --force --dry-run, the manager stopped (nothing else writes the hub):
	// nothing changes, byte for byte for the Secrets.
	before := hubSnapshot(t, f)
	if res := f.uninstall(t, "--force", "--dry-run"); res.code != 0 {
		t.Errorf("uninstall --force --dry-run: exit %d", res.code)
	}
	if res := f.uninstall(t, "--dry-run"); res.code != 1 {
		t.Errorf("uninstall --dry-run without a manager: exit %d", res.code)
	}
	diffSnapshots(t, "after the dry-runs", before, hubSnapshot(t, f))
	res := f.uninstall(t, "--force")
	if res.code != 0 {
		t.Errorf("uninstall --force: exit %d\nstderr:\n%s", res.code, res.stderr)
	}
	secret, mc := f.registration(f.name)
	f.checkGone(t, f.p, secret, mc)
	if c := f.copyOf(t); c == nil || c.DeletionTimestamp != nil {
		t.Error("uninstall --force deleted the copy in the member")
	}
}

// TestUninstallRefusesWithoutAManager: the doc's step 1:
// uninstall refuses to start when no manager runs. With no Propagation
// left, it must still refuse, not delete registrations it then waits on.
func TestUninstallRefusesWithoutAManager(t *testing.T) {
	f := startUninstallFleet(t)
	if err := f.hub.Delete(t.Context(), f.p); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Propagation released by the manager", func() bool {
		return apierrors.IsNotFound(f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.p), &fleetv1alpha1.Propagation{}))
	})
	f.stop()
	res := f.uninstall(t, "--timeout=5s")
	if res.code != 1 || !strings.Contains(res.stderr, "no manager of fleet "+f.ns+" is running") {
		t.Errorf("uninstall without a manager and no Propagation: exit %d, want a refusal naming --force; stderr:\n%s", res.code, res.stderr)
	}
	secret, _ := f.registration(f.name)
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Errorf("uninstall that should have refused deleted the registration Secret: %v", err)
	}
}

// TestUninstallLeaveOwedKeepsTheIdentity: a member the manager
// cannot reach (its registration's credentials point nowhere) but that the
// admin's kubeconfig reaches, holding a copy whose removal it owes.
// --leave-owed leaves the copy, labelled with the fleet's identity, so the
// identity must be kept (step 5).
func TestUninstallLeaveOwedKeepsTheIdentity(t *testing.T) {
	f := startUninstallFleet(t)
	secret, _ := f.registration(f.name)
	if err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	// The registration's server goes away (rotated, moved): the manager
	// can no longer reach the member; the admin's kubeconfig still can.
	secret.Data["kubeconfig"] = []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://` + closedAddress(t) + `"}}]
users: [{name: u, user: {token: review-test-token-of-a-moved-member}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	if err := f.hub.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the member not Ready", func() bool {
		mc := &fleetv1alpha1.MemberCluster{}
		return f.hub.Get(t.Context(), client.ObjectKey{Name: f.name}, mc) == nil && mc.Status.State != "" && mc.Status.State != fleetv1alpha1.MemberStateReady
	})
	id := f.copyOf(t).Labels[fleetv1alpha1.FleetIDLabel]

	res := f.uninstall(t, "--leave-owed")
	if strings.Contains(res.stdout+res.stderr, "review-test-token-of-a-moved-member") {
		t.Error("uninstall printed the registration's token")
	}
	c := f.copyOf(t)
	if c == nil || c.Labels[fleetv1alpha1.FleetIDLabel] != id {
		t.Fatalf("the copy did not stay labelled (%v): the test proves nothing", c)
	}
	err := f.hub.Get(t.Context(), client.ObjectKeyFromObject(f.identity()), f.identity())
	if apierrors.IsNotFound(err) {
		t.Errorf("uninstall --leave-owed deleted fleet-identity %s while member %s still holds copy %s/%s labelled %s=%s (exit %d)",
			id, f.name, c.Namespace, c.Name, fleetv1alpha1.FleetIDLabel, id, res.code)
	}
}

// TestUninstallLetsGoAnAdoptedObject: a Propagation with adopt takes over a ConfigMap the
// member made itself; uninstall must let it go, not delete it.
func TestUninstallLetsGoAnAdoptedObject(t *testing.T) {
	f := startUninstallFleet(t)
	ctx := t.Context()
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.p.Namespace, Name: "members-own"}, Data: map[string]string{"k": "member"}}
	if err := f.member.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	hubCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.p.Namespace, Name: "members-own"}, Data: map[string]string{"k": "hub"}}
	if err := f.hub.Create(ctx, hubCM); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.p.Namespace, Name: "adopter", Labels: map[string]string{fleetv1alpha1.FleetLabel: f.ns}},
		Spec: fleetv1alpha1.PropagationSpec{Adopt: true,
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "members-own"}}},
	}
	if err := f.hub.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the member's ConfigMap adopted", func() bool {
		got := &corev1.ConfigMap{}
		return f.member.Get(ctx, client.ObjectKeyFromObject(mine), got) == nil && got.Annotations[fleetv1alpha1.AdoptedAnnotation] == "true"
	})

	res := f.uninstall(t)
	if res.code != 0 {
		t.Errorf("uninstall: exit %d", res.code)
	}
	f.checkGone(t, p, f.p)
	got := &corev1.ConfigMap{}
	if err := f.member.Get(ctx, client.ObjectKeyFromObject(mine), got); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the member's own ConfigMap, adopted, was deleted: %v", err)
	} else if got.Labels[fleetv1alpha1.FleetIDLabel] != "" || got.Annotations[fleetv1alpha1.AdoptedAnnotation] != "" {
		t.Errorf("the adopted ConfigMap is still marked a copy: %v %v", got.Labels, got.Annotations)
	}
}

// CI found it: the running manager writes the Propagation (its status, a
// label) between uninstall's read and its patch to deletion: Orphan, and
// the patch's optimistic lock failed the whole uninstall with a conflict.
// A conflict is read again and the change made on what is new.
func TestKeepCopiesSurvivesTheManagersConcurrentWrite(t *testing.T) {
	hub, _, ns, _ := enrollSetup(t)
	p := &fleetv1alpha1.Propagation{
		// A finalizer of the test's keeps it to be read after the delete.
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "raced", Finalizers: []string{"test.fleetkube.io/hold"}},
		Spec:       fleetv1alpha1.PropagationSpec{Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "c"}}},
	}
	if err := hub.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hub.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	stale := p.DeepCopy()
	raced := false
	watching, err := client.NewWithWatch(testHub.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	racing := interceptor.NewClient(watching, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if !raced { // the manager's write lands first
				raced = true
				fresh := &fleetv1alpha1.Propagation{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
					return err
				}
				fresh.Labels = map[string]string{"written-by": "the-manager"}
				if err := c.Update(ctx, fresh); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	u := &uninstaller{hub: racing, out: io.Discard, errOut: io.Discard, keepCopies: true}
	if err := u.deletePropagations(t.Context(), []propagationObject{namespacedPropagation{stale}}); err != nil {
		t.Fatalf("deletePropagations with a concurrent write: %v", err)
	}
	got := &fleetv1alpha1.Propagation{}
	if err := hub.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Deletion != fleetv1alpha1.DeletionOrphan || got.Labels["written-by"] != "the-manager" || got.DeletionTimestamp == nil {
		t.Errorf("after uninstall: deletion %q, labels %v, deleting %v: want Orphan, the manager's label kept, deleting", got.Spec.Deletion, got.Labels, got.DeletionTimestamp != nil)
	}
}
