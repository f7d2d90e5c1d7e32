package crashtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleetbinary"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const (
	memberCount = 3
	objects     = 100
	fleetNS     = "crash-fleet"
	team        = "team"
	// killPoints are the SIGKILLs of each phase: propagating, deleting.
	propagateKills, deleteKills = 12, 10
)

// The package's API servers: a hub and the members.
var suite = &fleettest.Suite{MemberCount: memberCount}

// binary is the fleet-manager under test.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The build runs while the API servers start.
	built := make(chan error, 1)
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		go func() {
			var err error
			binary, err = fleetbinary.Build(dir)
			built <- err
		}()
	}
	suite.Setup = func(*fleettest.Suite) error { return <-built }
	code := suite.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// manager is one fleet-manager process, writing its log to a file.
type manager struct{ *fleetbinary.Process }

func startManager(t *testing.T, hubKubeconfig, stateDir string) *manager {
	t.Helper()
	return startRun(t, "manager", "--hub-kubeconfig="+hubKubeconfig, "--namespace="+fleetNS, "--state-dir="+stateDir,
		"--probe-interval=300ms", "--probe-retry-interval=100ms", "--probe-timeout=1s", "--probe-failure-threshold=2")
}

// startRun starts fleet-manager run with args, without metrics or probe
// endpoints, logging to a file named after name.
func startRun(t *testing.T, name string, args ...string) *manager {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	_ = log.Close()
	p, err := fleetbinary.Start(binary, log.Name(), append([]string{"run", "--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &manager{p}
}

// kill SIGKILLs the process and checks what it wrote before.
func (m *manager) kill(t *testing.T) {
	t.Helper()
	m.Kill()
	m.check(t)
}

// stop ends the process as Kubernetes would, with SIGTERM.
func (m *manager) stop(t *testing.T) {
	t.Helper()
	if err := m.Stop(); err != nil {
		t.Errorf("the manager exited with %v:\n%s", err, m.output(t))
	}
	m.check(t)
}

func (m *manager) check(t *testing.T) {
	t.Helper()
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// output is what the process wrote so far.
func (m *manager) output(t *testing.T) string {
	t.Helper()
	out, err := m.Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKilledManagerConverges SIGKILLs the manager at seeded random points
// while it propagates 100 objects to 3 members, as the hub changes and
// deletes some, and while it deletes them all, with one member down for
// part of it. While deleting, each start takes one of two state
// directories at random, as the two replicas of the default install do,
// and the member that was down is brought back under a manager on a third,
// new one: the removals it owes are known from the hub alone. After each
// phase a manager that runs to the end makes every wanted copy exist with
// the hub's data and every unwanted one go, deletes nothing else, and
// leaves no orphan. CRASH_SEED replays a run.
func TestKilledManagerConverges(t *testing.T) {
	suite.Need(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (CRASH_SEED=%d replays this run)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	ctx := t.Context()

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	hubKubeconfig := filepath.Join(dir, "hub.kubeconfig")
	kc := suite.AdminKubeconfig(t, suite.Hub, "crashtest")
	if err := os.WriteFile(hubKubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{fleetNS, team} {
		if err := suite.HubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first member is reached through a proxy that the test takes
	// down and brings up.
	proxied, p, err := controlplane.ViaProxy(suite.Kubeconfigs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	proxy := &memberProxy{Proxy: p}
	for i := range memberCount {
		kc := suite.Kubeconfigs[i]
		if i == 0 {
			kc = proxied
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: memberName(i), Labels: map[string]string{registry.KubeconfigLabel: "true"}},
			Data:       map[string][]byte{registry.KubeconfigKey: kc},
		}
		if err := suite.HubClient.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		// A bystander in each member: not a copy, never to be touched.
		if err := suite.MemberClients[i].Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}); err != nil {
			t.Fatal(err)
		}
		if err := suite.MemberClients[i].Create(ctx, bystander()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range objects {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: fmt.Sprintf("object-%03d", i), Labels: map[string]string{"app": "crash"}},
			Data:       map[string]string{"i": strconv.Itoa(i)},
		}
		if err := suite.HubClient.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	prop := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "crash"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "crash"})}},
		},
	}
	if err := suite.HubClient.Create(ctx, prop); err != nil {
		t.Fatal(err)
	}

	// Propagating, killed at random points, the first member down at
	// some of them; before each start the hub changes ten objects and
	// deletes one.
	for k := range propagateKills {
		down := rnd.IntN(3) == 0
		proxy.set(t, down)
		changeHub(t, rnd, k)
		after := killPoint(rnd)
		m := startManager(t, hubKubeconfig, stateDir)
		time.Sleep(after)
		m.kill(t)
		t.Logf("propagating: kill %d after %s (member-0 down: %v); copies: %v", k, after.Round(time.Millisecond), down, copies(t))
	}
	proxy.set(t, false)
	m := startManager(t, hubKubeconfig, stateDir)
	await(t, m, "every member holds exactly the hub's objects", func() bool {
		return membersMatchHub(t)
	})
	m.stop(t)

	// Deleting, killed at random points, the first member down, each
	// start on one of two replicas' state directories.
	proxy.set(t, true)
	if err := suite.HubClient.Delete(ctx, prop); err != nil {
		t.Fatal(err)
	}
	replicas := []string{stateDir, filepath.Join(dir, "state-2")}
	for k := range deleteKills {
		after := killPoint(rnd)
		replica := rnd.IntN(len(replicas))
		m := startManager(t, hubKubeconfig, replicas[replica])
		time.Sleep(after)
		m.kill(t)
		t.Logf("deleting: kill %d after %s on replica %d; copies: %v; Propagation gone: %v", k, after.Round(time.Millisecond), replica, copies(t), propagationGone(t))
	}
	m = startManager(t, hubKubeconfig, replicas[rnd.IntN(len(replicas))])
	await(t, m, "the Propagation released with member-0 down", func() bool { return propagationGone(t) })
	if n := copies(t); n[0] != objects-propagateKills {
		t.Fatalf("member-0's copies went while it was down (%v): the test proves nothing", n)
	}
	m.kill(t)
	// A replica whose journal never knew member-0's copies.
	m = startManager(t, hubKubeconfig, filepath.Join(dir, "state-new"))
	proxy.set(t, false)
	await(t, m, "no copy left in any member", func() bool {
		n := copies(t)
		return n[0] == 0 && n[1] == 0 && n[2] == 0
	})
	await(t, m, "nothing owed left in the hub's mirror", func() bool { return mirrored(t) == 0 })
	m.stop(t)
	for i := range memberCount {
		if err := suite.MemberClients[i].Get(ctx, client.ObjectKeyFromObject(bystander()), &corev1.ConfigMap{}); err != nil {
			t.Errorf("%s: the bystander ConfigMap: %v", memberName(i), err)
		}
	}
}

func memberName(i int) string { return fmt.Sprintf("member-%d", i) }

// killPoint is how long a manager runs before it is killed: from before
// it has engaged anything to well after it has applied everything.
func killPoint(rnd *rand.Rand) time.Duration {
	return 200*time.Millisecond + time.Duration(rnd.Int64N(int64(3*time.Second)))
}

// changeHub changes the data of ten random hub objects and deletes
// object k.
func changeHub(t *testing.T, rnd *rand.Rand, k int) {
	t.Helper()
	for range 10 {
		cm := &corev1.ConfigMap{}
		key := types.NamespacedName{Namespace: team, Name: fmt.Sprintf("object-%03d", propagateKills+rnd.IntN(objects-propagateKills))}
		if err := suite.HubClient.Get(t.Context(), key, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["changed"] = strconv.Itoa(k)
		if err := suite.HubClient.Update(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	gone := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: fmt.Sprintf("object-%03d", k)}}
	if err := suite.HubClient.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
}

// membersMatchHub reports whether every member holds a copy of each hub
// object, with its data, and no other copy.
func membersMatchHub(t *testing.T) bool {
	t.Helper()
	hubList := &corev1.ConfigMapList{}
	if err := suite.HubClient.List(t.Context(), hubList, client.InNamespace(team), client.MatchingLabels{"app": "crash"}); err != nil {
		t.Fatal(err)
	}
	for _, cl := range suite.MemberClients {
		list := &corev1.ConfigMapList{}
		if err := cl.List(t.Context(), list, client.InNamespace(team), client.MatchingLabels{fleetv1alpha1.FleetLabel: fleetNS}); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != len(hubList.Items) {
			return false
		}
		data := map[string]map[string]string{}
		for _, cm := range list.Items {
			data[cm.Name] = cm.Data
		}
		for _, cm := range hubList.Items {
			if !maps.Equal(data[cm.Name], cm.Data) {
				return false
			}
		}
	}
	return true
}

func bystander() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "bystander"}, Data: map[string]string{"mine": "yes"}}
}

// copies counts the copies of the fleet in each member.
func copies(t *testing.T) []int {
	t.Helper()
	n := make([]int, memberCount)
	for i, cl := range suite.MemberClients {
		list := &corev1.ConfigMapList{}
		if err := cl.List(t.Context(), list, client.InNamespace(team), client.MatchingLabels{fleetv1alpha1.FleetLabel: fleetNS}); err != nil {
			t.Fatal(err)
		}
		n[i] = len(list.Items)
	}
	return n
}

// mirrored counts the ConfigMaps of the fleet namespace that mirror owed
// removals.
func mirrored(t *testing.T) int {
	t.Helper()
	n := 0
	for _, name := range propagation.OwedRemovalsConfigMaps() {
		err := suite.HubClient.Get(t.Context(), types.NamespacedName{Namespace: fleetNS, Name: name}, &corev1.ConfigMap{})
		if err == nil {
			n++
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	return n
}

func propagationGone(t *testing.T) bool {
	err := suite.HubClient.Get(t.Context(), types.NamespacedName{Namespace: team, Name: "crash"}, &fleetv1alpha1.Propagation{})
	return apierrors.IsNotFound(err)
}

// memberProxy is the proxy in front of the first member.
type memberProxy struct {
	*controlplane.Proxy
	down bool
}

func (p *memberProxy) set(t *testing.T, down bool) {
	t.Helper()
	switch {
	case down == p.down:
	case down:
		p.Down()
	default:
		if err := p.Up(); err != nil {
			t.Fatal(err)
		}
	}
	p.down = down
}

// await waits up to two minutes for m to start and for cond, and shows
// m's output when they do not come.
func await(t *testing.T, m *manager, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for !strings.Contains(m.output(t), "Starting fleet manager") || !cond() {
		select {
		case <-ctx.Done():
			m.kill(t)
			t.Fatalf("not within 2m: %s; copies %v; the manager wrote:\n%s", what, copies(t), m.output(t))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
