package rollouttest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// The package's API servers: a hub and ten members.
var suite = &fleettest.Suite{MemberCount: 10}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// testFleet is one test's fleet: its manager, the members it registered
// (by name, with their API server's index), and its team namespace,
// whose Deployments a stand-in controller rolls out in every member.
type testFleet struct {
	t           *testing.T
	fleet       *fleettest.Fleet
	team        string
	members     map[string]int
	deployments *fleettest.DeploymentController
}

// newFleet starts a fleet with the Propagation and MemberCluster
// controllers, and a Deployment controller in its members that marks a
// change rolled out after delay, unless its image is one of never.
func newFleet(t *testing.T, delay time.Duration, never ...string) *testFleet {
	t.Helper()
	f := &testFleet{t: t, team: suite.Name("team"), members: map[string]int{}}
	fleettest.CreateNamespace(t, suite.HubClient, f.team)
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	drains, owed := propagation.NewDrains(), propagation.NewOwedRemovals()
	f.fleet = suite.StartFleet(t, fleettest.FleetOptions{
		Configure: fleettest.QuickHealth,
		Setup: func(m *fleet.Manager) error {
			if err := membercluster.Add(m, membercluster.Options{Drains: drains, OwedRemovals: owed}); err != nil {
				return err
			}
			return propagation.Add(m, propagation.Options{Journal: j, Drains: drains, OwedRemovals: owed})
		},
	})
	t.Cleanup(f.removePropagations)
	f.deployments = &fleettest.DeploymentController{Namespace: f.team, Delay: delay, Never: never}
	f.deployments.Start(t)
	logs := f.fleet.Logs
	t.Cleanup(func() {
		if t.Failed() {
			lines := logs.Lines()
			t.Logf("the last of the %d lines the manager logged:\n%s", len(lines), strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
	return f
}

// removePropagations removes the test's Propagations, finalizers and
// all, once its manager stopped: the next test's manager would
// reconcile them too.
func (f *testFleet) removePropagations() {
	ctx := context.Background()
	var list fleetv1alpha1.PropagationList
	if err := suite.HubClient.List(ctx, &list, client.InNamespace(f.team)); err != nil {
		f.t.Errorf("listing the Propagations: %v", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		before := p.DeepCopy()
		p.Finalizers = nil
		_ = suite.HubClient.Patch(ctx, p, client.MergeFrom(before))
		_ = suite.HubClient.Delete(ctx, p)
	}
}

// register registers member API server i under the test's name for it,
// with labels, and waits until its MemberCluster is Ready.
func (f *testFleet) register(i int, name string, labels map[string]string) string {
	f.t.Helper()
	return f.registerKubeconfig(i, name, suite.Kubeconfigs[i], labels)
}

// registerKubeconfig registers member API server i, reached by
// kubeconfig, as register does.
func (f *testFleet) registerKubeconfig(i int, name string, kubeconfig []byte, labels map[string]string) string {
	f.t.Helper()
	name = f.fleet.Namespace + "-" + name
	f.members[name] = i
	f.deployments.Add(name, suite.MemberClients[i])
	f.fleet.Register(f.t, name, kubeconfig, map[string]string{"test.fleetkube.io/fleet": f.fleet.Namespace}, labels)
	suite.WaitMemberCluster(f.t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionReady) == metav1.ConditionTrue
	})
	return name
}

// deployment creates, or changes to image, the hub's Deployment web.
func (f *testFleet) deployment(image string) {
	f.t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := suite.HubClient.Get(f.t.Context(), client.ObjectKeyFromObject(d), d)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		d.Labels = labels
		d.Spec = appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		}
		if apierrors.IsNotFound(err) {
			return suite.HubClient.Create(f.t.Context(), d)
		}
		return suite.HubClient.Update(f.t.Context(), d)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// propagation creates Propagation web of the team namespace, selecting
// the hub objects labelled app=web of kinds and the test's members, as
// edit makes it.
func (f *testFleet) propagation(edit func(p *fleetv1alpha1.Propagation), kinds ...metav1.TypeMeta) {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Members: fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"test.fleetkube.io/fleet": f.fleet.Namespace})},
		},
	}
	for _, k := range kinds {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{
			APIVersion: k.APIVersion, Kind: k.Kind, Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"}),
		})
	}
	if edit != nil {
		edit(p)
	}
	if err := suite.HubClient.Create(f.t.Context(), p); err != nil {
		f.t.Fatal(err)
	}
}

var (
	deploymentKind = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	configMapKind  = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
)

// edit changes Propagation web.
func (f *testFleet) edit(edit func(p *fleetv1alpha1.Propagation)) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &fleetv1alpha1.Propagation{}
		if err := suite.HubClient.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
			return err
		}
		edit(p)
		return suite.HubClient.Update(f.t.Context(), p)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// get returns Propagation web.
func (f *testFleet) get() *fleetv1alpha1.Propagation {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{}
	if err := suite.HubClient.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// waitRollout waits until Propagation web's rollout meets cond.
func (f *testFleet) waitRollout(what string, cond func(r *fleetv1alpha1.RolloutStatus) bool) *fleetv1alpha1.Propagation {
	f.t.Helper()
	var p *fleetv1alpha1.Propagation
	defer func() {
		if f.t.Failed() && p != nil {
			f.t.Logf("the Propagation's status: %+v rollout %+v", p.Status, p.Status.Rollout)
		}
	}()
	poll.Until(f.t, "rollout "+what, func() bool {
		p = f.get()
		return p.Status.Rollout != nil && p.Status.ObservedGeneration == p.Generation && cond(p.Status.Rollout)
	})
	return p
}

// complete is a rollout of revision n that is Complete.
func complete(n int64) func(r *fleetv1alpha1.RolloutStatus) bool {
	return func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Revision == n && r.Phase == fleetv1alpha1.RolloutComplete
	}
}

// assigned returns the revision the rollout gives member, 0 for none.
func assigned(r *fleetv1alpha1.RolloutStatus, member string) int64 {
	for _, g := range r.Members {
		if slices.Contains(g.Names, member) {
			return g.Revision
		}
	}
	return 0
}

// imageIn returns the image of member's copy of web, "" if it has none.
func (f *testFleet) imageIn(member string) string {
	f.t.Helper()
	d := &appsv1.Deployment{}
	err := suite.MemberClients[f.members[member]].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, d)
	if apierrors.IsNotFound(err) {
		return ""
	} else if err != nil {
		f.t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// hasConfigMap reports whether member holds ConfigMap name of the team.
func (f *testFleet) hasConfigMap(member, name string) bool {
	f.t.Helper()
	err := suite.MemberClients[f.members[member]].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		return false
	} else if err != nil {
		f.t.Fatal(err)
	}
	return true
}

// maxOverlap returns the most changes to image that were between seen
// and available at once.
func maxOverlap(changes []fleettest.DeploymentChange, image string) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, c := range changes {
		if c.Image != image {
			continue
		}
		end := c.Available
		if end.IsZero() {
			end = time.Now()
		}
		edges = append(edges, edge{c.Seen, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// describe lists changes for a failure message.
func describe(changes []fleettest.DeploymentChange) string {
	var b strings.Builder
	for _, c := range changes {
		fmt.Fprintf(&b, "\n  %s %s seen %s available %s", c.Member, c.Image, c.Seen.Format("15:04:05.000"), c.Available.Format("15:04:05.000"))
	}
	return b.String()
}
