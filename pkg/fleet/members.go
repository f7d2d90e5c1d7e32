package fleet

import (
	"context"
	"errors"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// memberSync keeps the member pool in step with the registry: a member
// runs for each accepted cluster, with its current kubeconfig, and none
// for the others. A kubeconfig the pool refuses is recorded in the
// registry as the cluster's refusal. Each refusal is logged and reported
// as an Event on the Secrets that claim the name.
//
// Clusters settle in parallel, each one at a time, so that a member that
// is slow to stop delays only its own name.
type memberSync struct {
	m        *Manager
	log      logr.Logger
	recorder events.EventRecorder
}

// memberSyncWorkers is how many clusters settle at once. Settling is
// mostly CPU work (parsing the kubeconfig, building the member's
// transport), but replacing or removing a member waits until it stopped.
const memberSyncWorkers = 16

func (s *memberSync) Start(ctx context.Context) error {
	s.m.registry.Subscribe(ctx).Run(ctx, memberSyncWorkers, s.settle)
	return nil
}

// NeedLeaderElection is true: only the leader runs members.
func (*memberSync) NeedLeaderElection() bool { return true }

func (s *memberSync) settle(ctx context.Context, e registry.Event) {
	log := s.log.WithValues("cluster", e.Name)
	if e.New != nil {
		if reg, generation, ok := e.New.Registration(); ok {
			if accepted(e.Old) {
				if _, settled, _ := e.Old.Registration(); settled == generation {
					return // only its state or labels changed: the pool has it
				}
			}
			err := s.m.pool.Set(reg)
			if err == nil {
				if !accepted(e.Old) {
					log.V(1).Info("Registration accepted")
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
			// The registry hands the refusal back as the next event.
			s.m.registry.Refuse(e.Name, generation, refusal)
			return
		}
	}
	if s.m.pool.Remove(e.Name) && e.Removed() {
		log.Info("Registration removed")
	}
	if e.Refused() {
		s.reportRefusal(log, e.New)
	}
}

func accepted(c *registry.Cluster) bool { return c != nil && c.Accepted() }

// held reports whether c's work is held: it is accepted and Unhealthy.
func held(c *registry.Cluster) bool {
	return c.Accepted() && c.State == fleetv1alpha1.MemberStateUnhealthy
}

var errRefused = errors.New("registration refused")

// reportRefusal logs c's refusal and records it as an Event on every
// Secret that claims c's name. Refusals carry no credential.
func (s *memberSync) reportRefusal(log logr.Logger, c *registry.Cluster) {
	log.Error(errRefused, "Registration refused", "reason", c.Refusal.Reason, "message", c.Refusal.Message)
	for _, claim := range c.Claims {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: claim.Source.Namespace, Name: claim.Source.Name}}
		s.recorder.Eventf(secret, nil, corev1.EventTypeWarning, c.Refusal.Reason, "Register", "cluster %s: %s", c.Name, c.Refusal.Message)
	}
}

// lifecycle brings each cluster's state to the rest of the manager: the
// work of an Unhealthy member is held in every fleet controller's queue,
// cluster filters are asked again, and the cluster's metrics follow it.
type lifecycle struct{ m *Manager }

func (l lifecycle) Start(ctx context.Context) error {
	l.m.registry.Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) {
		l.m.metrics.follow(e.Name, e.New)
		holdWork := e.New != nil && held(e.New)
		l.m.controllersMu.Lock()
		for _, c := range l.m.controllers {
			c.hold(e.Name, holdWork)
		}
		l.m.controllersMu.Unlock()
		l.m.engager.Recheck(e.Name)
	})
	return nil
}

// NeedLeaderElection is true: members and controllers run on the leader.
func (lifecycle) NeedLeaderElection() bool { return true }
