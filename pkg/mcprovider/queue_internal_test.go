package mcprovider

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/fairqueue"
)

// The end of a member's engagement, handled after the member's next
// engagement has begun (its context's AfterFunc ran late), does not drop
// the requests of the next one; the end of the next one drops them.
func TestEndOfAnEngagementKeepsALaterOnesRequests(t *testing.T) {
	q := fairqueue.New("", clusterOf, fairqueue.Options[mcreconcile.Request]{})
	defer q.ShutDown()
	p := &Provider{begun: map[string]context.Context{}, queues: []*fairqueue.Queue[mcreconcile.Request]{q}}
	first, cancelFirst := context.WithCancel(t.Context())
	defer cancelFirst()
	second, cancelSecond := context.WithCancel(t.Context())
	defer cancelSecond()

	p.begin(first, "east")
	p.begin(second, "east")
	q.Add(mcreconcile.Request{ClusterName: "east", Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "cm"}}})
	p.end(first, "east")
	if n := q.Len(); n != 1 {
		t.Fatalf("after the first engagement's late end: %d requests queued, want the second's 1", n)
	}
	p.end(second, "east")
	if n := q.Len(); n != 0 {
		t.Fatalf("after the second engagement's end: %d requests queued, want 0", n)
	}
}
