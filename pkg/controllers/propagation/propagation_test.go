package propagation_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The package's API servers: four hubs, of which each test takes one of
// its own (every manager on a hub reconciles every Propagation there), and
// three members, shared, each one's writes audited.
var suite = &fleettest.Suite{MemberCount: memberCount, HubCount: 4, Audit: true, Parallel: 4}

const memberCount = 3

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// userAgent is the Propagation controller's, on the hub and in members.
const userAgent = "fleet-manager/propagation"

// testFleet is one test's fleet: its own fleet namespace on a hub of its
// own, its own team namespace, whose objects it propagates, and its
// manager, which runs the Propagation controller with a journal.
type testFleet struct {
	t         *testing.T
	hub       *fleettest.Hub
	fleet     *fleettest.Fleet
	mgr       *fleet.Manager
	namespace string // the fleet's
	team      string // the propagated objects'
	stateDir  string // the journal's
	journal   *journal.Journal
	// owedRemovals are what the running manager publishes as owed.
	owedRemovals *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	health       *member.HealthOptions // how members are probed, if set
	// forgetAfter, if set, is how long a member that left is remembered.
	forgetAfter time.Duration
	// client, if set, builds the controller's hub client.
	client func(m *fleet.Manager) (client.Client, error)
	// watchSweep, if set, is how often members' copy watches are looked at.
	watchSweep time.Duration
	// driftRecheck, if set, is how long a clean drift check is trusted.
	driftRecheck time.Duration
	// tenancy is the controller's Options.Tenancy; "" is Off, so that a
	// test that does not speak of tenancy needs no TenancyPolicy.
	tenancy string
	// memberTransport, if set, wraps each member's HTTP transport.
	memberTransport func(member string, next http.RoundTripper) http.RoundTripper
}

// newFleet starts a fleet on a hub of the test's own.
func newFleet(t *testing.T) *testFleet {
	t.Helper()
	return newFleetWith(t, nil)
}

// newFleetWith starts a fleet on a hub of the test's own whose members
// are probed as health says, if set.
func newFleetWith(t *testing.T, health *member.HealthOptions) *testFleet {
	t.Helper()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.start(health)
	return f
}

// prepareFleet returns a fleet of namespace on h that propagates the
// objects of team, not started.
func prepareFleet(t *testing.T, h *fleettest.Hub, namespace, team string) *testFleet {
	t.Helper()
	suite.Need(t)
	f := &testFleet{t: t, hub: h, namespace: namespace, team: team, stateDir: t.TempDir()}
	fleettest.CreateNamespace(t, h.Client, f.namespace)
	fleettest.CreateNamespace(t, h.Client, f.team)
	t.Cleanup(f.removePropagations)
	return f
}

// removePropagations removes, once the fleet's managers stopped, the
// Propagations and ClusterPropagations the test left on its hub,
// finalizers and all: every manager on a hub reconciles every Propagation
// of it, and the next test's would reconcile these in every member too.
func (f *testFleet) removePropagations() {
	ctx := context.Background()
	clusterProps := &fleetv1alpha1.ClusterPropagationList{}
	if err := f.hub.Client.List(ctx, clusterProps); err != nil {
		f.t.Errorf("listing the ClusterPropagations: %v", err)
	}
	for i := range clusterProps.Items {
		cp := &clusterProps.Items[i]
		before := cp.DeepCopy()
		cp.Finalizers = nil
		if err := client.IgnoreNotFound(f.hub.Client.Patch(ctx, cp, client.MergeFrom(before))); err != nil {
			f.t.Errorf("releasing ClusterPropagation %s: %v", cp.Name, err)
		}
		if err := client.IgnoreNotFound(f.hub.Client.Delete(ctx, cp)); err != nil {
			f.t.Errorf("deleting ClusterPropagation %s: %v", cp.Name, err)
		}
	}
	list := &fleetv1alpha1.PropagationList{}
	if err := f.hub.Client.List(ctx, list); err != nil {
		f.t.Errorf("listing the Propagations: %v", err)
		return
	}
	for i := range list.Items {
		p := &list.Items[i]
		if len(p.Finalizers) > 0 {
			before := p.DeepCopy()
			p.Finalizers = nil
			if err := client.IgnoreNotFound(f.hub.Client.Patch(ctx, p, client.MergeFrom(before))); err != nil {
				f.t.Errorf("releasing Propagation %s/%s: %v", p.Namespace, p.Name, err)
			}
		}
		if err := client.IgnoreNotFound(f.hub.Client.Delete(ctx, p)); err != nil {
			f.t.Errorf("deleting Propagation %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// cachedHubClient is the hub client the Propagation controller of mgr
// gets by default: reads from mgr's cache, writes to the hub. Tests wrap
// it to record or refuse requests.
func cachedHubClient(mgr *fleet.Manager) (client.WithWatch, error) {
	return client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
}

// recordedFleet is a started fleet on a hub of its own, whose
// Propagation controller records every status write of Propagation
// "web", with memberCount members m0, m1, … labelled env=prod.
func recordedFleet(t *testing.T) (*testFleet, func() []statusWrite) {
	t.Helper()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	build, recorded := statusWrites(f.team, "web")
	f.client = build
	f.start(nil)
	for i := range memberCount {
		f.register(i, fmt.Sprintf("m%d", i), map[string]string{"env": "prod"})
	}
	return f, recorded
}

// start starts the fleet's manager on its journal; health, if set, sets
// how members are probed.
func (f *testFleet) start(health *member.HealthOptions) {
	f.t.Helper()
	f.health = health
	j, err := journal.Open(f.stateDir, journal.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.journal = j
	f.owedRemovals = propagation.NewOwedRemovals()
	f.fleet = suite.StartFleet(f.t, fleettest.FleetOptions{
		Hub:       f.hub,
		Namespace: f.namespace,
		Configure: func(o *fleet.Options) {
			if health != nil {
				o.MemberHealth = *health
			}
			if f.memberTransport != nil {
				o.ConfigureMember = func(name string, co *cluster.Options) {
					c := *co.HTTPClient
					c.Transport = f.memberTransport(name, c.Transport)
					co.HTTPClient = &c
				}
			}
		},
		Setup: func(m *fleet.Manager) error {
			opts := propagation.Options{Journal: j, ForgetAfter: f.forgetAfter, OwedRemovals: f.owedRemovals, WatchSweep: f.watchSweep, DriftRecheck: f.driftRecheck,
				Tenancy: cmp.Or(f.tenancy, fleetv1alpha1.TenancyOff)}
			if f.client != nil {
				c, err := f.client(m)
				if err != nil {
					return err
				}
				opts.Client = c
			}
			return propagation.Add(m, opts)
		},
	})
	f.mgr = f.fleet.Manager
	logs := f.fleet.Logs
	f.t.Cleanup(func() {
		if f.t.Failed() {
			lines := logs.Lines()
			f.t.Logf("the last of the %d lines the manager of %s logged:\n%s", len(lines), f.namespace, strings.Join(lines[max(0, len(lines)-300):], "\n"))
		}
	})
	f.t.Cleanup(f.stop)
}

// stop stops the fleet's manager, if it runs, and closes its journal.
func (f *testFleet) stop() {
	if f.fleet == nil {
		return
	}
	f.fleet.Stop(f.t)
	if err := f.journal.Close(); err != nil {
		f.t.Errorf("journal: %v", err)
	}
	f.fleet = nil
}

// testFleetLabel, on every member of a test's fleet and in its
// Propagations' selector, keeps the Propagations of earlier tests, which
// every manager on the shared hub reconciles, out of its members.
const testFleetLabel = "test.fleetkube.io/fleet"

// register registers member i under name with labels.
func (f *testFleet) register(i int, name string, labels map[string]string) {
	f.t.Helper()
	f.registerKubeconfig(name, suite.Kubeconfigs[i], labels)
}

func (f *testFleet) registerKubeconfig(name string, kubeconfig []byte, labels map[string]string) {
	f.t.Helper()
	f.fleet.Register(f.t, name, kubeconfig, map[string]string{testFleetLabel: f.namespace}, labels)
	poll.Until(f.t, "member "+name+" engaged", func() bool { return slices.Contains(f.mgr.ClusterNames(), name) })
}

// relabel replaces the labels of member name's Secret.
func (f *testFleet) relabel(name string, labels map[string]string) {
	f.t.Helper()
	s := &corev1.Secret{}
	if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.namespace, Name: name}, s); err != nil {
		f.t.Fatal(err)
	}
	s.Labels = map[string]string{registry.KubeconfigLabel: "true", testFleetLabel: f.namespace}
	for k, v := range labels {
		s.Labels[k] = v
	}
	if err := f.hub.Client.Update(f.t.Context(), s); err != nil {
		f.t.Fatal(err)
	}
}

func (f *testFleet) propagation(name string, edit func(p *fleetv1alpha1.Propagation)) *fleetv1alpha1.Propagation {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: name},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"env": "prod", testFleetLabel: f.namespace})},
		},
	}
	if edit != nil {
		edit(p)
	}
	if err := f.hub.Client.Create(f.t.Context(), p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// editPropagation applies edit to the current Propagation name.
func (f *testFleet) editPropagation(name string, edit func(p *fleetv1alpha1.Propagation)) {
	f.t.Helper()
	// The controller writes the Propagation too (its finalizer).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &fleetv1alpha1.Propagation{}
		if err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, p); err != nil {
			return err
		}
		edit(p)
		return f.hub.Client.Update(f.t.Context(), p)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// waitStatus waits until Propagation name's status satisfies cond.
func (f *testFleet) waitStatus(name, what string, cond func(p *fleetv1alpha1.Propagation) bool) *fleetv1alpha1.Propagation {
	f.t.Helper()
	p := &fleetv1alpha1.Propagation{}
	poll.Until(f.t, "Propagation "+name+": "+what, func() bool {
		err := f.hub.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, p)
		return err == nil && p.Status.ObservedGeneration == p.Generation && cond(p)
	})
	return p
}

// reconciledAgain makes every member reconcile Propagation name once more,
// by a change of spec that changes no copy, and waits until each selected
// member reported the new generation: a check that nothing happened
// counts from there.
func (f *testFleet) reconciledAgain(name string) {
	f.t.Helper()
	f.editPropagation(name, func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = !p.Spec.Adopt })
	f.waitStatus(name, "every member reported the new generation", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Selected > 0 && p.Status.Selected == p.Status.Applied+p.Status.Drifted+p.Status.Failed
	})
}

// gaugeValue is the value of the gauge family without labels on
// controller-runtime's registry, 0 if it is not there.
func gaugeValue(t *testing.T, family string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == family && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func ready(p *fleetv1alpha1.Propagation) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady)
}

func (f *testFleet) configMap(name string, data map[string]string, labels map[string]string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: name, Labels: labels}, Data: data}
	if err := f.hub.Client.Create(f.t.Context(), cm); err != nil {
		f.t.Fatal(err)
	}
	return cm
}

// copyIn returns member i's ConfigMap name in the team namespace, or nil.
func (f *testFleet) copyIn(i int, name string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	err := suite.MemberClients[i].Get(f.t.Context(), types.NamespacedName{Namespace: f.team, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return cm
}

func (f *testFleet) waitCopy(i int, name, what string, cond func(cm *corev1.ConfigMap) bool) {
	f.t.Helper()
	poll.Until(f.t, fmt.Sprintf("member %d: ConfigMap %s %s", i, name, what), func() bool { return cond(f.copyIn(i, name)) })
}

func exists(cm *corev1.ConfigMap) bool { return cm != nil }
func gone(cm *corev1.ConfigMap) bool   { return cm == nil }

func dataIs(key, value string) func(cm *corev1.ConfigMap) bool {
	return func(cm *corev1.ConfigMap) bool { return cm != nil && cm.Data[key] == value }
}

// memberWrites returns the writes the Propagation controller made to
// member i since.
func memberWrites(t *testing.T, i int, since time.Time) []controlplane.Write {
	t.Helper()
	return suite.Writes(t, suite.Members[i], userAgent, since)
}

// memberUser makes user a user of member i with rules, bound cluster-wide,
// or in namespace only when it is not "", and returns its kubeconfig.
func memberUser(t *testing.T, i int, user, namespace string, rules ...rbacv1.PolicyRule) []byte {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}
	var binding client.Object = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: ref, Subjects: subjects}
	if namespace != "" {
		binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user}, RoleRef: ref, Subjects: subjects}
	}
	for _, obj := range []client.Object{role, binding} {
		if err := suite.MemberClients[i].Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = suite.MemberClients[i].Delete(context.Background(), obj) })
	}
	u := suite.AddUser(t, suite.Members[i], envtest.User{Name: user})
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func TestPropagatesHubObjectsToSelectedMembers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.register(2, "lab", map[string]string{"env": "dev"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.configMap("other", map[string]string{"color": "red"}, map[string]string{"app": "other"})
	f.propagation("web", nil)

	p := f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool {
		return ready(p) && p.Status.Selected == 2 && p.Status.Applied == 2
	})
	if len(p.Status.Members) != 0 {
		t.Errorf("status.members = %+v, want none listed: every member is Applied", p.Status.Members)
	}
	statusWrites := suite.Writes(t, f.hub.Env, userAgent, p.CreationTimestamp.Add(-time.Second))
	statusWrites = slices.DeleteFunc(statusWrites, func(w controlplane.Write) bool { return w.Namespace != f.team || w.Resource != "propagations" })
	// Over the span of the writes themselves: the creation timestamp is
	// cut to the second.
	if n := len(statusWrites); n > 0 {
		// Two more: the sums that complete the picture of a generation
		// (every member converged, one failed) are written at once.
		if span := statusWrites[n-1].Time.Sub(statusWrites[0].Time); float64(n) > span.Seconds()+4 {
			t.Errorf("%d writes of the Propagation in %s, want at most one a second (and the finalizer's, and two completing the generation's picture): %v", n, span, statusWrites)
		}
	}
	if !slices.Contains(p.Finalizers, fleetv1alpha1.PropagationFinalizer) {
		t.Errorf("finalizers = %v, want %s", p.Finalizers, fleetv1alpha1.PropagationFinalizer)
	}
	for i := range 2 {
		cm := f.copyIn(i, "web")
		if cm == nil || cm.Data["color"] != "blue" {
			t.Fatalf("member %d: copy %+v, want color blue", i, cm)
		}
		if cm.Labels[fleetv1alpha1.PropagationLabel] != "web" || cm.Labels[fleetv1alpha1.FleetLabel] != f.namespace ||
			cm.Labels[fleetv1alpha1.FleetIDLabel] != f.fleetID() || cm.Labels["app"] != "web" {
			t.Errorf("member %d: copy labels %v", i, cm.Labels)
		}
		if got, want := cm.Annotations[fleetv1alpha1.SourceAnnotation], "v1/ConfigMap/"+f.team+"/web"; got != want {
			t.Errorf("member %d: source annotation %q, want %q", i, got, want)
		}
		if !strings.HasPrefix(cm.Annotations[fleetv1alpha1.ContentHashAnnotation], "sha256:") {
			t.Errorf("member %d: content hash annotation %q", i, cm.Annotations[fleetv1alpha1.ContentHashAnnotation])
		}
		if managers := managersOf(cm); !slices.Equal(managers, []string{fleetv1alpha1.FieldManager}) {
			t.Errorf("member %d: managers %v, want only %s", i, managers, fleetv1alpha1.FieldManager)
		}
		if f.copyIn(i, "other") != nil {
			t.Errorf("member %d holds ConfigMap other, which the selector does not match", i)
		}
	}
	if f.copyIn(2, "web") != nil {
		t.Error("member lab (env=dev) holds a copy")
	}

	// Update: the copies follow.
	hubCM := &corev1.ConfigMap{}
	if err := f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, hubCM); err != nil {
		t.Fatal(err)
	}
	hubCM.Data["color"] = "green"
	if err := f.hub.Client.Update(t.Context(), hubCM); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "updated", dataIs("color", "green"))
	f.waitCopy(1, "web", "updated", dataIs("color", "green"))

	// A second object matches; then the first stops matching.
	f.configMap("web-2", map[string]string{"n": "2"}, map[string]string{"app": "web"})
	f.waitCopy(0, "web-2", "created", exists)
	hubCM.Labels = map[string]string{"app": "gone"}
	if err := f.hub.Client.Update(t.Context(), hubCM); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "removed when its hub object stops matching", gone)
	f.waitCopy(1, "web", "removed when its hub object stops matching", gone)

	// Delete: the copies go.
	if err := f.hub.Client.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web-2"}}); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web-2", "removed when its hub object is deleted", gone)
	f.waitCopy(1, "web-2", "removed when its hub object is deleted", gone)
}

func managersOf(obj metav1.Object) []string {
	var names []string
	for _, e := range obj.GetManagedFields() {
		names = append(names, e.Manager)
	}
	return names
}

func TestDriftIsCorrectedOrReported(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "created", dataIs("color", "blue"))

	editCopy := func(value string) {
		t.Helper()
		// The manager may write the copy meanwhile (its revision label).
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := f.copyIn(0, "web")
			cm.Data["color"] = value
			cm.Data["added"] = "by hand" // not the manager's: never drift
			return suite.MemberClients[0].Update(t.Context(), cm)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Correct: the edit is undone.
	editCopy("red")
	f.waitCopy(0, "web", "corrected", dataIs("color", "blue"))
	if cm := f.copyIn(0, "web"); cm.Data["added"] != "by hand" {
		t.Errorf("correction removed a key the manager never applied: %v", cm.Data)
	}

	// Report: the edit stays, and the status names the field.
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Drift = fleetv1alpha1.DriftReport })
	f.waitStatus("web", "Ready under Report", ready)
	editCopy("yellow")
	p := f.waitStatus("web", "Drifted", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Drifted == 1 && meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationDrifted)
	})
	if ready(p) {
		t.Error("Ready is True while a member drifted")
	}
	if len(p.Status.Members) != 1 || p.Status.Members[0].Result != fleetv1alpha1.ResultDrifted ||
		!slices.Contains(p.Status.Members[0].DriftedFields, "ConfigMap web: .data.color") {
		t.Errorf("status.members = %+v, want east Drifted at ConfigMap web: .data.color", p.Status.Members)
	}
	f.reconciledAgain("web")
	if cm := f.copyIn(0, "web"); cm.Data["color"] != "yellow" {
		t.Errorf("under Report the copy was changed back: %v", cm.Data)
	}
	poll.Until(t, "a Drifted Warning Event on the Propagation", func() bool {
		events := &eventsv1.EventList{}
		if err := f.hub.Client.List(t.Context(), events, client.InNamespace(f.team)); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "web" && e.Reason == fleetv1alpha1.ReasonDrifted && strings.Contains(e.Note, ".data.color")
		})
	})

	// Back to Correct: corrected, and no longer Drifted.
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Drift = fleetv1alpha1.DriftCorrect })
	f.waitCopy(0, "web", "corrected", dataIs("color", "blue"))
	f.waitStatus("web", "Ready again", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Drifted == 0 })
}

// TestFieldOfAnotherManagerIsLeftAlone runs alone: it counts every
// fleet's writes in member 0's audit log.
func TestFieldOfAnotherManagerIsLeftAlone(t *testing.T) {
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
			},
		},
	}
	if err := f.hub.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}
	})
	f.waitStatus("web", "applied", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Applied == 1 })

	// An autoscaler scales the copy through the scale subresource.
	copyKey := types.NamespacedName{Namespace: f.team, Name: "web"}
	dep := &appsv1.Deployment{}
	if err := suite.MemberClients[0].Get(t.Context(), copyKey, dep); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{}
	if err := suite.MemberClients[0].SubResource("scale").Get(t.Context(), dep, scale); err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 5
	if err := suite.MemberClients[0].SubResource("scale").Update(t.Context(), dep, client.WithSubResourceBody(scale), client.FieldOwner("autoscaler")); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	f.reconciledAgain("web")
	if err := suite.MemberClients[0].Get(t.Context(), copyKey, dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 5 {
		t.Errorf("replicas = %d, want the autoscaler's 5", *dep.Spec.Replicas)
	}
	if writes := memberWrites(t, 0, since); len(writes) != 0 {
		t.Errorf("the manager wrote %v after the autoscaler scaled the copy, want nothing", writes)
	}
	p := f.waitStatus("web", "still applied", func(p *fleetv1alpha1.Propagation) bool { return p.Status.Applied == 1 })
	if p.Status.Drifted != 0 {
		t.Errorf("drifted = %d: a field the autoscaler owns counted as drift", p.Status.Drifted)
	}

	// A change of the hub object is applied, and still leaves replicas.
	if err := f.hub.Client.Get(t.Context(), copyKey, d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "registry.example/web:2"
	if err := f.hub.Client.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "image 2 in the member", func() bool {
		return suite.MemberClients[0].Get(t.Context(), copyKey, dep) == nil && dep.Spec.Template.Spec.Containers[0].Image == "registry.example/web:2"
	})
	if *dep.Spec.Replicas != 5 {
		t.Errorf("after a hub change, replicas = %d, want the autoscaler's 5", *dep.Spec.Replicas)
	}
}

func TestPreexistingObjectIsAdoptedOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	fleettest.CreateNamespace(t, suite.MemberClients[0], f.team)
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}, Data: map[string]string{"color": "mine"}}
	if err := suite.MemberClients[0].Create(t.Context(), mine, client.FieldOwner("platform-team")); err != nil {
		t.Fatal(err)
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	p := f.waitStatus("web", "AlreadyExists", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Failed == 1 && len(p.Status.Members) == 1 && p.Status.Members[0].Reason == fleetv1alpha1.ReasonAlreadyExists
	})
	if msg := p.Status.Members[0].Message; !strings.Contains(msg, "platform-team") {
		t.Errorf("message %q does not name the object's manager", msg)
	}
	if cm := f.copyIn(0, "web"); cm.Data["color"] != "mine" {
		t.Fatalf("the pre-existing object was overwritten: %v", cm.Data)
	}
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Adopt = true })
	f.waitCopy(0, "web", "adopted", dataIs("color", "blue"))
	f.waitStatus("web", "Ready after adoption", ready)
}

func TestDeselectedMemberLosesItsCopies(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	f.relabel("west", map[string]string{"env": "staging"})
	f.waitCopy(1, "web", "removed from the deselected member", gone)
	f.waitStatus("web", "Ready in 1 member", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Selected == 1 })
	if f.copyIn(0, "web") == nil {
		t.Error("the selected member lost its copy")
	}
}

func TestDeletedPropagationDeletesOrOrphansItsCopies(t *testing.T) {
	t.Parallel()
	for _, policy := range []fleetv1alpha1.DeletionPolicy{fleetv1alpha1.DeletionDelete, fleetv1alpha1.DeletionOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			f.register(0, "east", map[string]string{"env": "prod"})
			f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
			f.propagation("web", func(p *fleetv1alpha1.Propagation) { p.Spec.Deletion = policy })
			f.waitStatus("web", "Ready", ready)
			if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the Propagation gone", func() bool {
				return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
			})
			if policy == fleetv1alpha1.DeletionDelete {
				f.waitCopy(0, "web", "deleted", gone)
				return
			}
			f.waitCopy(0, "web", "orphaned", func(cm *corev1.ConfigMap) bool {
				if cm == nil {
					return false
				}
				_, labelled := cm.Labels[fleetv1alpha1.PropagationLabel]
				_, stamped := cm.Labels[fleetv1alpha1.FleetIDLabel]
				return !labelled && !stamped && cm.Annotations[fleetv1alpha1.SourceAnnotation] == ""
			})
			if cm := f.copyIn(0, "web"); cm.Data["color"] != "blue" || cm.Labels["app"] != "web" {
				t.Errorf("the orphaned object lost its content: %+v", cm)
			}
		})
	}
}

// newFleetBehindProxy returns a fleet whose members are east, behind a
// proxy the test takes down, and west, both probed often, east Disconnected
// after disconnectAfter, and whose Propagation web copies ConfigMap web to
// both.
func newFleetBehindProxy(t *testing.T, disconnectAfter time.Duration) (*testFleet, *controlplane.Proxy) {
	t.Helper()
	f := newFleetWith(t, &member.HealthOptions{Interval: 200 * time.Millisecond, RetryInterval: 100 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, DisconnectAfter: disconnectAfter})
	proxied, proxy := fleettest.ViaProxy(t, suite.Kubeconfigs[0])
	f.registerKubeconfig("east", proxied, map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready in 2 members", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	return f, proxy
}

// TestUnreachableMemberOwesTheDeletion deletes a Propagation while a
// member is Unhealthy (its work held, its caches kept) and while one is
// Disconnected (its caches torn down, its queued work dropped): neither
// holds the Propagation, and each removes its copy when it is back.
func TestUnreachableMemberOwesTheDeletion(t *testing.T) {
	t.Parallel()
	for _, state := range []fleetv1alpha1.MemberState{fleetv1alpha1.MemberStateUnhealthy, fleetv1alpha1.MemberStateDisconnected} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			disconnectAfter := time.Hour
			if state == fleetv1alpha1.MemberStateDisconnected {
				disconnectAfter = time.Second
			}
			f, proxy := newFleetBehindProxy(t, disconnectAfter)

			proxy.Down()
			poll.Until(t, "east "+string(state), func() bool { s, _ := f.mgr.MemberState("east"); return s == state })
			p := f.waitStatus("web", "east pending as MemberUnhealthy", func(p *fleetv1alpha1.Propagation) bool {
				return len(p.Status.Members) == 1 && p.Status.Members[0].Reason == fleetv1alpha1.ReasonMemberUnhealthy
			})
			if ready(p) {
				t.Error("Ready is True while a selected member is not Ready")
			}
			start := time.Now()
			if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the Propagation gone although east is down", func() bool {
				return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
			})
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("deleting the Propagation took %s", took)
			}
			f.waitCopy(1, "web", "deleted in the reachable member", gone)
			if f.copyIn(0, "web") == nil {
				t.Fatal("the copy in east is gone while east was down: the test proves nothing")
			}
			if err := proxy.Up(); err != nil {
				t.Fatal(err)
			}
			f.waitCopy(0, "web", "deleted once east is back", gone)
		})
	}
}

// TestOwedRemovalSurvivesARestart deletes a Propagation while a member is
// down, restarts the manager, and brings the member back: the journal
// still knows the owed removal, although no Propagation copies the kind
// any more, and the copy goes.
func TestOwedRemovalSurvivesARestart(t *testing.T) {
	t.Parallel()
	f, proxy := newFleetBehindProxy(t, time.Hour)

	proxy.Down()
	poll.Until(t, "east Unhealthy", func() bool { s, _ := f.mgr.MemberState("east"); return s == fleetv1alpha1.MemberStateUnhealthy })
	if err := f.hub.Client.Delete(t.Context(), &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Propagation gone although east is down", func() bool {
		return apierrors.IsNotFound(f.hub.Client.Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, &fleetv1alpha1.Propagation{}))
	})
	owed, err := f.journal.Owed("east")
	if err != nil || len(owed) != 1 || owed[0].Propagation != "web" {
		t.Fatalf("the journal's owed removals of east: %+v, %v; want web's", owed, err)
	}

	f.stop()
	f.start(f.health)
	poll.Until(t, "the restarted manager publishes that east owes web's removal", func() bool {
		owed, _ := f.owedRemovals.Get("east")
		return len(owed) == 1 && owed[0].Propagation == f.team+"/web"
	})
	if f.copyIn(0, "web") == nil {
		t.Fatal("the copy in east is gone while east was down: the test proves nothing")
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web", "deleted once east is back, after a restart", gone)
	poll.Until(t, "the owed removal settled in the journal", func() bool {
		owed, err := f.journal.Owed("east")
		copies, _ := f.journal.Copies("east")
		return err == nil && len(owed) == 0 && len(copies) == 0
	})
	poll.Until(t, "the manager publishes that east owes nothing", func() bool {
		owed, published := f.owedRemovals.Get("east")
		return published && len(owed) == 0
	})
}

// TestMemberThatLeftWhileStoppedIsForgotten: a member of the journal
// that is not registered when a manager starts is gone since then, unless
// the journal knows since when: its entries stay until it has been gone
// for ForgetAfter, then go; a registered member's stay.
func TestMemberThatLeftWhileStoppedIsForgotten(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 1 })
	f.stop()
	j, err := journal.Open(f.stateDir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gone := journal.Copy{Object: journal.Object{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: f.team, Name: "web"}, Propagation: "web"}
	longAgo := time.Now().Add(-time.Hour)
	if err := errors.Join(
		j.Record("gone", []journal.Copy{gone}), j.Owe("gone", journal.Owed{Namespace: f.team, Propagation: "old"}),
		j.Owe("long-gone", journal.Owed{Namespace: f.team, Propagation: "old"}), j.Depart("long-gone", longAgo),
		j.Close(),
	); err != nil {
		t.Fatal(err)
	}

	f.forgetAfter = 3 * time.Second
	f.start(nil)
	var departed map[string]time.Time
	poll.Until(t, "the journal forgot the member gone for an hour, and knows the other gone", func() bool {
		members, err := f.journal.Members()
		departed, _ = f.journal.Departed()
		return err == nil && slices.Equal(members, []string{"east", "gone"}) && !departed["gone"].IsZero()
	})
	started := time.Now()
	if owed, _ := f.journal.Owed("gone"); len(owed) != 1 {
		t.Errorf("the owed removal of the member that just went: %+v, want it kept", owed)
	}
	poll.Until(t, "the journal forgot the member once gone for ForgetAfter", func() bool {
		members, err := f.journal.Members()
		return err == nil && slices.Equal(members, []string{"east"})
	})
	if took := time.Since(started); took < 2*time.Second {
		t.Errorf("the member was forgotten %s after it was found gone, want ForgetAfter (3 s)", took)
	}
	if copies, _ := f.journal.Copies("east"); len(copies) != 1 {
		t.Errorf("east's copies in the journal: %+v, want its one copy kept", copies)
	}
	if departed, _ := f.journal.Departed(); len(departed) != 0 {
		t.Errorf("departures left in the journal: %v", departed)
	}
}

// TestLostJournalIsRebuiltFromTheMembers spoils the journal of a stopped
// manager: the restarted one moves it aside, records again every copy it
// finds in the members, and converges. It runs alone: it reads the
// process's fleet_propagation_journal_lost_timestamp_seconds.
func TestLostJournalIsRebuiltFromTheMembers(t *testing.T) {
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	for i := range 5 {
		f.configMap(fmt.Sprintf("web-%d", i), map[string]string{"i": fmt.Sprint(i)}, map[string]string{"app": "web"})
	}
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	f.stop()
	if err := os.WriteFile(filepath.Join(f.stateDir, journal.FileName), []byte("not a journal"), 0o600); err != nil {
		t.Fatal(err)
	}

	spoiled := time.Now().Truncate(time.Second)
	f.start(nil)
	if rec := f.journal.Recovered(); rec == nil || rec.MovedTo == "" {
		t.Fatalf("the spoiled journal was not moved aside: %+v", rec)
	}
	if lost := gaugeValue(t, "fleet_propagation_journal_lost_timestamp_seconds"); lost < float64(spoiled.Unix()) {
		t.Errorf("fleet_propagation_journal_lost_timestamp_seconds = %v, want the time of this start, after %v", lost, spoiled.Unix())
	}
	for _, member := range []string{"east", "west"} {
		poll.Until(t, "the journal knows the 5 copies in "+member+" again", func() bool {
			copies, err := f.journal.Copies(member)
			return err == nil && len(copies) == 5
		})
	}
	if err := f.hub.Client.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "web-0"}}); err != nil {
		t.Fatal(err)
	}
	f.waitCopy(0, "web-0", "removed after the hub object went", gone)
	poll.Until(t, "the journal forgot the removed copy", func() bool {
		copies, err := f.journal.Copies("east")
		return err == nil && len(copies) == 4
	})
}

func TestKindOneMemberLacksWaitsOnlyThere(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	crd := widgetCRD()
	for _, cfg := range []*envtest.Environment{f.hub.Env, suite.Members[0]} {
		if _, err := envtest.InstallCRDs(cfg.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd.DeepCopy()}}); err != nil {
			t.Fatal(err)
		}
	}
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.fleetkube.io/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": f.team, "name": "gear"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if err := f.hub.Client.Create(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: "test.fleetkube.io/v1", Kind: "Widget", Name: "gear"})
	})
	p := f.waitStatus("web", "west waits for the kind", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Failed == 0 && p.Status.Applied == 1 && len(p.Status.Members) == 1 &&
			p.Status.Members[0].Name == "west" && p.Status.Members[0].Reason == fleetv1alpha1.ReasonWaitingForKind
	})
	if !strings.Contains(p.Status.Members[0].Message, "Widget") {
		t.Errorf("message %q does not name the kind", p.Status.Members[0].Message)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(w.GroupVersionKind())
	if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "gear"}, got); err != nil {
		t.Errorf("east, which has the kind, lacks the copy: %v", err)
	}
	if f.copyIn(1, "web") == nil {
		t.Error("west lacks the ConfigMap: one failed kind blocked the member's other copies")
	}
}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.fleetkube.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "test.fleetkube.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// TestUnchangedFleetMakesNoWrites runs alone: it counts every fleet's
// writes in the members' audit logs.
func TestUnchangedFleetMakesNoWrites(t *testing.T) {
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.register(1, "west", map[string]string{"env": "prod"})
	for i := range 20 {
		f.configMap(fmt.Sprintf("web-%d", i), map[string]string{"i": fmt.Sprint(i)}, map[string]string{"app": "web"})
	}
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", func(p *fleetv1alpha1.Propagation) bool { return ready(p) && p.Status.Applied == 2 })
	// Under All, a copy applied before its revision was made is labelled
	// with it by one more write once it is: those writes come first.
	for i := range 2 {
		for j := range 20 {
			f.waitCopy(i, fmt.Sprintf("web-%d", j), "labelled with revision 1", func(cm *corev1.ConfigMap) bool {
				return cm.Labels[fleetv1alpha1.RevisionLabel] == "1"
			})
		}
	}
	since := time.Now()
	if writes := memberWrites(t, 0, time.Time{}); len(writes) < 20 {
		t.Fatalf("the audit log shows %d writes by the controller, want at least the 20 creates: it does not see them", len(writes))
	}

	// A resync: every member asked again about the Propagation.
	f.editPropagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Annotations = map[string]string{"touched": "yes"}
	})
	// A restart.
	f.stop()
	f.start(nil)
	poll.Until(t, "the restarted manager engaged both members", func() bool {
		return len(f.mgr.ClusterNames()) == 2
	})
	f.reconciledAgain("web")
	for i := range 2 {
		if writes := memberWrites(t, i, since); len(writes) != 0 {
			t.Errorf("member %d: %d writes after a resync and a restart of an unchanged fleet, want 0: %v", i, len(writes), writes)
		}
	}
}

func TestPropagationOnlyReadsItsOwnNamespace(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	other := suite.Name("other")
	fleettest.CreateNamespace(t, f.hub.Client, other)
	secret := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "web", Labels: map[string]string{"app": "web"}}, Data: map[string]string{"from": "other"}}
	if err := f.hub.Client.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	f.configMap("web", map[string]string{"from": "team"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	if cm := f.copyIn(0, "web"); cm.Data["from"] != "team" {
		t.Errorf("copy %v, want the team namespace's", cm.Data)
	}
	err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: other, Name: "web"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a Propagation of %s copied an object of %s: %v", f.team, other, err)
	}
}

func TestClusterScopedKindIsRefused(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.propagation("nodes", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = []fleetv1alpha1.ResourceSelector{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "view"}}
	})
	p := f.waitStatus("nodes", "refused", func(p *fleetv1alpha1.Propagation) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonClusterScoped
	})
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); !strings.Contains(c.Message, "ClusterRole") {
		t.Errorf("message %q does not name the kind", c.Message)
	}
}

// TestForbiddenWriteFailsOnlyThatMember registers a member whose user may
// read ConfigMaps but not write them.
func TestForbiddenWriteFailsOnlyThatMember(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	user := suite.Name("reader")
	kc := memberUser(t, 1, user, "",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
	)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.registerKubeconfig("west", kc, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	p := f.waitStatus("web", "west Forbidden", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Applied == 1 && p.Status.Failed == 1 && len(p.Status.Members) == 1 && p.Status.Members[0].Reason == fleetv1alpha1.ReasonForbidden
	})
	if msg := p.Status.Members[0].Message; !strings.Contains(msg, "patch configmaps") || !strings.Contains(msg, f.team) {
		t.Errorf("message %q does not name the verb, the resource and the namespace", msg)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady); c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonMembersFailed {
		t.Errorf("Ready = %+v, want False for MembersFailed", c)
	}
	if f.copyIn(0, "web") == nil {
		t.Error("east lacks its copy: west's refusal blocked it")
	}
}

// TestStopLeavesNothingBehind runs a Propagation to Ready, with the hub
// and copy caches it starts, then stops the manager: every goroutine the
// manager started must end. It runs alone: it reads the process's
// goroutines.
func TestStopLeavesNothingBehind(t *testing.T) {
	suite.Need(t)
	baseline := goleak.IgnoreCurrent()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"color": "blue"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitStatus("web", "Ready", ready)
	f.stop()
	// controller-runtime v0.25's cache of named namespaces waits, on a
	// goroutine of its own, for each informer it hands out, and for each
	// handler added to one, to sync, and never stops waiting: an informer
	// its cache stopped before it synced leaves two goroutines for the
	// process's life. A stop that races a new informer's first list makes
	// them; they are the library's, not the manager's.
	upstream := []goleak.Option{
		goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/cache.newMultiNamespaceInformer.func1"),
		goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/cache.newMultiNamespaceInformerHandlerRegistration.func1"),
	}
	var leaked error
	for range 100 {
		if leaked = goleak.Find(append(upstream, baseline, goleak.IgnoreTopFunction("time.Sleep"))...); leaked == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("goroutines left after the manager stopped: %v", leaked)
}
