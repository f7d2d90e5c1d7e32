package rollouttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// sample is what the test saw at once: each member's image, then the
// revision the hub's record gives each member.
type sample struct {
	at     time.Time
	images map[string]string
	given  map[string]int64
}

// TestShardedProgressiveRolloutHoldsTheGuard: three replicas share a fleet
// of nine members, and a Progressive Propagation of maxConcurrency 1 and
// minSuccessTime 1s rolls out its first revision, then a second, during
// which one replica is cut off from the hub (to the hub, as if SIGKILLed:
// its Lease is not released, and its members move once it expires).
// Sampled every 50 ms, a member's copy holds a revision only once the
// record gives it that revision, and the record never gives a revision to
// more than one member that is not done (its copy Available with it for
// minSuccessTime), whoever owns it.
func TestShardedProgressiveRolloutHoldsTheGuard(t *testing.T) {
	const minSuccess = time.Second
	team, ns := suite.Name("team"), suite.Name("sharded")
	fleettest.CreateNamespace(t, suite.HubClient, team)
	cutOff, hubProxy, err := controlplane.ProxyConfig(suite.Hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hubProxy.Close)

	start := func(name string, cfg *rest.Config) *fleettest.Fleet {
		j, err := journal.Open(t.TempDir(), journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.Close() })
		drains, owed := propagation.NewDrains(), propagation.NewOwedRemovals()
		return suite.StartFleet(t, fleettest.FleetOptions{
			Namespace: ns,
			Config:    cfg,
			Configure: func(o *fleet.Options) {
				fleettest.QuickHealth(o)
				o.Shard = &shard.Options{Name: name, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
			},
			Setup: func(m *fleet.Manager) error {
				if err := membercluster.Add(m, membercluster.Options{Drains: drains, OwedRemovals: owed}); err != nil {
					return err
				}
				return propagation.Add(m, propagation.Options{Journal: j, Drains: drains, OwedRemovals: owed})
			},
		})
	}
	first := start("replica-a", nil)
	start("replica-b", nil)
	victim := start("replica-c", cutOff)

	f := &testFleet{t: t, fleet: first, team: team, members: map[string]int{}}
	t.Cleanup(f.removePropagations)
	f.deployments = &fleettest.DeploymentController{Namespace: team, Delay: 200 * time.Millisecond}
	var names []string
	for i := range 9 {
		name := fmt.Sprintf("%s-m%d", ns, i)
		names = append(names, name)
		f.members[name] = i
		f.deployments.Add(name, suite.MemberClients[i])
		first.Register(t, name, suite.Kubeconfigs[i], map[string]string{"test.fleetkube.io/fleet": ns})
	}
	f.deployments.Start(t)
	poll.Until(t, "every member Ready on its owner", func() bool {
		for _, name := range names {
			mc := &fleetv1alpha1.MemberCluster{}
			if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Name: name}, mc); err != nil || mc.Status.State != fleetv1alpha1.MemberStateReady {
				return false
			}
		}
		return true
	})

	// The sampler reads every member's copy, then the record.
	var mu sync.Mutex
	var samples []sample
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			s := sample{images: map[string]string{}, given: map[string]int64{}}
			for _, name := range names {
				d := &appsv1.Deployment{}
				if err := suite.MemberClients[f.members[name]].Get(ctx, types.NamespacedName{Namespace: team, Name: "web"}, d); err == nil {
					s.images[name] = d.Spec.Template.Spec.Containers[0].Image
				}
			}
			p := &fleetv1alpha1.Propagation{}
			if err := suite.HubClient.Get(ctx, types.NamespacedName{Namespace: team, Name: "web"}, p); err == nil && p.Status.Rollout != nil {
				for _, name := range names {
					s.given[name] = assigned(p.Status.Rollout, name)
				}
				s.at = time.Now()
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	defer func() { stop(); wg.Wait() }()

	f.deployment("web:1")
	f.propagation(func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: minSuccess},
		}}
	}, deploymentKind)
	began := time.Now()
	f.waitRollout("of revision 1 complete", complete(1))
	t.Logf("revision 1 (the first) reached 9 members in %s", time.Since(began).Round(time.Millisecond))

	f.deployment("web:2")
	began = time.Now()
	f.waitRollout("of revision 2 given to 3 members", func(r *fleetv1alpha1.RolloutStatus) bool {
		return r.Revision == 2 && len(givenTo(r, 2)) >= 3
	})
	hubProxy.Down()
	cut := time.Now()
	f.waitRollout("of revision 2 complete", complete(2))
	t.Logf("revision 2 reached 9 members in %s, replica-c cut off %s in", time.Since(began).Round(time.Millisecond), cut.Sub(began).Round(time.Millisecond))
	if err := hubProxy.Up(); err != nil {
		t.Fatal(err)
	}
	victim.Stop(t)
	stop()
	wg.Wait()

	revisionOfImage := map[string]int64{"web:1": 1, "web:2": 2}
	changes := f.deployments.Changes()
	// done reports whether name's copy of image had been Available for
	// minSuccess at.
	done := func(name, image string, at time.Time) bool {
		for _, c := range changes {
			if c.Member == name && c.Image == image && !c.Available.IsZero() && !c.Available.Add(minSuccess).After(at) {
				return true
			}
		}
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	var problems []string
	for _, s := range samples {
		for name, image := range s.images {
			if n := revisionOfImage[image]; s.given[name] < n {
				problems = append(problems, fmt.Sprintf("%s: %s holds %s, which the record read after gives it no revision %d (it gives %d)",
					s.at.Format("15:04:05.000"), name, image, n, s.given[name]))
			}
		}
		for _, target := range []int64{1, 2} {
			image := fmt.Sprintf("web:%d", target)
			var between []string
			for _, name := range names {
				if s.given[name] == target && !done(name, image, s.at) {
					between = append(between, name)
				}
			}
			if len(between) > 1 {
				problems = append(problems, fmt.Sprintf("%s: the record gives revision %d to %v, not done (maxConcurrency 1, minSuccessTime %s)",
					s.at.Format("15:04:05.000"), target, between, minSuccess))
			}
		}
	}
	t.Logf("%d samples", len(samples))
	if len(problems) > 0 {
		t.Errorf("%d problems, the first:\n%s\nchanges:%s", len(problems), strings.Join(problems[:min(len(problems), 10)], "\n"), describe(changes))
	}
	if maxOverlap(changes, "web:2") > 1 || maxOverlap(changes, "web:1") > 1 {
		t.Errorf("more than one member between revisions at once:%s", describe(changes))
	}
}

// givenTo lists the members r gives revision n.
func givenTo(r *fleetv1alpha1.RolloutStatus, n int64) []string {
	for _, g := range r.Members {
		if g.Revision == n {
			return g.Names
		}
	}
	return nil
}
