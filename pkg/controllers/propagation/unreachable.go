package propagation

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	members "github.com/fleetkube/fleet-manager/pkg/member"
)

// unreachableRetry is when a member run that could not reach the member
// is tried again: within it, the health prober makes a member that went
// down Unhealthy, which holds its runs.
const unreachableRetry = 2 * time.Second

// unreachableLog holds the members whose runs could not reach them,
// logged once until a run reaches them again.
type unreachableLog struct {
	mu     sync.Mutex
	logged map[string]bool
}

// first records that member could not be reached, and reports whether
// that is news since a run last reached it.
func (l *unreachableLog) first(member string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged[member] {
		return false
	}
	if l.logged == nil {
		l.logged = map[string]bool{}
	}
	l.logged[member] = true
	return true
}

// reached records that a run of member reached it.
func (l *unreachableLog) reached(member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.logged, member)
}

// unreachable returns how err says the member cannot be reached: its
// connection refused, reset or cut, a timeout, or a 503 from a proxy in
// front of it; "" if it does not.
func unreachable(err error) string {
	var netErr net.Error
	switch {
	case utilnet.IsConnectionRefused(err), errors.Is(err, members.ErrConnectionRefused):
		return "connection refused"
	case utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err):
		return "connection lost"
	case errors.As(err, &netErr) && netErr.Timeout(), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return "timeout"
	case apierrors.IsServiceUnavailable(err):
		return "service unavailable"
	}
	return ""
}

// quietUnreachable turns the error of a run of member cluster that could not
// reach it into a retry after unreachableRetry, logged once at Info
// until a run reaches it again: a member that goes down fails its runs
// until the health prober says so, and that is no reconcile error (which
// controller-runtime would log at each retry, from 5ms). Its result is
// left as it was: the member's state says why it is not served. Any
// other error is returned.
func (r *reconciler) quietUnreachable(ctx context.Context, cluster string, res reconcile.Result, err error) (reconcile.Result, error) {
	how := unreachable(err)
	if how == "" {
		r.unreachable.reached(cluster)
		return res, err
	}
	if r.unreachable.first(cluster) {
		logf.FromContext(ctx).Info("Member unreachable; its run is retried", "reason", how, "retryAfter", unreachableRetry)
	}
	return reconcile.Result{RequeueAfter: unreachableRetry}, nil
}
