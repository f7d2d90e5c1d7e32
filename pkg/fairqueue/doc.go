// Package fairqueue is a work queue fair across clusters: the queue of a
// fleet controller, whose one queue takes the work of every cluster.
//
// A [Queue] is controller-runtime's priority queue
// (priorityqueue.PriorityQueue[T]) over items of any comparable type T.
// [New] takes a function naming each item's cluster; an item belongs to
// that cluster, and within it items are told apart by T itself (==).
//
// # Contract
//
// A Queue keeps the contract of priorityqueue.New:
//   - an item queued twice is queued once, with the higher priority and
//     the earlier ready time; an item raised to a higher priority goes to
//     the back of that priority;
//   - an item added again while it is being processed is handed out again
//     only after Done;
//   - higher priorities come out first;
//   - Len counts the ready items, not those waiting for AddAfter or
//     AddRateLimited;
//   - Get blocks until an item can be handed out or the queue shuts down;
//     after ShutDown adds are ignored and Get returns shutdown at once;
//     ShutDownWithDrain is ShutDown, as in controller-runtime, which does
//     not use draining.
//
// Beyond it:
//   - Fair round-robin. Within the highest priority with ready work, Get
//     hands out one item of each cluster in turn, so an item of a quiet
//     cluster waits for at most one item of each other cluster with ready
//     work at that priority, not for their backlog. Within a cluster,
//     items come out in the order they became ready.
//   - A per-cluster cap. [Options].MaxInFlightPerCluster caps the items of
//     one cluster handed out and not yet Done.
//   - Hold. [Queue.Hold] keeps a cluster's items queued without handing
//     them out, until it is released or the cluster is dropped; they are
//     still counted by Len and deduplicated. Items already in flight are
//     not affected.
//   - Drop. [Queue.Drop] forgets a cluster: it removes every queued item
//     of the cluster and their rate-limiter history, without touching
//     another cluster's items, and ends its hold; items in flight stay in
//     flight until Done. A cluster added again after its drop starts
//     unheld: whoever holds it holds it again. A dropped cluster is let
//     go, with its series, once nothing of it is queued or in flight,
//     also when requests reached it after its drop (a late requeue of a
//     member that left), unless [Queue.Keep] keeps it: it is engaged
//     again.
//
// A held or capped cluster is skipped: no Get waits for it while another
// cluster has an item to hand out.
//
// # Metrics
//
// With [Options].MetricsProvider the queue writes the workqueue metrics
// of controller-runtime's priority queue, labelled with the queue's name.
// [NewMetricsProvider] writes them as controller-runtime's series, and
// the depth of each cluster as fleet_queue_depth.
package fairqueue
