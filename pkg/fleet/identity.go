package fleet

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// identity reads the fleet's identity once the manager starts, on every
// replica, retrying until the hub gives it, and hands it to whoever waits.
type identity struct {
	namespace string
	reader    client.Reader
	writer    client.Writer
	log       logr.Logger

	resolved chan struct{}
	id       string
}

func (i *identity) Start(ctx context.Context) error {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 7, Cap: time.Minute}
	for {
		id, err := registry.FleetID(ctx, i.reader, i.writer, i.namespace)
		if err == nil {
			i.id = id
			close(i.resolved)
			i.log.V(1).Info("Fleet identity read", "fleetID", id)
			return nil
		}
		if apierrors.IsNotFound(err) {
			i.log.Info("Waiting for the fleet namespace to hold the fleet's identity", "namespace", i.namespace, "reason", err.Error())
		} else {
			i.log.Error(err, "Reading the fleet's identity; objects in members are not written until it is read (the manager needs get and create on ConfigMaps in the fleet namespace, deploy/role.yaml)")
		}
		select {
		case <-time.After(backoff.Step()):
		case <-ctx.Done():
			return nil
		}
	}
}

// NeedLeaderElection is false: every replica knows its fleet.
func (*identity) NeedLeaderElection() bool { return false }

// FleetID returns the fleet's identity, unique across hubs, once the
// manager has read it from the hub (or created it there), waiting until it
// has or ctx ends. Stamp it, as fleetv1alpha1.FleetIDLabel, on whatever a
// fleet controller creates in a member, and take nothing there for the
// fleet's own that does not carry it.
func (m *Manager) FleetID(ctx context.Context) (string, error) {
	select {
	case <-m.identity.resolved:
		return m.identity.id, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
