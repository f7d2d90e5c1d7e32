package member

import (
	"context"
	"crypto/sha256"
	"errors"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Registry is what the pool follows and reports to: a *registry.Registry.
type Registry interface {
	// Subscribe streams every registered cluster's changes.
	Subscribe(ctx context.Context) *registry.Subscription
	// Refuse records that a registration's member could not be built.
	Refuse(name string, generation int64, refusal *kubeconfig.RefusedError)
	// ObserveState records a member's state and the probe behind it.
	ObserveState(name string, state fleetv1alpha1.MemberState, probe *registry.ProbeResult)
	// Identify records the identity of the cluster a member reaches and
	// returns the name that keeps that cluster.
	Identify(name string, fingerprint [sha256.Size]byte, clusterID string) (keeper string)
	// Synced closes once every registration, and every identity the hub
	// records, has been read.
	Synced() <-chan struct{}
}

// followWorkers is how many clusters settle at once. Settling is mostly
// CPU work (parsing the kubeconfig, building the member's transport), but
// replacing or removing a member waits until it stopped.
const followWorkers = 16

// follow keeps the pool in step with the registry until ctx ends: a
// member runs for each accepted cluster this replica owns or takes over,
// with its current kubeconfig, and none for the others. A kubeconfig the pool refuses is recorded in the
// registry as the cluster's refusal. Clusters settle in parallel, each
// one at a time, so that a member that is slow to stop delays only its
// own name.
func (p *Pool) follow(ctx context.Context) {
	p.opts.Registry.Subscribe(ctx).Run(ctx, followWorkers, p.settle)
}

func (p *Pool) settle(ctx context.Context, e registry.Event) {
	if e.New != nil && e.New.RunsHere() {
		if reg, generation, ok := e.New.Registration(); ok {
			if runsHere(e.Old) {
				if _, settled, _ := e.Old.Registration(); settled == generation {
					return // only its state or labels changed: the pool has it
				}
			}
			err := p.Set(reg)
			if err == nil {
				if !runsHere(e.Old) {
					p.opts.Logger.V(1).Info("Registration accepted", "cluster", e.Name)
				}
				return
			}
			if ctx.Err() != nil {
				return // the pool stopped
			}
			refusal, ok := errors.AsType[*kubeconfig.RefusedError](err)
			if !ok {
				refusal = &kubeconfig.RefusedError{Reason: "RegistrationFailed", Message: "the member could not be built"}
			}
			p.opts.Registry.Refuse(e.Name, generation, refusal)
			return
		}
	}
	if p.Remove(e.Name) && e.Removed() {
		p.opts.Logger.Info("Registration removed", "cluster", e.Name)
	}
}

func runsHere(c *registry.Cluster) bool { return c != nil && c.RunsHere() }
