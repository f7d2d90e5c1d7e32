package propagation_test

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// laggingRevisions returns, for the Propagation controller of mgr, a hub
// client whose cache does not show a revision at its first read, as a
// cache behind the revision the plan just made.
func laggingRevisions(mgr *fleet.Manager) (client.Client, error) {
	cached, err := cachedHubClient(mgr)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	read := map[client.ObjectKey]bool{}
	return interceptor.NewClient(cached, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*fleetv1alpha1.PropagationRevision); ok {
				mu.Lock()
				first := !read[key]
				read[key] = true
				mu.Unlock()
				if first {
					return apierrors.NewNotFound(fleetv1alpha1.GroupVersion.WithResource("propagationrevisions").GroupResource(), key.Name)
				}
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	}), nil
}

// TestRevisionTheCacheDoesNotShowYetIsReadLive: a member given a revision
// its manager's cache does not show yet reads it from the hub itself and
// applies it; it does not fail RevisionInvalid, and the rollout does not
// stop.
func TestRevisionTheCacheDoesNotShowYetIsReadLive(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	f.client = laggingRevisions
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "1"}, map[string]string{"app": "web"})
	f.propagation("web", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive}
	})
	p := &fleetv1alpha1.Propagation{}
	poll.Until(t, "revision 1 Complete, or the member failed", func() bool {
		if err := f.hub.Client.Get(t.Context(), client.ObjectKey{Namespace: f.team, Name: "web"}, p); err != nil {
			return false
		}
		r := p.Status.Rollout
		return r != nil && r.Revision == 1 && (r.Phase == fleetv1alpha1.RolloutComplete || r.Phase == fleetv1alpha1.RolloutStopped || p.Status.Failed > 0)
	})
	if r := p.Status.Rollout; r.Phase != fleetv1alpha1.RolloutComplete {
		t.Errorf("rollout %s %s %q, members %+v; want Complete: the revision the cache did not show was judged missing", r.Phase, r.Reason, r.Message, p.Status.Members)
	}
	f.waitCopy(0, "web", "applied", dataIs("v", "1"))
}
