package propagation_test

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// refusingRevisions returns, for the Propagation controller of mgr, a hub
// client that refuses to create PropagationRevisions while refuse is set.
func refusingRevisions(refuse *atomic.Bool) func(mgr *fleet.Manager) (client.Client, error) {
	return func(mgr *fleet.Manager) (client.Client, error) {
		cached, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(cached, interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*fleetv1alpha1.PropagationRevision); ok && refuse.Load() {
					return apierrors.NewForbidden(fleetv1alpha1.GroupVersion.WithResource("propagationrevisions").GroupResource(), obj.GetName(), nil)
				}
				return cl.Create(ctx, obj, opts...)
			},
		}), nil
	}
}

// TestCopyAppliedBeforeItsRevisionCarriesNoRevision: under strategy All,
// an unchanged copy is relabelled by a patch of its label alone when a
// revision is made; a copy then changed before its revision is made (the
// hub refuses it here) carries no revision label, not the earlier one.
func TestCopyAppliedBeforeItsRevisionCarriesNoRevision(t *testing.T) {
	suite.Need(t)
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	var refuse atomic.Bool
	f.client = refusingRevisions(&refuse)
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	labels := map[string]string{"app": "web"}
	f.configMap("web", map[string]string{"v": "1"}, labels)
	f.configMap("other", map[string]string{"v": "1"}, labels)
	f.propagation("web", nil)
	revisionIs := func(n string) func(cm *corev1.ConfigMap) bool {
		return func(cm *corev1.ConfigMap) bool {
			if cm == nil {
				return false
			}
			v, ok := cm.Labels[fleetv1alpha1.RevisionLabel]
			return ok == (n != "") && v == n
		}
	}
	f.waitCopy(0, "other", "labelled with revision 1", revisionIs("1"))
	// Revision 2 changes web alone: other is relabelled, by the patch.
	f.setData("web", "2")
	f.waitCopy(0, "web", "labelled with revision 2", revisionIs("2"))
	f.waitCopy(0, "other", "relabelled with revision 2", revisionIs("2"))

	refuse.Store(true)
	f.setData("other", "3")
	f.waitCopy(0, "other", "holds the change", dataIs("v", "3"))
	f.waitCopy(0, "other", "without the label of revision 2, its revision not made", revisionIs(""))
	if got := f.copyIn(0, "web").Labels[fleetv1alpha1.RevisionLabel]; got != "2" {
		t.Errorf("web, unchanged, carries revision %q, want 2", got)
	}
}
