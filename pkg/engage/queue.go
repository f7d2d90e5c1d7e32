package engage

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// clusterQueue is one cluster's write-only view of a fleet controller's
// queue, handed to controller-runtime's handlers. Every request a handler
// adds is tagged with the cluster's name. It is a priority queue, so the
// stock handlers rank initial-list events low; on a queue without
// priorities they are plain adds. The view hands nothing out and cannot
// shut the shared queue down.
type clusterQueue struct {
	clusterName string
	queue       Queue
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*clusterQueue)(nil)

func (q *clusterQueue) tag(r reconcile.Request) Request {
	return Request{ClusterName: q.clusterName, NamespacedName: r.NamespacedName}
}

func (q *clusterQueue) Add(r reconcile.Request) { q.queue.Add(q.tag(r)) }

func (q *clusterQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.queue.AddAfter(q.tag(r), d)
}

func (q *clusterQueue) AddRateLimited(r reconcile.Request) { q.queue.AddRateLimited(q.tag(r)) }

func (q *clusterQueue) AddWithOpts(o priorityqueue.AddOpts, rs ...reconcile.Request) {
	tagged := make([]Request, len(rs))
	for i, r := range rs {
		tagged[i] = q.tag(r)
	}
	addWithOpts(q.queue, o, tagged...)
}

// addWithOpts adds rs to q with o: as they are to a priority queue, and as
// a rate-limited, delayed or plain add to another queue.
func addWithOpts(q Queue, o priorityqueue.AddOpts, rs ...Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[Request]); ok {
		pq.AddWithOpts(o, rs...)
		return
	}
	for _, r := range rs {
		switch {
		case o.RateLimited:
			q.AddRateLimited(r)
		case o.After > 0:
			q.AddAfter(r, o.After)
		default:
			q.Add(r)
		}
	}
}

func (q *clusterQueue) Forget(r reconcile.Request)          { q.queue.Forget(q.tag(r)) }
func (q *clusterQueue) NumRequeues(r reconcile.Request) int { return q.queue.NumRequeues(q.tag(r)) }
func (q *clusterQueue) Len() int                            { return q.queue.Len() }
func (q *clusterQueue) ShuttingDown() bool                  { return q.queue.ShuttingDown() }

// Get and GetWithPriority report a shut-down queue: the view is write-only.
func (q *clusterQueue) Get() (reconcile.Request, bool) { return reconcile.Request{}, true }
func (q *clusterQueue) GetWithPriority() (reconcile.Request, int, bool) {
	return reconcile.Request{}, 0, true
}

// Done, ShutDown and ShutDownWithDrain do nothing: the workers of the
// shared queue own them.
func (q *clusterQueue) Done(reconcile.Request) {}
func (q *clusterQueue) ShutDown()              {}
func (q *clusterQueue) ShutDownWithDrain()     {}
