package fleet

import (
	"context"
	"errors"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// held reports whether c's work is held: it is accepted and Unhealthy,
// or this replica does not own it (yet).
func held(c *registry.Cluster) bool {
	return c.Accepted() && (c.State == fleetv1alpha1.MemberStateUnhealthy || !c.Owned())
}

// reportable reports whether c's refusal is this replica's to report.
func reportable(c *registry.Cluster) bool { return c != nil && c.Refusal != nil && c.Owned() }

var errRefused = errors.New("registration refused")

// lifecycle brings each cluster's registration and state to the rest of
// the manager: the work of an Unhealthy member, or of one this replica
// does not own yet, is held in every fleet controller's queue, cluster filters are asked again, the cluster's
// metrics follow it, and each refusal is logged and reported as an Event
// on the Secrets that claim the name, by the replica that owns it.
// Refusals carry no credential.
type lifecycle struct {
	m        *Manager
	log      logr.Logger
	recorder events.EventRecorder
}

func (l lifecycle) Start(ctx context.Context) error {
	l.m.registry.Subscribe(ctx).Run(ctx, 1, func(_ context.Context, e registry.Event) {
		if reportable(e.New) && !(reportable(e.Old) && *e.Old.Refusal == *e.New.Refusal) {
			l.reportRefusal(e.New)
		}
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

func (l lifecycle) reportRefusal(c *registry.Cluster) {
	l.log.Error(errRefused, "Registration refused", "cluster", c.Name, "reason", c.Refusal.Reason, "message", c.Refusal.Message)
	for _, claim := range c.Claims {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: claim.Source.Namespace, Name: claim.Source.Name}}
		l.recorder.Eventf(secret, nil, corev1.EventTypeWarning, c.Refusal.Reason, "Register", "cluster %s: %s", c.Name, c.Refusal.Message)
	}
}
