package propagation_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// TestCopyCachesAreWarmedBeforeTheFirstRuns holds every read of a new
// Propagation's revisions, and so every member run of it (a run reads the
// newest revision before it lists a copy) and every status sum, until
// the member runs the informers of the kinds its spec copies in its
// namespace: the hub request starts them ahead of the runs. It starts
// those and no other: none of a kind the spec does not name, before the
// runs or after.
func TestCopyCachesAreWarmedBeforeTheFirstRuns(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	const member = "warmed"
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	// The ConfigMap, and a kind whose selector selects nothing.
	const specKinds = 2
	hold := &listHold{want: specKinds, watches: func() int64 { return int64(gathered(member, "fleet_propagation_member_watches")) }}
	f.client = func(mgr *fleet.Manager) (client.Client, error) {
		cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
		hold.Client = cl
		return hold, err
	}
	f.start(nil)
	f.register(0, member, map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{
			APIVersion: "v1", Kind: "ServiceAccount", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "none"}),
		})
	})
	f.waitStatus("web", "applied in the member", func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.ObservedGeneration == p.Generation && p.Status.Applied == 1
	})
	if hold.timedOut.Load() {
		t.Errorf("no informer of the kinds the Propagation copies was started in member %s within %s while its runs were held: the copy caches were not warmed", member, listHoldTimeout)
	}
	if got := hold.seen.Load(); got != specKinds {
		t.Errorf("member %s ran %d informers as the hold ended, want %d: the kinds its spec copies", member, got, specKinds)
	}
	if got := memberWatchStarts(t, member); got != specKinds {
		t.Errorf("member %s started %d informers, want %d: the kinds its spec copies, each once", member, got, specKinds)
	}
}

// listHold is a hub client that lists PropagationRevisions only once
// watches counts want informers, or after listHoldTimeout from the first
// such list (timedOut then set); seen is their count as the hold ended.
type listHold struct {
	client.Client
	want    int64
	watches func() int64

	started  atomic.Int64 // unix nanoseconds of the first list held
	released atomic.Bool
	timedOut atomic.Bool
	seen     atomic.Int64
}

const listHoldTimeout = 15 * time.Second

func (c *listHold) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*fleetv1alpha1.PropagationRevisionList); ok && !c.released.Load() {
		c.started.CompareAndSwap(0, time.Now().UnixNano())
		deadline := time.Unix(0, c.started.Load()).Add(listHoldTimeout)
		for !c.released.Load() {
			if n := c.watches(); n >= c.want {
				c.seen.CompareAndSwap(0, n)
				c.released.Store(true)
				break
			}
			if time.Now().After(deadline) {
				c.timedOut.Store(true)
				c.released.Store(true)
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return c.Client.List(ctx, list, opts...)
}

// gathered is member's series of family in the metrics registry, 0 if
// there is none or the registry cannot be read.
func gathered(member, family string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range families {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == member {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
