package tokenrenewal_test

import (
	"errors"
	"os"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/controllers/tokenrenewal"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// One hub and two members for the package's tests.
var suite = &fleettest.Suite{MemberCount: 2, Parallel: 4}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// renewal adds the token renewal with opts and the MemberCluster
// controller, which shows the credentials it publishes.
func renewal(opts tokenrenewal.Options) func(m *fleet.Manager) error {
	return func(m *fleet.Manager) error {
		opts.Credentials = tokenrenewal.NewCredentials()
		return errors.Join(
			tokenrenewal.Add(m, opts),
			membercluster.Add(m, membercluster.Options{Credentials: opts.Credentials}),
		)
	}
}
