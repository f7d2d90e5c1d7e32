package propagation

import (
	"maps"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// memberResult is where one Propagation stands in one member, as its last
// member reconcile found it.
type memberResult struct {
	result     fleetv1alpha1.MemberResult
	reason     string
	message    string
	drifted    []string
	generation int64
	// since is when result and reason last changed.
	since metav1.Time
	// copies counts the copies left in the member, and kinds are their
	// kinds.
	copies int
	kinds  []schema.GroupVersionKind
	// removing is set when the member reconcile removed copies because
	// none are wanted: the Propagation is gone or deleted, or the member
	// is not selected.
	removing bool
	// failedRuns counts the runs in a row that failed with this result
	// and reason (a removal owed by a Propagation gone fails too), and
	// logged is when the failure was last logged.
	failedRuns int
	logged     time.Time
}

func (a memberResult) same(b memberResult) bool {
	return a.result == b.result && a.reason == b.reason && a.message == b.message && a.generation == b.generation &&
		a.copies == b.copies && a.removing == b.removing && slices.Equal(a.drifted, b.drifted)
}

// results holds every member result of every Propagation, in memory: a
// restarted manager learns them again as its members reconcile.
type results struct {
	mu     sync.Mutex
	byProp map[propagationKey]map[string]memberResult
}

func newResults() *results { return &results{byProp: map[propagationKey]map[string]memberResult{}} }

// set records member's result for key, keeping since and logged while
// the result and reason stay, and adding up failedRuns then. It
// returns the result replaced (zero if none) and the one recorded: the
// two are not same when anything changed.
func (rs *results) set(key propagationKey, member string, r memberResult) (old, now memberResult) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	m := rs.byProp[key]
	if m == nil {
		m = map[string]memberResult{}
		rs.byProp[key] = m
	}
	old = m[member]
	if old.result == r.result && old.reason == r.reason {
		r.since, r.logged = old.since, old.logged
		if r.failedRuns > 0 {
			r.failedRuns += old.failedRuns
		}
	}
	m[member] = r
	return old, r
}

// logFailure reports whether member's failure for key is to be logged:
// not if it was within every, for the same reason. It records the time.
func (rs *results) logFailure(key propagationKey, member string, every time.Duration) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byProp[key][member]
	if !ok || r.failedRuns == 0 || time.Since(r.logged) < every {
		return false
	}
	r.logged = time.Now()
	rs.byProp[key][member] = r
	return true
}

// retryFailed starts the back-off of member's failures over, from a
// second, and returns the Propagations that failed there.
func (rs *results) retryFailed(member string) []propagationKey {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var keys []propagationKey
	for key, m := range rs.byProp {
		if r, ok := m[member]; ok && r.failedRuns > 0 {
			r.failedRuns = 0
			m[member] = r
			keys = append(keys, key)
		}
	}
	return keys
}

func (rs *results) get(key propagationKey, member string) (memberResult, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byProp[key][member]
	return r, ok
}

// of returns a copy of every member result of key.
func (rs *results) of(key propagationKey) map[string]memberResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return maps.Clone(rs.byProp[key])
}

func (rs *results) forget(key propagationKey, member string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.byProp[key], member)
	if len(rs.byProp[key]) == 0 {
		delete(rs.byProp, key)
	}
}

// forgetPropagation forgets key's results, except owed deletions, which
// outlive their Propagation until the member carries them out.
func (rs *results) forgetPropagation(key propagationKey) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	maps.DeleteFunc(rs.byProp[key], func(_ string, r memberResult) bool { return r.result != fleetv1alpha1.ResultDeletionOwed })
	if len(rs.byProp[key]) == 0 {
		delete(rs.byProp, key)
	}
}

// forgetMember forgets a member that left the fleet.
func (rs *results) forgetMember(member string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for key, m := range rs.byProp {
		delete(m, member)
		if len(m) == 0 {
			delete(rs.byProp, key)
		}
	}
}

// owe marks member as owing the removal of key's copies, of kinds, and
// reports whether it did not already.
func (rs *results) owe(key propagationKey, member, message string, kinds []schema.GroupVersionKind) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	m := rs.byProp[key]
	if m == nil {
		m = map[string]memberResult{}
		rs.byProp[key] = m
	}
	r := m[member]
	if r.result == fleetv1alpha1.ResultDeletionOwed {
		return false
	}
	r.result, r.reason, r.message, r.removing, r.since = fleetv1alpha1.ResultDeletionOwed, fleetv1alpha1.ReasonDeletionOwed, message, true, metav1.Now()
	for _, k := range kinds {
		if !slices.Contains(r.kinds, k) {
			r.kinds = append(r.kinds, k)
		}
	}
	m[member] = r
	return true
}
