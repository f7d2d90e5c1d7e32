package propagation

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestStatusFloodDoesNotStarveMemberWork: 1,000 Propagations'
// status requests queued at once, with the per-cluster cap the
// controller runs with (a quarter of 16 workers), leave the other
// workers to member work: "many Propagations' statuses due at once |
// they hold at most a quarter of the workers".
func TestStatusFloodDoesNotStarveMemberWork(t *testing.T) {
	t.Parallel()
	q := fairqueue.New[fleet.Request]("", func(r fleet.Request) string { return r.ClusterName }, fairqueue.Options[fleet.Request]{MaxInFlightPerCluster: workersPerMember(16)})
	defer q.ShutDown()
	var cq controllerQueue
	cq.set(q)
	for i := range 10 {
		cq.add(fleet.Request{ClusterName: fmt.Sprintf("member-%d", i), NamespacedName: types.NamespacedName{Namespace: "team", Name: "web"}})
	}
	for i := range 1000 {
		cq.add(fleet.Request{ClusterName: registry.HubName, NamespacedName: types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("p-%04d", i)}})
	}
	hub, members := 0, 0
	// The cap and the 10 members: every item a worker may take now.
	for range workersPerMember(16) + 10 {
		got, _, _ := q.GetWithPriority()
		if got.ClusterName == registry.HubName {
			hub++
		} else {
			members++
		}
	}
	if hub > workersPerMember(16) || members < 10 {
		t.Errorf("16 workers took %d status requests and %d member requests: want at most %d status, every one of the 10 members", hub, members, workersPerMember(16))
	}
}
