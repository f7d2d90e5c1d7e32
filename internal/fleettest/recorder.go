package fleettest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// Recorder is a reconciler that remembers every request.
type Recorder struct {
	mu   sync.Mutex
	seen []fleet.Request
}

// Reconcile records req.
func (r *Recorder) Reconcile(_ context.Context, req fleet.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req)
	return reconcile.Result{}, nil
}

// Has reports whether req was reconciled.
func (r *Recorder) Has(req fleet.Request) bool { return r.Times(req) > 0 }

// Times returns how many times req was reconciled.
func (r *Recorder) Times(req fleet.Request) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, seen := range r.seen {
		if seen == req {
			n++
		}
	}
	return n
}

// Count returns how many requests were reconciled.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// WaitFor waits until every one of reqs was reconciled.
func (r *Recorder) WaitFor(t testing.TB, reqs ...fleet.Request) {
	t.Helper()
	for _, req := range reqs {
		poll.Until(t, "reconcile of "+req.String(), func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return slices.Contains(r.seen, req)
		})
	}
}

// Request is the request for object namespace/name of cluster
// clusterName ("" for the hub).
func Request(clusterName, namespace, name string) fleet.Request {
	return fleet.Request{ClusterName: clusterName, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}
