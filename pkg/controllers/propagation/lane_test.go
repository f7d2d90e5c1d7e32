package propagation

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// A status request the controller asks for, as a member's result
// changes, is handed out before the member work already queued, of every
// member: the fair queue takes one request of each cluster in turn, and
// at the members' priority the status would wait for one of each. Then
// tried again after a wait, it keeps its rank.
func TestStatusRequestGoesBeforeQueuedMemberWork(t *testing.T) {
	t.Parallel()
	q := fairqueue.New[fleet.Request]("", func(r fleet.Request) string { return r.ClusterName }, fairqueue.Options[fleet.Request]{})
	defer q.ShutDown()
	var cq controllerQueue
	cq.set(q)
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	for i := range 100 {
		for _, name := range []string{"web", "api"} {
			cq.add(fleet.Request{ClusterName: fmt.Sprintf("member-%03d", i), NamespacedName: types.NamespacedName{Namespace: "team", Name: name}})
		}
	}
	status := fleet.Request{ClusterName: registry.HubName, NamespacedName: key}
	cq.add(status)
	got, priority, _ := q.GetWithPriority()
	if got != status {
		t.Fatalf("handed out %v first, not the status request %v: it waits behind member work", got, status)
	}
	if priority != statusPriority {
		t.Errorf("the status request came out at priority %d, want %d", priority, statusPriority)
	}
	q.Done(got)
	cq.addAfter(status, 0)
	if got, _, _ := q.GetWithPriority(); got != status {
		t.Fatalf("handed out %v first, not the status request asked for again", got)
	}
}
