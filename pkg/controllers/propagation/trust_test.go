package propagation_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// waitMember waits until Propagation key on f's hub reports a member
// result that satisfies cond, and returns it.
func (f *testFleet) waitMember(key types.NamespacedName, what string, cond func(m fleetv1alpha1.MemberPropagationStatus) bool) *fleetv1alpha1.Propagation {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{}
	poll.Until(f.t, "Propagation "+key.String()+": "+what, func() bool {
		return f.hub.Client.Get(f.t.Context(), key, p) == nil && p.Status.ObservedGeneration == p.Generation &&
			slices.ContainsFunc(p.Status.Members, cond)
	})
	return p
}

func refused(rule string) func(m fleetv1alpha1.MemberPropagationStatus) bool {
	return func(m fleetv1alpha1.MemberPropagationStatus) bool {
		return m.Reason == fleetv1alpha1.ReasonRefused && strings.Contains(m.Message, rule)
	}
}

// fleetID is f's identity.
func (f *testFleet) fleetID() string {
	f.t.Helper()
	id, err := f.mgr.FleetID(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// secretIn returns member i's Secret name in namespace, or nil.
func secretIn(t *testing.T, i int, namespace, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	err := suite.MemberClients[i].Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPropagationInTheFleetNamespaceCopiesNothing: the fleet namespace
// holds every member's registration; a Propagation of its Secrets copies
// none, and says why.
func TestPropagationInTheFleetNamespaceCopiesNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: "spread"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "Secret", Selector: &fleetv1alpha1.LabelSelector{}}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{testFleetLabel: f.namespace})},
		},
	}
	if err := f.hub.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	p = f.waitMember(client.ObjectKeyFromObject(p), "east refused", refused("fleet namespace"))
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Reason != fleetv1alpha1.ReasonRefused || !strings.Contains(c.Message, "fleet namespace") {
		t.Errorf("Ready = %+v, want False for Refused, naming the fleet namespace", c)
	}
	if s := secretIn(t, 0, f.namespace, "east"); s != nil {
		t.Fatalf("east holds its own registration Secret, copied from the hub: %v", s.Labels)
	}
}

// TestCredentialSecretsAreRefused: of the Secrets of a team namespace, a
// Propagation copies the image pull Secret, and refuses, by name of the
// rule, the Cluster API kubeconfig, the service account token and the
// Argo CD Secret it selects with it.
func TestCredentialSecretsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	web := map[string]string{"app": "web"}
	secrets := []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "east-kubeconfig"},
			Type:       registry.ClusterAPISecretType, Data: map[string][]byte{registry.ClusterAPIKey: suite.Kubeconfigs[0]},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "pull", Labels: web},
			Type:       corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "token", Labels: web, Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type:       corev1.SecretTypeServiceAccountToken,
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "repo", Labels: map[string]string{"app": "web", registry.ArgoCDSecretTypeLabel: "repository"}},
			Data:       map[string][]byte{"password": []byte("not a real one")},
		},
	}
	for _, s := range secrets {
		s.Namespace = f.team
		if err := f.hub.Client.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	f.propagation("secrets", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{
			{APIVersion: "v1", Kind: "Secret", Name: "east-kubeconfig"},
			{APIVersion: "v1", Kind: "Secret", Selector: fleetv1alpha1.SetAsLabelSelector(web)},
		}
	})
	key := types.NamespacedName{Namespace: f.team, Name: "secrets"}
	p := f.waitMember(key, "east refused the Cluster API Secret", refused(string(registry.ClusterAPISecretType)))
	if msg := p.Status.Members[0].Message; !strings.Contains(msg, "east-kubeconfig") || !strings.Contains(msg, "2 more") {
		t.Errorf("message %q: want the Cluster API Secret named, and the 2 other refusals counted", msg)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c == nil || c.Reason != fleetv1alpha1.ReasonRefused {
		t.Errorf("Ready = %+v, want False for Refused", c)
	}
	poll.Until(t, "the image pull Secret copied to east", func() bool { return secretIn(t, 0, f.team, "pull") != nil })
	for _, name := range []string{"east-kubeconfig", "token", "repo"} {
		if secretIn(t, 0, f.team, name) != nil {
			t.Errorf("east holds a copy of Secret %s", name)
		}
	}
}

// TestTwoHubsSharingAMemberLeaveEachOthersCopies runs two fleets of the
// same namespace name on two hubs, with same-named Propagations of
// different content in one member: neither deletes, overwrites or fights
// over the other's copies, nor deletes a copy stamped without an
// identity whose Propagation it lacks.
func TestTwoHubsSharingAMemberLeaveEachOthersCopies(t *testing.T) {
	t.Parallel()
	suite.Need(t)
	const member = 2
	team := suite.Name("shared")
	name := team
	hubs := suite.OwnHubs(t, 2)
	a := prepareFleet(t, hubs[0], "fleet-system", team)
	a.start(nil)
	b := prepareFleet(t, hubs[1], "fleet-system", team)
	b.start(nil)
	fleettest.CreateNamespace(t, suite.MemberClients[member], team)
	ghost := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "ghost", Labels: map[string]string{
			fleetv1alpha1.FleetLabel: "fleet-system", fleetv1alpha1.PropagationLabel: "ghost",
		}},
		Data: map[string]string{"owner": "unknown"},
	}
	if err := suite.MemberClients[member].Create(t.Context(), ghost); err != nil {
		t.Fatal(err)
	}

	a.register(member, name, map[string]string{"env": "prod"})
	a.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	a.configMap("a-only", map[string]string{"from": "a"}, map[string]string{"app": "web"})
	a.propagation("web", nil)
	a.waitStatus("web", "Ready in the shared member", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })

	b.register(member, name, map[string]string{"env": "prod"})
	b.configMap("web", map[string]string{"color": "red"}, map[string]string{"app": "web"})
	b.configMap("b-only", map[string]string{"from": "b"}, map[string]string{"app": "web"})
	b.propagation("web", nil)
	p := b.waitMember(types.NamespacedName{Namespace: team, Name: "web"}, "the shared member refuses to take a's copy", func(m fleetv1alpha1.MemberPropagationStatus) bool {
		return m.Reason == fleetv1alpha1.ReasonAlreadyExists
	})
	if msg := p.Status.Members[0].Message; !strings.Contains(msg, "ConfigMap web") || !strings.Contains(msg, "another fleet's copy") {
		t.Errorf("b's message %q: want ConfigMap web named as another fleet's copy", msg)
	}
	copyIn := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		if err := suite.MemberClients[member].Get(t.Context(), types.NamespacedName{Namespace: team, Name: name}, cm); err != nil {
			t.Fatalf("ConfigMap %s in the shared member: %v", name, err)
		}
		return cm
	}
	poll.Until(t, "b's own copy in the shared member", func() bool {
		cm := &corev1.ConfigMap{}
		return suite.MemberClients[member].Get(t.Context(), types.NamespacedName{Namespace: team, Name: "b-only"}, cm) == nil
	})
	a.waitStatus("web", "still Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })

	since := time.Now()
	a.reconciledAgain("web")
	b.reconciledAgain("web")
	writes := slices.DeleteFunc(memberWrites(t, member, since), func(w controlplane.Write) bool {
		return w.Namespace != team && !(w.Resource == "namespaces" && w.Name == team)
	})
	if len(writes) != 0 {
		t.Errorf("%d writes to the shared member after both fleets settled and reconciled again, want none; the first: %v", len(writes), writes[:min(len(writes), 10)])
	}
	idA, idB := a.fleetID(), b.fleetID()
	if idA == idB {
		t.Fatalf("both fleets have identity %s", idA)
	}
	for cm, want := range map[string]string{"web": idA, "a-only": idA, "b-only": idB} {
		if got := copyIn(cm).Labels[fleetv1alpha1.FleetIDLabel]; got != want {
			t.Errorf("ConfigMap %s carries fleet identity %q, want %q", cm, got, want)
		}
	}
	if got := copyIn("web").Data["color"]; got != "blue" {
		t.Errorf("web's color = %q, want the first fleet's blue", got)
	}
	if got := copyIn("ghost"); got.UID != ghost.UID || got.ResourceVersion != ghost.ResourceVersion {
		t.Errorf("the copy without an identity of a Propagation neither hub has was changed: %+v", got.ObjectMeta)
	}
}

// TestOldCopiesAreRestampedWhenProven: copies stamped before fleets had
// an identity are the fleet's when they copy the hub object applied now,
// or when the journal holds them with their hash. Those are stamped with
// the identity, or removed when unwanted; one proven by neither is left
// alone.
func TestOldCopiesAreRestampedWhenProven(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	fleettest.CreateNamespace(t, suite.MemberClients[0], f.team)
	web := f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.configMap("web-3", map[string]string{"color": "green"}, map[string]string{"app": "web"})
	oldCopy := func(name, sourceUID, hash string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: f.team, Name: name,
				Labels: map[string]string{"app": "web", fleetv1alpha1.FleetLabel: f.namespace, fleetv1alpha1.PropagationLabel: "web"},
				Annotations: map[string]string{
					fleetv1alpha1.SourceAnnotation:      "v1/ConfigMap/" + f.team + "/" + name,
					fleetv1alpha1.SourceUIDAnnotation:   sourceUID,
					fleetv1alpha1.ContentHashAnnotation: hash,
					fleetv1alpha1.DeletionAnnotation:    string(fleetv1alpha1.DeletionDelete),
				},
			},
			Data: map[string]string{"color": "old"},
		}
		if err := suite.MemberClients[0].Create(t.Context(), cm, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	restamped := oldCopy("web", string(web.UID), "sha256:before")
	oldCopy("stale", "a-deleted-hub-object", "sha256:stale")
	unprovable := oldCopy("web-3", "another-hubs-object", "sha256:another")
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	if err := f.journal.Record("east", []journal.Copy{{Object: journal.Object{GVK: gvk, Namespace: f.team, Name: "stale"}, Propagation: "web", Hash: "sha256:stale"}}); err != nil {
		t.Fatal(err)
	}

	f.propagation("web", nil)
	id := f.fleetID()
	f.waitCopy(0, "web", "stamped with the fleet's identity", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Labels[fleetv1alpha1.FleetIDLabel] == id && cm.Data["color"] == "blue"
	})
	f.waitCopy(0, "stale", "removed: the journal proves it the fleet's, and no hub object wants it", gone)
	p := f.waitMember(types.NamespacedName{Namespace: f.team, Name: "web"}, "web-3 left alone", func(m fleetv1alpha1.MemberPropagationStatus) bool {
		return m.Reason == fleetv1alpha1.ReasonAlreadyExists
	})
	if msg := p.Status.Members[0].Message; !strings.Contains(msg, "ConfigMap web-3") || !strings.Contains(msg, "not provably this fleet's") {
		t.Errorf("message %q: want web-3, and only it, reported as not provably the fleet's", msg)
	}
	if cm := f.copyIn(0, "web"); cm.UID != restamped.UID {
		t.Error("the proven old copy was deleted and created again, not stamped")
	}
	if cm := f.copyIn(0, "web-3"); cm.ResourceVersion != unprovable.ResourceVersion {
		t.Errorf("the unprovable old copy was changed: %+v", cm)
	}
}
