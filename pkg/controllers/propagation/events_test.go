package propagation_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// soon is how long a cured failure may take to show: well under the
// minute a failure was once retried after.
const soon = 15 * time.Second

// configMapReader is a user of member i that may read ConfigMaps and get
// and create Namespaces, and write nothing else: its kubeconfig.
func configMapReader(t *testing.T, i int) (user string, kubeconfig []byte) {
	t.Helper()
	user = suite.Name("reader")
	return user, memberUser(t, i, user, "",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
	)
}

// grantConfigMaps lets user write ConfigMaps in namespace of member i.
func grantConfigMaps(t *testing.T, i int, namespace, user string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update", "patch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := suite.MemberClients[i].Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
}

// memberEvents lists the Events of the fleet's team namespace about
// Propagation name, of type and reason, that name member.
func (f *testFleet) memberEvents(name, member, eventType, reason string) []eventsv1.Event {
	f.t.Helper()
	events := &eventsv1.EventList{}
	if err := f.hub.Client.List(f.t.Context(), events, client.InNamespace(f.team)); err != nil {
		f.t.Fatal(err)
	}
	return slices.DeleteFunc(events.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Name != name || e.Type != eventType || e.Reason != reason || !strings.HasPrefix(e.Note, "member "+member+":")
	})
}

// forbiddenPatches counts the patches of member i the manager was
// refused since.
func forbiddenPatches(t *testing.T, i int, since time.Time) int {
	n := 0
	for _, w := range memberWrites(t, i, since) {
		if w.Verb == "patch" && w.Resource == "configmaps" {
			n++
		}
	}
	return n
}

func memberFailed(member, reason string) func(p *fleetv1alpha1.Propagation) bool {
	return func(p *fleetv1alpha1.Propagation) bool {
		return slices.ContainsFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool {
			return m.Name == member && m.Result == fleetv1alpha1.ResultFailed && m.Reason == reason
		})
	}
}

// A member's failure is one Warning Event, however often it is retried,
// and its cure, a right granted in the member, shows within seconds (it
// took up to the minute of the fixed retry) as a Normal Event. It runs
// alone: it counts every fleet's writes in member 1's audit log, and times
// the cure.
func TestMemberFailureIsOneEventAndItsCureShowsSoon(t *testing.T) {
	f := newFleet(t)
	user, kc := configMapReader(t, 1)
	start := time.Now()
	f.registerKubeconfig("west", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "west Forbidden", memberFailed("west", fleetv1alpha1.ReasonForbidden))

	var warning eventsv1.Event
	poll.Until(t, "a Forbidden Warning Event naming west", func() bool {
		events := f.memberEvents("web", "west", corev1.EventTypeWarning, fleetv1alpha1.ReasonForbidden)
		if len(events) == 0 {
			return false
		}
		warning = events[0]
		return true
	})
	if !strings.Contains(warning.Note, "patch configmaps") || warning.Related == nil || warning.Related.Kind != "MemberCluster" || warning.Related.Name != "west" {
		t.Errorf("Event %q related to %+v: want the failure's message, related to MemberCluster west", warning.Note, warning.Related)
	}

	// Retried twice more, with nothing new to tell.
	poll.Until(t, "west's patch refused 3 times", func() bool { return forbiddenPatches(t, 1, start) >= 3 })
	granted := time.Now()
	grantConfigMaps(t, 1, f.team, user)
	f.waitStatus("web", "west Applied", ready)
	took := time.Since(granted)
	t.Logf("west Applied %s after the right was granted", took.Round(time.Millisecond))
	if took > soon {
		t.Errorf("west was Applied %s after the right was granted, want within %s", took.Round(time.Second), soon)
	}
	poll.Until(t, "an Applied Normal Event naming west", func() bool {
		return len(f.memberEvents("web", "west", corev1.EventTypeNormal, fleetv1alpha1.ReasonApplied)) == 1
	})
	events := f.memberEvents("web", "west", corev1.EventTypeWarning, fleetv1alpha1.ReasonForbidden)
	for _, e := range events {
		if len(events) > 1 || e.Series != nil {
			t.Errorf("the failure retried was told again: %d Events, one with series %+v", len(events), e.Series)
		}
	}
}

// A member's new credential, which may have the rights a failure lacked,
// asks again at once, however long the failure was backed off. It runs
// alone: it counts every fleet's writes in member 1's audit log, and times
// the retry.
func TestNewCredentialRetriesTheMembersFailures(t *testing.T) {
	f := newFleet(t)
	user, kc := configMapReader(t, 1)
	start := time.Now()
	f.registerKubeconfig("west", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "west Forbidden", memberFailed("west", fleetv1alpha1.ReasonForbidden))
	// Five failures in a row: the next retry is 16 s away.
	poll.Until(t, "west's patch refused 5 times", func() bool { return forbiddenPatches(t, 1, start) >= 5 })

	writer := user + "-writer"
	grantConfigMaps(t, 1, f.team, writer)
	u := suite.AddUser(t, suite.Members[1], envtest.User{Name: writer})
	readerBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: writer},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: writer}},
	}
	if err := suite.MemberClients[1].Create(t.Context(), readerBinding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.MemberClients[1].Delete(context.Background(), readerBinding) })
	newKC, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.namespace, Name: "west"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data[registry.KubeconfigKey] = newKC
	changed := time.Now()
	if err := f.hub.Client.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.waitStatus("web", "west Applied", ready)
	took := time.Since(changed)
	t.Logf("west Applied %s after its new credential", took.Round(time.Millisecond))
	if took > 8*time.Second {
		t.Errorf("west was Applied %s after its new credential, want within 8s", took.Round(time.Second))
	}
}
