package member

import (
	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ObservedRegistry is a registry for tests that use the pool's Set and
// Remove: it registers nothing, and hands each state a member reports to
// Observe, if set, as well.
type ObservedRegistry struct {
	*registry.Registry
	Observe func(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult)
}

// NewObservedRegistry returns an empty ObservedRegistry that hands each
// state to observe, which may be nil.
func NewObservedRegistry(observe func(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult)) *ObservedRegistry {
	return &ObservedRegistry{Registry: registry.New(), Observe: observe}
}

func (r *ObservedRegistry) ObserveState(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult) {
	if r.Observe != nil {
		r.Observe(name, state, probe)
	}
	r.Registry.ObserveState(name, state, probe)
}
