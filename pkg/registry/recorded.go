package registry

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// recordedIdentities is a pass of its own that Synced waits for.
const recordedIdentities = "recorded cluster identities"

// identityRecords feeds the registry the cluster identities that the
// fleet's MemberClusters record on the hub (Registry.Record), from the
// hub's cache, on every replica. A hub without the MemberCluster CRD
// records none.
type identityRecords struct {
	registry *Registry
	cache    cache.Cache
}

func (s identityRecords) Start(ctx context.Context) error {
	informer, err := s.cache.GetInformer(ctx, &fleetv1alpha1.MemberCluster{})
	if meta.IsNoMatchError(err) {
		s.registry.markSynced(recordedIdentities)
		return nil
	}
	if err != nil {
		return fmt.Errorf("watching MemberClusters: %w", err)
	}
	record := func(obj any) {
		if mc, ok := obj.(*fleetv1alpha1.MemberCluster); ok && mc.Labels[fleetv1alpha1.FleetLabel] == s.registry.fleetNamespace {
			s.registry.Record(mc.Name, mc.Status.ClusterID)
		}
	}
	registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if mc, ok := obj.(*fleetv1alpha1.MemberCluster); ok && mc.Labels[fleetv1alpha1.FleetLabel] == s.registry.fleetNamespace {
				s.registry.Record(mc.Name, "")
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching MemberClusters: %w", err)
	}
	defer func() { _ = informer.RemoveEventHandler(registration) }()
	if toolscache.WaitForCacheSync(ctx.Done(), registration.HasSynced) {
		s.registry.markSynced(recordedIdentities)
	}
	<-ctx.Done()
	return nil
}

func (identityRecords) NeedLeaderElection() bool { return false }
