package crashtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const (
	rolloutFleetNS = "rollout-fleet"
	rolloutTeam    = "rollout-team"
	rolloutKills   = 6
)

// TestKilledManagerGoesOnWithTheRollout SIGKILLs the manager at seeded
// random points while a Progressive rollout of maxConcurrency 1 takes a
// new image to three members, each of whose Deployment becomes available
// a second after it changes. The rollout completes where it was: no two
// members were ever between revisions at once, and each member's
// Deployment changed once, never rolled again.
func TestKilledManagerGoesOnWithTheRollout(t *testing.T) {
	suite.Need(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	ctx := t.Context()

	dir := t.TempDir()
	hubKubeconfig := filepath.Join(dir, "hub.kubeconfig")
	if err := os.WriteFile(hubKubeconfig, suite.AdminKubeconfig(t, suite.Hub, "crashtest-rollout"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{rolloutFleetNS, rolloutTeam} {
		if err := suite.HubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	deployments := &fleettest.DeploymentController{Namespace: rolloutTeam, Delay: time.Second}
	for i := range memberCount {
		name := fmt.Sprintf("rollout-%d", i)
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: rolloutFleetNS, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true", "rollout-test": "yes"}},
			Data:       map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[i]},
		}
		if err := suite.HubClient.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		deployments.Add(name, suite.MemberClients[i])
	}
	deployments.Start(t)
	setImage(t, "web:1")
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: rolloutTeam, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"rollout-test": "yes"})},
			Strategy: fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
				MaxConcurrency: ptr.To(intstr.FromInt32(1)),
			}},
		},
	}
	if err := suite.HubClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "state")
	m := startRollout(t, hubKubeconfig, stateDir)
	await(t, m, "revision 1 rolled out", func() bool { return rolledOut(t, 1) })
	m.stop(t)

	setImage(t, "web:2")
	for k := range rolloutKills {
		after := 500*time.Millisecond + time.Duration(rnd.Int64N(int64(3*time.Second)))
		m := startRollout(t, hubKubeconfig, stateDir)
		time.Sleep(after)
		m.kill(t)
		t.Logf("kill %d after %s", k, after.Round(time.Millisecond))
	}
	m = startRollout(t, hubKubeconfig, stateDir)
	await(t, m, "revision 2 rolled out", func() bool { return rolledOut(t, 2) })
	m.stop(t)

	changes := slices.DeleteFunc(deployments.Changes(), func(c fleettest.DeploymentChange) bool { return c.Image != "web:2" })
	if len(changes) != memberCount {
		t.Errorf("%d changes to web:2 in %d members: a member was rolled again, or not at all: %+v", len(changes), memberCount, changes)
	}
	slices.SortFunc(changes, func(a, b fleettest.DeploymentChange) int { return a.Seen.Compare(b.Seen) })
	for i := 1; i < len(changes); i++ {
		if changes[i].Seen.Before(changes[i-1].Available) {
			t.Errorf("%s changed at %s, before %s was available at %s: more than maxConcurrency 1 at once",
				changes[i].Member, changes[i].Seen.Format("15:04:05.000"), changes[i-1].Member, changes[i-1].Available.Format("15:04:05.000"))
		}
	}
	for i := range memberCount {
		d := &appsv1.Deployment{}
		if err := suite.MemberClients[i].Get(ctx, client.ObjectKey{Namespace: rolloutTeam, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		if d.Generation != 2 {
			t.Errorf("rollout-%d's Deployment is at generation %d, want 2: changed once by each revision", i, d.Generation)
		}
	}
}

// startRollout starts the manager of the rollout's fleet.
func startRollout(t *testing.T, hubKubeconfig, stateDir string) *manager {
	t.Helper()
	return startRun(t, "rollout", "--hub-kubeconfig="+hubKubeconfig, "--namespace="+rolloutFleetNS, "--state-dir="+stateDir,
		"--probe-interval=300ms", "--probe-retry-interval=100ms", "--probe-timeout=1s", "--probe-failure-threshold=2")
}

// setImage creates, or changes to image, the hub's Deployment web.
func setImage(t *testing.T, image string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: rolloutTeam, Name: "web"}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := suite.HubClient.Get(t.Context(), client.ObjectKeyFromObject(d), d)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		d.Spec = appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		}
		if err != nil {
			return suite.HubClient.Create(t.Context(), d)
		}
		return suite.HubClient.Update(t.Context(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rolledOut reports whether revision n of Propagation web is rolled out.
func rolledOut(t *testing.T, n int64) bool {
	t.Helper()
	p := &fleetv1alpha1.Propagation{}
	if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Namespace: rolloutTeam, Name: "web"}, p); err != nil {
		t.Fatal(err)
	}
	r := p.Status.Rollout
	return r != nil && r.Revision == n && r.Phase == fleetv1alpha1.RolloutComplete && p.Status.Revision == n
}
