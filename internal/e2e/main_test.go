package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The package's API servers: a hub and nine members. Each test runs a
// fleet of its own on the hub, and a fleet claims the Propagations it acts
// on (label fleet.fleetkube.io/fleet), so fleets share the hub and the
// member servers without touching each other's Propagations or copies.
var suite = &fleettest.Suite{MemberCount: 9, Parallel: 8}

var (
	// binary is the fleet-manager under test.
	binary string
	// hubKubeconfig is an admin kubeconfig file of the hub.
	hubKubeconfig string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The build comes before the API servers: ten of them starting
	// beside a -race link overrun their start timeout on 2 loaded cores.
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		if binary, err = fleetbinary.Build(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	suite.Setup = func(s *fleettest.Suite) error {
		kc, err := controlplane.AdminKubeconfig(s.Hub, "e2e")
		if err != nil {
			return err
		}
		hubKubeconfig = filepath.Join(dir, "hub.kubeconfig")
		return os.WriteFile(hubKubeconfig, kc, 0o600)
	}
	code := suite.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// runArgs are the arguments of `fleet-manager run` on the hub, in fleet
// namespace ns: no metrics or probe endpoints, members probed every
// second (no test takes a member down; fewer probes leave the loaded
// cores to the rollouts).
func runArgs(ns, stateDir string, more ...string) []string {
	return append([]string{"run", "--hub-kubeconfig=" + hubKubeconfig, "--namespace=" + ns, "--state-dir=" + stateDir,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--probe-interval=1s", "--probe-retry-interval=200ms", "--probe-timeout=2s", "--probe-failure-threshold=2"}, more...)
}

// startManager starts `fleet-manager run` of fleet ns, with more flags,
// as name. When the test ends it is stopped with SIGTERM (killed, if
// the test killed it already nothing more) and its log checked for
// panics and races; a failed test logs its last lines.
func startManager(t *testing.T, ns, name string, more ...string) *fleetbinary.Process {
	t.Helper()
	p, err := fleetbinary.Start(binary, filepath.Join(t.TempDir(), name+".log"), runArgs(ns, t.TempDir(), more...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Exited() {
			if err := p.Stop(); err != nil {
				t.Errorf("%s exited with %v", name, err)
			}
		}
		if err := p.Check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if t.Failed() {
			out, _ := p.Output()
			t.Logf("%s's last lines:\n%s", name, lines(out, 60))
		}
	})
	return p
}

// cli runs a fleet-manager command against the first hub and returns its
// output.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), binary, append(args, "--hub-kubeconfig="+hubKubeconfig)...).CombinedOutput()
	return string(out), err
}

// team is one test's fleet: a fleet namespace and a team namespace on
// the hub, and members registered once each, each on a different member
// API server and labelled with the team's label, which its Propagations
// select. The team namespace is the test's own, so that copies of tests
// sharing a member server never share an object.
type team struct {
	t       *testing.T
	hub     client.Client
	fleetNS string
	ns      string
	// members maps each member name to its API server's index.
	members map[string]int
	names   []string
}

// newTeam makes a team and starts its fleet's manager.
func newTeam(t *testing.T) *team {
	t.Helper()
	tm := newFleet(t)
	startManager(t, tm.fleetNS, "manager")
	return tm
}

// newFleet makes a team whose fleet's managers the test starts.
func newFleet(t *testing.T) *team {
	t.Helper()
	suite.Need(t)
	tm := &team{t: t, hub: suite.HubClient, fleetNS: suite.FleetNamespace(t), ns: suite.Name("team"), members: map[string]int{}}
	fleettest.CreateNamespace(t, tm.hub, tm.ns)
	return tm
}

// selector selects the team's members.
func (tm *team) selector() fleetv1alpha1.MemberSelector {
	return fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"e2e.fleetkube.io/team": tm.ns})}
}

// register registers member API server i as the team's member suffix,
// with labels, by its registration Secret, as docs/registration.md
// describes, and waits until it is Ready.
func (tm *team) register(i int, suffix string, labels map[string]string) string {
	tm.t.Helper()
	name := tm.ns + "-" + suffix
	l := map[string]string{registry.KubeconfigLabel: "true", "e2e.fleetkube.io/team": tm.ns}
	for k, v := range labels {
		l[k] = v
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tm.fleetNS, Name: name, Labels: l},
		Data:       map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[i]},
	}
	if err := tm.hub.Create(tm.t.Context(), secret); err != nil {
		tm.t.Fatal(err)
	}
	tm.members[name] = i
	tm.names = append(tm.names, name)
	slices.Sort(tm.names)
	tm.waitMember(name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady
	})
	return name
}

// waitMember waits until the MemberCluster name on the team's hub meets
// cond.
func (tm *team) waitMember(name, what string, cond func(*fleetv1alpha1.MemberCluster) bool) *fleetv1alpha1.MemberCluster {
	tm.t.Helper()
	mc := &fleetv1alpha1.MemberCluster{}
	pollUntil(tm.t, "MemberCluster "+name+" "+what, func() bool {
		return tm.hub.Get(tm.t.Context(), types.NamespacedName{Name: name}, mc) == nil && cond(mc)
	})
	return mc
}

// member is the admin client of member name's API server.
func (tm *team) member(name string) client.Client { return suite.MemberClients[tm.members[name]] }

// setConfigMap creates, or changes, the hub's ConfigMap name of the
// team, with data v=value.
func (tm *team) setConfigMap(name, value string) {
	tm.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := tm.hub.Get(tm.t.Context(), types.NamespacedName{Namespace: tm.ns, Name: name}, cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: name, Labels: map[string]string{"app": "web"}}, Data: map[string]string{"v": value}}
			return tm.hub.Create(tm.t.Context(), cm)
		} else if err != nil {
			return err
		}
		cm.Data = map[string]string{"v": value}
		return tm.hub.Update(tm.t.Context(), cm)
	})
	if err != nil {
		tm.t.Fatal(err)
	}
}

// propagation creates Propagation web of the team, labelled with its
// fleet, copying its ConfigMaps labelled app=web to its members, as edit
// makes it.
func (tm *team) propagation(edit func(*fleetv1alpha1.Propagation)) {
	tm.t.Helper()
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "web", Labels: tm.fleetLabel()},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})}},
			Members:   tm.selector(),
		},
	}
	if edit != nil {
		edit(p)
	}
	if err := tm.hub.Create(tm.t.Context(), p); err != nil {
		tm.t.Fatal(err)
	}
}

// fleetLabel labels a Propagation as the team's fleet's: on a hub of
// several fleets, the first to see an unlabelled one takes it.
func (tm *team) fleetLabel() map[string]string {
	return map[string]string{fleetv1alpha1.FleetLabel: tm.fleetNS}
}

// progressive is a Progressive strategy.
func progressive(r fleetv1alpha1.ProgressiveRollout) fleetv1alpha1.RolloutStrategy {
	return fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &r}
}

// edit changes Propagation web.
func (tm *team) edit(edit func(*fleetv1alpha1.Propagation)) {
	tm.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := tm.get()
		edit(p)
		return tm.hub.Update(tm.t.Context(), p)
	})
	if err != nil {
		tm.t.Fatal(err)
	}
}

// get returns Propagation web.
func (tm *team) get() *fleetv1alpha1.Propagation {
	tm.t.Helper()
	p := &fleetv1alpha1.Propagation{}
	if err := tm.hub.Get(tm.t.Context(), types.NamespacedName{Namespace: tm.ns, Name: "web"}, p); err != nil {
		tm.t.Fatal(err)
	}
	return p
}

// waitRollout waits until Propagation web's status is of its latest
// generation and its rollout meets cond, and returns it.
func (tm *team) waitRollout(what string, cond func(p *fleetv1alpha1.Propagation) bool) *fleetv1alpha1.Propagation {
	tm.t.Helper()
	var p *fleetv1alpha1.Propagation
	defer func() {
		if tm.t.Failed() && p != nil {
			tm.t.Logf("the Propagation's status: %+v; rollout %+v", p.Status, p.Status.Rollout)
		}
	}()
	pollUntil(tm.t, "rollout "+what, func() bool {
		p = tm.get()
		return p.Status.Rollout != nil && p.Status.ObservedGeneration == p.Generation && cond(p)
	})
	return p
}

// complete is a rollout of revision n, the newest, that is Complete.
func complete(n int64) func(p *fleetv1alpha1.Propagation) bool {
	return func(p *fleetv1alpha1.Propagation) bool {
		r := p.Status.Rollout
		return p.Status.Revision == n && r.Revision == n && r.Phase == fleetv1alpha1.RolloutComplete
	}
}

// given returns the revision the rollout record gives member, 0 for none.
func given(r *fleetv1alpha1.RolloutStatus, member string) int64 {
	if r == nil {
		return 0
	}
	for _, g := range r.Members {
		if slices.Contains(g.Names, member) {
			return g.Revision
		}
	}
	return 0
}

// copyOf returns member's copy of the team's ConfigMap name, nil if it
// has none.
func (tm *team) copyOf(member, name string) *corev1.ConfigMap {
	tm.t.Helper()
	cm := &corev1.ConfigMap{}
	err := tm.member(member).Get(tm.t.Context(), types.NamespacedName{Namespace: tm.ns, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		tm.t.Fatal(err)
	}
	return cm
}

// valueIn returns the v of member's copy of ConfigMap name, "" for none.
func (tm *team) valueIn(member, name string) string {
	tm.t.Helper()
	if cm := tm.copyOf(member, name); cm != nil {
		return cm.Data["v"]
	}
	return ""
}

// context_ is a context for cleanups, which run after the test's own
// context is cancelled.
func context_() context.Context { return context.Background() }

// quote logs the sentence of the docs the test checks.
func quote(t *testing.T) {
	t.Helper()
	for _, p := range promises {
		if p.test == t.Name() {
			t.Logf("checks: %q", p.sentence)
			return
		}
	}
	t.Fatalf("%s is in no promise of the table", t.Name())
}

// lines are the last n lines of s.
func lines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
