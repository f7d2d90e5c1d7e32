package fleet

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// EngageMembers engages a with every member this replica owns that
// filter accepts (nil accepts all), as the fleet controllers are engaged:
// the members engaged now at once, each later one as it is engaged, each
// (member, a) pair in its own goroutine, retried with backoff while
// a.Engage fails. The hub is not handed to a.
//
// The context of an engagement ends when the member leaves the fleet, is
// disconnected, moves to another replica (under sharding, a is engaged
// with a member only once this replica owns it, not while it takes it
// over) or filter stops accepting it; a reconnected member is engaged
// again with its new cluster.Cluster. A member whose credentials are
// rotated in place keeps its cluster.Cluster and is not engaged again.
// An Unhealthy member stays engaged.
//
// EngageMembers blocks until ctx ends and every engagement of a has
// ended: each goroutine that called a.Engage has returned and, if a is an
// engage.Disengager, a has been told. It returns nil.
func (m *Manager) EngageMembers(ctx context.Context, a engage.Aware, filter ClusterFilter) error {
	s := &memberSubscriber{aware: a, registry: m.registry, filter: filter}
	m.engager.Add(s)
	<-ctx.Done()
	m.engager.Remove(s)
	return nil
}

// acceptsMember reports whether member clusterName is registered and
// accepted, this replica owns it (and is not still taking it over), and
// filter (nil accepts all) accepts it.
func acceptsMember(r *registry.Registry, clusterName string, filter ClusterFilter) bool {
	if clusterName == registry.HubName {
		return false
	}
	c, ok := r.Get(clusterName)
	if !ok || !c.Accepted() || !c.Owned() {
		return false
	}
	return filter == nil || filter(clusterName, c.Labels)
}

// memberSubscriber is the aware of an EngageMembers: it accepts the
// members this replica owns and its filter accepts, and hands them to
// aware. The lifecycle asks it again at every change of a member's
// registration, ownership included.
type memberSubscriber struct {
	aware    engage.Aware
	registry *registry.Registry
	filter   ClusterFilter
}

var (
	_ engage.Selector   = (*memberSubscriber)(nil)
	_ engage.Disengager = (*memberSubscriber)(nil)
)

func (s *memberSubscriber) Accepts(clusterName string) bool {
	return acceptsMember(s.registry, clusterName, s.filter)
}

func (s *memberSubscriber) Engage(ctx context.Context, clusterName string, cl cluster.Cluster) error {
	return s.aware.Engage(ctx, clusterName, cl)
}

func (s *memberSubscriber) Disengage(clusterName string) {
	if d, ok := s.aware.(engage.Disengager); ok {
		d.Disengage(clusterName)
	}
}

// String names the subscriber in engagements and logs by its aware's
// String, if it has one.
func (s *memberSubscriber) String() string {
	if n, ok := s.aware.(interface{ String() string }); ok {
		return n.String()
	}
	return "member subscriber"
}

// GetMemberFieldIndexer returns an indexer that adds each index to every
// member, present and future, and not to the hub, whose cache then starts
// no informer for the kind.
func (m *Manager) GetMemberFieldIndexer() client.FieldIndexer { return m.pool }
