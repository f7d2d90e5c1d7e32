package fairqueue

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// unfinishedWorkPeriod is how often the queue's unfinished-work metrics
// are updated, as in client-go's and controller-runtime's queues.
const unfinishedWorkPeriod = 500 * time.Millisecond

// Options configure a Queue. The zero Options are the defaults.
type Options[T comparable] struct {
	// RateLimiter times AddRateLimited. Defaults to controller-runtime's:
	// a per-item exponential backoff from 5ms to 1000s.
	RateLimiter workqueue.TypedRateLimiter[T]
	// MetricsProvider makes the queue's workqueue metrics, labelled with
	// the queue's name; when it is a [MetricsProvider] (or another
	// provider with per-cluster depth), the queue also counts its depth
	// per cluster. Defaults to none: no metrics.
	// NewMetricsProvider(metrics.Registry) writes controller-runtime's
	// series. A queue named "" has no metrics, like controller-runtime's.
	MetricsProvider workqueue.MetricsProvider
	// MaxInFlightPerCluster caps the items of one cluster handed out by Get
	// and not yet Done. Defaults to 0: no cap; a negative cap is no cap.
	MaxInFlightPerCluster int
	// Clock times AddAfter, AddRateLimited and the metrics. Defaults to
	// the real clock.
	Clock clock.WithTicker
}

// defaulted returns o with every unset option set to its default.
func defaulted[T comparable](o Options[T]) Options[T] {
	if o.RateLimiter == nil {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[T](5*time.Millisecond, 1000*time.Second)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.MaxInFlightPerCluster = max(o.MaxInFlightPerCluster, 0)
	return o
}

// Queue is controller-runtime's priority queue, fair across clusters: a
// priorityqueue.PriorityQueue[T] that hands out one item of each cluster
// in turn within a priority, caps the items of a cluster in flight, and
// holds and drops a cluster's items. The package documentation states
// its contract.
//
// # Implementation considerations
//
// Each cluster has a map of its items, queued or in flight, keyed by the
// item, a heap of its waiting items by ready time, and per priority a
// heap of its ready items by ready order. The clusters whose items can be
// handed out at a priority form a ring for that priority; Get serves the
// head of the highest ring and moves it to the back. A heap of clusters
// by their earliest waiting item lets Get, Len and one background
// goroutine make items ready when their time comes. Get costs O(log items
// of the cluster) plus O(priorities); nothing scans all items.
//
// An item stays in its cluster's map from its add to its Done, so Add,
// Get and Done of an item cost four operations on that map between them;
// one re-added while in flight is "parked": counted as ready, in no heap,
// until Done. An item takes 48 bytes beside its key, its times kept as
// 8-byte offsets from the queue's creation. A cluster's structures live
// from its first add or hold to its drop, as its depth series does; once
// empty, its item map and heaps are made anew if they grew past
// fqKeepItems, as Go maps and slices never shrink and an initial list can
// grow them to thousands of items.
type Queue[T comparable] struct {
	clusterOf   func(T) string
	clock       fqClock
	rateLimiter workqueue.TypedRateLimiter[T]
	maxInFlight int
	metrics     *fairQueueMetrics[T] // nil: no metrics

	kick    chan struct{} // wakes the timer loop: the earliest ready time may have changed
	done    chan struct{} // closed by ShutDown
	stopped chan struct{} // closed when the timer loop has returned

	// mu guards every field below, the clusters, items, levels and rings
	// they point to, and the calls to metrics; cond, on mu, wakes the
	// goroutines waiting in Get. The rate limiter and the metrics are
	// called under mu: they have their own locks and never call back.
	mu       sync.Mutex
	cond     sync.Cond
	shutdown bool
	clusters map[string]*fqCluster[T] // not dropped, or queued, held or in flight since
	// dropped names the clusters dropped and not kept since.
	dropped map[string]struct{}
	rings   []*fqRing[T] // non-empty rings, highest priority first
	timers  fqTimers[T]  // clusters with waiting items, earliest first
	ready   int          // ready items, parked ones included
	seq     uint64       // next ready order
}

var _ priorityqueue.PriorityQueue[string] = (*Queue[string])(nil)

// New returns a running fair queue named name (the controller's name,
// which labels its metrics), whose items belong to the cluster clusterOf
// names. clusterOf must name the same cluster for equal items, and must
// not call the queue. ShutDown stops the queue.
func New[T comparable](name string, clusterOf func(T) string, opts Options[T]) *Queue[T] {
	o := defaulted(opts)
	clk := fqClock{WithTicker: o.Clock, epoch: o.Clock.Now()}
	q := &Queue[T]{
		clusterOf:   clusterOf,
		clock:       clk,
		rateLimiter: o.RateLimiter,
		maxInFlight: o.MaxInFlightPerCluster,
		metrics:     newFairQueueMetrics[T](o.MetricsProvider, name, clk),
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		stopped:     make(chan struct{}),
		clusters:    map[string]*fqCluster[T]{},
		dropped:     map[string]struct{}{},
	}
	q.cond.L = &q.mu
	go q.runTimers()
	return q
}

// Add queues item, ready now, at priority 0.
func (q *Queue[T]) Add(item T) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

// AddAfter queues item to be ready after the duration.
func (q *Queue[T]) AddAfter(item T, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

// AddRateLimited queues item to be ready when the rate limiter says.
func (q *Queue[T]) AddRateLimited(item T) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts queues items with the options: an item that is queued
// already keeps the higher priority and the earlier ready time. After a
// ShutDown it does nothing.
func (q *Queue[T]) AddWithOpts(o priorityqueue.AddOpts, items ...T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	priority := ptr.Deref(o.Priority, 0)
	var now fqTime
	var clocked bool
	for _, key := range items {
		after := o.After
		if o.RateLimited {
			if d := q.rateLimiter.When(key); after == 0 || d < after {
				after = d
			}
		}
		if after <= 0 {
			q.lockedAdd(key, priority, 0, false)
			continue
		}
		if !clocked {
			now, clocked = q.clock.now(), true
		}
		q.metrics.retry()
		q.lockedAdd(key, priority, now+fqTime(after), true)
	}
}

// lockedAdd queues key, ready at readyAt when it has to wait, else now.
func (q *Queue[T]) lockedAdd(key T, priority int, readyAt fqTime, wait bool) {
	c := q.lockedCluster(q.clusterOf(key))
	it := c.items[key]
	if it == nil {
		it = &fqItem[T]{key: key, index: -1, flight: -1}
		c.items[key] = it
		c.itemsPeak = max(c.itemsPeak, len(c.items))
	}
	if it.state == fqIdle {
		it.priority, it.seq = priority, q.nextSeq()
		if wait {
			it.state, it.at = fqWaiting, readyAt
			c.waiting.push(it)
			q.lockedFixTimer(c)
		} else {
			q.lockedMakeReady(c, it)
		}
		return
	}

	raise := priority > it.priority
	if raise && it.state == fqReady {
		q.lockedUnqueue(c, it)
	}
	if raise {
		it.priority, it.seq = priority, q.nextSeq()
	}
	switch it.state {
	case fqWaiting:
		switch {
		case !wait:
			c.waiting.remove(it.index)
			q.lockedFixTimer(c)
			q.lockedMakeReady(c, it)
		case raise || readyAt < it.at:
			it.at = min(it.at, readyAt)
			c.waiting.fix(it.index)
			q.lockedFixTimer(c)
		}
	case fqReady:
		if raise {
			q.lockedQueue(c, it)
		}
	}
}

// lockedMakeReady makes a new or waiting item ready: queued, or parked
// while it is in flight.
func (q *Queue[T]) lockedMakeReady(c *fqCluster[T], it *fqItem[T]) {
	c.ready++
	q.ready++
	q.metrics.add(c, it)
	if it.inFlight {
		it.state, it.index = fqParked, -1
		return
	}
	q.lockedQueue(c, it)
}

// lockedQueue puts a ready item in its level and wakes a Get when the
// cluster can hand it out.
func (q *Queue[T]) lockedQueue(c *fqCluster[T], it *fqItem[T]) {
	it.state = fqReady
	l := c.level(it.priority)
	l.items.push(it)
	if !c.eligible {
		return
	}
	if l.ring == nil {
		q.lockedRingAppend(l)
	}
	q.cond.Signal()
}

// lockedUnqueue takes a queued item out of its level.
func (q *Queue[T]) lockedUnqueue(c *fqCluster[T], it *fqItem[T]) {
	l := c.level(it.priority)
	l.items.remove(it.index)
	if l.items.Len() == 0 {
		q.lockedRingRemove(l)
	}
}

// Get hands out the next item; see GetWithPriority.
func (q *Queue[T]) Get() (T, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

// GetWithPriority blocks until an item can be handed out or the queue
// shuts down, and returns the item and its priority. The caller must call
// Done with the item once it has processed it. After ShutDown it returns
// shutdown true at once.
func (q *Queue[T]) GetWithPriority() (item T, priority int, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.shutdown {
			return item, 0, true
		}
		q.lockedPromote()
		if it, ok := q.lockedPop(); ok {
			if len(q.rings) > 0 {
				q.cond.Signal() // There is more: pass it on to another waiter.
			}
			return it.key, it.priority, false
		}
		q.cond.Wait()
	}
}

// lockedPop hands out the first item of the cluster at the head of the
// highest ring and moves that cluster to the ring's back.
func (q *Queue[T]) lockedPop() (*fqItem[T], bool) {
	if len(q.rings) == 0 {
		return nil, false
	}
	r := q.rings[0]
	l := r.head
	it := l.items.pop()
	if l.items.Len() == 0 {
		q.lockedRingRemove(l)
	} else {
		r.head = l.next
	}
	c := l.cluster
	c.ready--
	q.ready--
	it.state, it.inFlight = fqIdle, true
	c.inFlight++
	q.metrics.get(c, it)
	q.lockedUpdateEligible(c)
	return it, true
}

// Done marks item as processed: a copy added meanwhile can be handed out,
// and so can another item of its cluster when the cluster was at its cap.
// Done of an item not in flight does nothing.
func (q *Queue[T]) Done(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.clusters[q.clusterOf(item)]
	if c == nil {
		return
	}
	it := c.items[item]
	if it == nil || !it.inFlight {
		return
	}
	it.inFlight = false
	c.inFlight--
	q.metrics.done(it)
	switch it.state {
	case fqParked:
		q.lockedQueue(c, it)
	case fqIdle:
		c.deleteItem(item)
	}
	q.lockedUpdateEligible(c)
	q.lockedForgetIfIdle(c)
}

// Forget clears the rate limiter's history of item.
func (q *Queue[T]) Forget(item T) {
	q.rateLimiter.Forget(item)
}

// NumRequeues returns how often the rate limiter has timed item.
func (q *Queue[T]) NumRequeues(item T) int {
	return q.rateLimiter.NumRequeues(item)
}

// Len returns the number of ready items, including those of held or
// capped clusters and those waiting for their copy in flight to be Done;
// not those waiting for their time, as in controller-runtime.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockedPromote()
	return q.ready
}

// ShutDown stops the queue: later adds are ignored, and every Get returns
// shutdown. It returns once the queue's goroutine has ended. Calling it
// again does nothing.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	if !q.shutdown {
		q.shutdown = true
		close(q.done)
		q.cond.Broadcast()
	}
	q.mu.Unlock()
	<-q.stopped
}

// ShutDownWithDrain is ShutDown: like controller-runtime's priority queue,
// it does not wait for the items in flight.
func (q *Queue[T]) ShutDownWithDrain() {
	q.ShutDown()
}

// ShuttingDown reports whether ShutDown has been called.
func (q *Queue[T]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// Hold stops (held true) or resumes handing out clusterName's items. Held
// items stay queued, counted by Len and deduplicated as usual; items
// already in flight are not affected. A hold lasts until Hold(name,
// false) or Drop(name).
func (q *Queue[T]) Hold(clusterName string, held bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, known := q.clusters[clusterName]; !known && !held {
		return
	}
	c := q.lockedCluster(clusterName)
	c.held = held
	q.lockedUpdateEligible(c)
	q.lockedForgetIfIdle(c)
}

// Drop forgets everything about clusterName but its items in flight: it
// removes every queued item, ready, waiting or parked, and clears their
// rate-limiter history, in O(items of the cluster) without touching
// another cluster's items; it ends the cluster's hold; and it lets go of
// the cluster once none of its items is in flight. Items in flight stay
// in flight: Done releases them, and one added again is handed out only
// after its Done. Later adds are accepted, and a cluster added again
// starts unheld: whoever holds it holds it again.
func (q *Queue[T]) Drop(clusterName string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.clusters[clusterName]
	if c == nil {
		return
	}
	for _, l := range c.levels {
		q.lockedRingRemove(l)
	}
	for key, it := range c.items {
		if it.state != fqIdle {
			q.rateLimiter.Forget(key)
		}
		if c.inFlight > 0 {
			if it.inFlight {
				it.state, it.index = fqIdle, -1
			} else {
				delete(c.items, key)
			}
		}
	}
	q.ready -= c.ready
	q.metrics.drop(c)
	if c.inFlight == 0 {
		c.items, c.itemsPeak = map[T]*fqItem[T]{}, 0
	}
	c.levels = nil
	c.waiting.items = nil
	c.ready = 0
	c.held = false
	q.dropped[clusterName] = struct{}{}
	q.lockedUpdateEligible(c)
	q.lockedFixTimer(c)
	q.lockedForgetIfIdle(c)
}

// Keep keeps clusterName's structures while it is idle, as a cluster's
// are from its first add until its Drop: the cluster is engaged again. A
// dropped cluster not kept again is let go, its series with it, once
// nothing of it is queued or in flight, whatever reached it after its drop.
func (q *Queue[T]) Keep(clusterName string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.dropped, clusterName)
}

// lockedCluster returns clusterName's part of the queue, made on demand.
func (q *Queue[T]) lockedCluster(clusterName string) *fqCluster[T] {
	c := q.clusters[clusterName]
	if c == nil {
		c = &fqCluster[T]{
			name:       clusterName,
			items:      map[T]*fqItem[T]{},
			waiting:    fqItemHeap[T]{waiting: true},
			timerIndex: -1,
			eligible:   true,
		}
		q.clusters[clusterName] = c
	}
	return c
}

// lockedForgetIfIdle lets go of a dropped cluster once it has nothing
// queued or in flight and has not been held since. Other clusters stay, so that a
// cluster's structures are made once, not once per burst of work.
func (q *Queue[T]) lockedForgetIfIdle(c *fqCluster[T]) {
	if _, dropped := q.dropped[c.name]; dropped && len(c.items) == 0 && !c.held {
		delete(q.clusters, c.name)
		q.metrics.forget(c)
	}
}

// lockedUpdateEligible puts a cluster's levels in their rings when it may
// hand out items (not held, below its cap), and takes them out when not.
func (q *Queue[T]) lockedUpdateEligible(c *fqCluster[T]) {
	eligible := !c.held && (q.maxInFlight == 0 || c.inFlight < q.maxInFlight)
	if eligible == c.eligible {
		return
	}
	c.eligible = eligible
	for _, l := range c.levels {
		switch {
		case !eligible:
			q.lockedRingRemove(l)
		case l.items.Len() > 0:
			q.lockedRingAppend(l)
			q.cond.Signal()
		}
	}
}

// lockedRingAppend puts a level at the back of its priority's ring.
func (q *Queue[T]) lockedRingAppend(l *fqLevel[T]) {
	i := 0
	for i < len(q.rings) && q.rings[i].priority > l.priority {
		i++
	}
	if i == len(q.rings) || q.rings[i].priority != l.priority {
		r := &fqRing[T]{priority: l.priority, head: l}
		q.rings = append(q.rings, nil)
		copy(q.rings[i+1:], q.rings[i:])
		q.rings[i] = r
		l.ring, l.prev, l.next = r, l, l
		return
	}
	r := q.rings[i]
	tail := r.head.prev
	l.ring, l.prev, l.next = r, tail, r.head
	tail.next, r.head.prev = l, l
}

// lockedRingRemove takes a level out of its ring, if it is in one, and
// drops the ring when it is left empty.
func (q *Queue[T]) lockedRingRemove(l *fqLevel[T]) {
	r := l.ring
	if r == nil {
		return
	}
	if l.next == l {
		for i, x := range q.rings {
			if x == r {
				q.rings = append(q.rings[:i], q.rings[i+1:]...)
				break
			}
		}
	} else {
		l.prev.next, l.next.prev = l.next, l.prev
		if r.head == l {
			r.head = l.next
		}
	}
	l.ring, l.prev, l.next = nil, nil, nil
}

// lockedFixTimer updates a cluster's place among the clusters with
// waiting items, and wakes the timer loop when it is first.
func (q *Queue[T]) lockedFixTimer(c *fqCluster[T]) {
	switch {
	case c.waiting.Len() == 0:
		if c.timerIndex >= 0 {
			heap.Remove(&q.timers, c.timerIndex)
		}
		return
	case c.timerIndex < 0:
		heap.Push(&q.timers, c)
	default:
		heap.Fix(&q.timers, c.timerIndex)
	}
	if q.timers[0] == c {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// lockedPromote makes the waiting items whose time has come ready, the
// earliest first. It returns the time it read; none when nothing waits.
func (q *Queue[T]) lockedPromote() (now fqTime) {
	if len(q.timers) == 0 {
		return now
	}
	now = q.clock.now()
	for len(q.timers) > 0 {
		c := q.timers[0]
		it := c.waiting.items[0]
		if it.at > now {
			break
		}
		c.waiting.pop()
		q.lockedFixTimer(c)
		it.seq = q.nextSeq() // Ordered by when it became ready.
		q.lockedMakeReady(c, it)
	}
	return now
}

// runTimers makes waiting items ready when their time comes, for the
// goroutines blocked in Get, and updates the unfinished-work metrics. It
// is the queue's only goroutine, and returns on ShutDown.
func (q *Queue[T]) runTimers() {
	defer close(q.stopped)
	var tick <-chan time.Time
	if q.metrics != nil {
		t := q.clock.NewTicker(unfinishedWorkPeriod)
		defer t.Stop()
		tick = t.C()
	}
	for {
		ready, stop := q.nextTimer()
		select {
		case <-q.done:
			stop()
			return
		case <-q.kick:
		case <-ready:
		case <-tick:
			q.mu.Lock()
			q.metrics.updateUnfinishedWork()
			q.mu.Unlock()
		}
		stop()
	}
}

// nextTimer makes the items due ready, and returns a channel that fires
// when the next one is due (nil when none waits) and a func to stop it.
func (q *Queue[T]) nextTimer() (<-chan time.Time, func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.lockedPromote()
	if len(q.timers) == 0 {
		return nil, func() {}
	}
	t := q.clock.NewTimer(time.Duration(q.timers[0].waiting.items[0].at - now))
	return t.C(), func() { t.Stop() }
}

// fqTime is a time on a queue's clock: nanoseconds since the queue was
// made.
type fqTime int64

// fqClock is a queue's clock, which also reads fqTimes.
type fqClock struct {
	clock.WithTicker
	epoch time.Time // fqTime 0
}

// now returns the fqTime now.
func (c fqClock) now() fqTime {
	return fqTime(c.Since(c.epoch))
}

// nextSeq returns the next ready order. Call it under mu.
func (q *Queue[T]) nextSeq() uint64 {
	q.seq++
	return q.seq
}

// fqState is where an item is queued.
type fqState uint8

const (
	fqIdle    fqState = iota // not queued: in flight only
	fqWaiting                // in its cluster's waiting heap
	fqReady                  // in its level's heap
	fqParked                 // ready, but in flight: in no heap until Done
)

// fqItem is an item of a cluster, queued, in flight or both (parked).
// Its times are fqTimes, 8 bytes each rather than a time.Time's 24.
type fqItem[T comparable] struct {
	key      T
	priority int
	seq      uint64 // ready order: lower first
	// at is when a waiting item becomes ready, and when a ready or parked
	// item became ready, for the latency metric.
	at       fqTime
	start    fqTime  // when it was handed out, for the work-duration metric
	index    int     // in its heap; -1 in none
	flight   int32   // in the metrics' items in flight; -1 when not there
	state    fqState // where it is queued
	inFlight bool    // handed out, not yet Done
}

// fqLessWaiting orders waiting items by ready time, then as
// controller-runtime does: higher priority, then earlier added.
func fqLessWaiting[T comparable](a, b *fqItem[T]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}

// fqKeepItems is the most items a cluster's emptied map or heap may have
// held and still be kept.
const fqKeepItems = 64

// fqCluster is one cluster's part of a Queue.
type fqCluster[T comparable] struct {
	name       string
	items      map[T]*fqItem[T] // queued (waiting, ready or parked) or in flight
	itemsPeak  int              // most items since items was made
	levels     []*fqLevel[T]    // ready items by priority, one level per priority seen
	waiting    fqItemHeap[T]    // waiting items, earliest first
	timerIndex int              // in the queue's timers; -1 when not there
	inFlight   int              // items handed out, not yet Done
	ready      int              // ready items, parked ones included
	held       bool
	eligible   bool                  // its non-empty levels are in their rings
	depth      workqueue.GaugeMetric // per-cluster depth; nil until an add with metrics
}

// deleteItem removes a queued item, and makes the map anew when that
// empties it after it grew past fqKeepItems.
func (c *fqCluster[T]) deleteItem(key T) {
	delete(c.items, key)
	if len(c.items) == 0 && c.itemsPeak > fqKeepItems {
		c.items, c.itemsPeak = map[T]*fqItem[T]{}, 0
	}
}

// level returns the cluster's level of a priority, made on demand.
func (c *fqCluster[T]) level(priority int) *fqLevel[T] {
	for _, l := range c.levels {
		if l.priority == priority {
			return l
		}
	}
	l := &fqLevel[T]{cluster: c, priority: priority}
	c.levels = append(c.levels, l)
	return l
}

// fqLevel holds a cluster's queued ready items of one priority, in ready
// order, and is the cluster's node in that priority's ring while it has
// items and the cluster is eligible.
type fqLevel[T comparable] struct {
	cluster    *fqCluster[T]
	priority   int
	items      fqItemHeap[T]
	ring       *fqRing[T] // nil when not in a ring
	prev, next *fqLevel[T]
}

// fqRing is the circular list of the levels of one priority whose items
// can be handed out; head is served next.
type fqRing[T comparable] struct {
	priority int
	head     *fqLevel[T]
}

// fqItemHeap is a heap of items that keeps each item's index: a
// cluster's waiting items by fqLessWaiting, or a level's ready items by
// ready order. It is container/heap's algorithm with direct calls, as
// these heaps are on the path of every item.
type fqItemHeap[T comparable] struct {
	items   []*fqItem[T]
	waiting bool // ordered by fqLessWaiting, else by ready order
}

func (h *fqItemHeap[T]) Len() int { return len(h.items) }

func (h *fqItemHeap[T]) less(i, j int) bool {
	if h.waiting {
		return fqLessWaiting(h.items[i], h.items[j])
	}
	return h.items[i].seq < h.items[j].seq
}

func (h *fqItemHeap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}

// push adds it.
func (h *fqItemHeap[T]) push(it *fqItem[T]) {
	it.index = len(h.items)
	h.items = append(h.items, it)
	h.up(it.index)
}

// pop removes and returns the first item.
func (h *fqItemHeap[T]) pop() *fqItem[T] {
	n := len(h.items) - 1
	h.swap(0, n)
	h.down(0, n)
	return h.takeLast()
}

// remove removes the item at index i.
func (h *fqItemHeap[T]) remove(i int) {
	n := len(h.items) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	h.takeLast()
}

// fix restores the order after the item at index i changed.
func (h *fqItemHeap[T]) fix(i int) {
	if !h.down(i, len(h.items)) {
		h.up(i)
	}
}

// takeLast removes and returns the last item, and lets go of the slice
// when that empties it after it grew past fqKeepItems.
func (h *fqItemHeap[T]) takeLast() *fqItem[T] {
	n := len(h.items) - 1
	it := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	if n == 0 && cap(h.items) > fqKeepItems {
		h.items = nil
	}
	it.index = -1
	return it
}

func (h *fqItemHeap[T]) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *fqItemHeap[T]) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// fqTimers is a heap of the clusters with waiting items, by their first
// waiting item.
type fqTimers[T comparable] []*fqCluster[T]

func (h fqTimers[T]) Len() int { return len(h) }
func (h fqTimers[T]) Less(i, j int) bool {
	return fqLessWaiting(h[i].waiting.items[0], h[j].waiting.items[0])
}
func (h fqTimers[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].timerIndex, h[j].timerIndex = i, j
}
func (h *fqTimers[T]) Push(x any) {
	c := x.(*fqCluster[T])
	c.timerIndex = len(*h)
	*h = append(*h, c)
}
func (h *fqTimers[T]) Pop() any {
	old := *h
	n := len(old) - 1
	c := old[n]
	old[n] = nil
	*h = old[:n]
	c.timerIndex = -1
	return c
}

// clusterDepthProvider is a workqueue.MetricsProvider that also counts a
// queue's ready items per cluster.
type clusterDepthProvider interface {
	// newClusterDepthMetric returns the depth of clusterName in the queue
	// name.
	newClusterDepthMetric(name, clusterName string) workqueue.GaugeMetric
	// deleteClusterDepthMetric deletes that series.
	deleteClusterDepthMetric(name, clusterName string)
}

// fairQueueMetrics writes a queue's metrics as controller-runtime's
// priority queue does: an item counts in depth and adds when it becomes
// ready, and its latency runs from then to Get. A nil *fairQueueMetrics
// writes nothing. Its methods are called under the queue's mu.
type fairQueueMetrics[T comparable] struct {
	name           string
	clock          fqClock
	depth          workqueue.GaugeMetric
	adds           workqueue.CounterMetric
	latency        workqueue.HistogramMetric
	workDuration   workqueue.HistogramMetric
	unfinished     workqueue.SettableGaugeMetric
	longestRunning workqueue.SettableGaugeMetric
	retries        workqueue.CounterMetric
	clusters       clusterDepthProvider // nil: no per-cluster depth
	inFlight       []*fqItem[T]         // the items in flight, each at its flight index
}

// newFairQueueMetrics returns the metrics of the queue name, or nil
// without a provider or a name.
func newFairQueueMetrics[T comparable](p workqueue.MetricsProvider, name string, clk fqClock) *fairQueueMetrics[T] {
	if p == nil || name == "" {
		return nil
	}
	m := &fairQueueMetrics[T]{
		name:           name,
		clock:          clk,
		depth:          p.NewDepthMetric(name),
		adds:           p.NewAddsMetric(name),
		latency:        p.NewLatencyMetric(name),
		workDuration:   p.NewWorkDurationMetric(name),
		unfinished:     p.NewUnfinishedWorkSecondsMetric(name),
		longestRunning: p.NewLongestRunningProcessorSecondsMetric(name),
		retries:        p.NewRetriesMetric(name),
	}
	m.clusters, _ = p.(clusterDepthProvider)
	return m
}

// add counts an item of c that became ready.
func (m *fairQueueMetrics[T]) add(c *fqCluster[T], it *fqItem[T]) {
	if m == nil {
		return
	}
	m.adds.Inc()
	m.depth.Inc()
	if m.clusters != nil {
		if c.depth == nil {
			c.depth = m.clusters.newClusterDepthMetric(m.name, c.name)
		}
		c.depth.Inc()
	}
	it.at = m.clock.now()
}

// get counts an item of c handed out, and notes it in flight.
func (m *fairQueueMetrics[T]) get(c *fqCluster[T], it *fqItem[T]) {
	if m == nil {
		return
	}
	now := m.clock.now()
	m.depth.Dec()
	if c.depth != nil {
		c.depth.Dec()
	}
	m.latency.Observe(time.Duration(now - it.at).Seconds())
	it.start, it.flight = now, int32(len(m.inFlight))
	m.inFlight = append(m.inFlight, it)
}

// done observes the work duration of an item handed out, and forgets it.
func (m *fairQueueMetrics[T]) done(it *fqItem[T]) {
	if m == nil {
		return
	}
	m.workDuration.Observe(time.Duration(m.clock.now() - it.start).Seconds())
	last := len(m.inFlight) - 1
	moved := m.inFlight[last]
	m.inFlight[it.flight], moved.flight = moved, it.flight
	m.inFlight[last], it.flight = nil, -1
	m.inFlight = m.inFlight[:last]
	if last == 0 && cap(m.inFlight) > fqKeepItems {
		m.inFlight = nil
	}
}

// retry counts an add with a delay.
func (m *fairQueueMetrics[T]) retry() {
	if m == nil {
		return
	}
	m.retries.Inc()
}

// drop uncounts c's ready items and deletes its depth series.
func (m *fairQueueMetrics[T]) drop(c *fqCluster[T]) {
	if m == nil {
		return
	}
	for range c.ready {
		m.depth.Dec()
	}
	if m.clusters != nil {
		m.clusters.deleteClusterDepthMetric(m.name, c.name)
		c.depth = nil
	}
}

// forget deletes the depth series of c, a cluster let go, which adds
// after its drop made again.
func (m *fairQueueMetrics[T]) forget(c *fqCluster[T]) {
	if m == nil || m.clusters == nil || c.depth == nil {
		return
	}
	m.clusters.deleteClusterDepthMetric(m.name, c.name)
	c.depth = nil
}

// updateUnfinishedWork sets the total and the longest time of the items
// in flight.
func (m *fairQueueMetrics[T]) updateUnfinishedWork() {
	now := m.clock.now()
	var total, longest float64
	for _, it := range m.inFlight {
		age := time.Duration(now - it.start).Seconds()
		total += age
		longest = max(longest, age)
	}
	m.unfinished.Set(total)
	m.longestRunning.Set(longest)
}
