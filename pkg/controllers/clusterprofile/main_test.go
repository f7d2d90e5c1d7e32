package clusterprofile_test

import (
	"os"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// One hub and two members for the package's tests.
var suite = &fleettest.Suite{MemberCount: 2, Parallel: 4}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// memberClusters adds the MemberCluster controller, as the binary runs it
// beside ClusterProfile export.
func memberClusters(m *fleet.Manager) error { return membercluster.Add(m, membercluster.Options{}) }
