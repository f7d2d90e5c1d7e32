package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// The package's API servers, shared by its envtest tests: a hub with the
// fleet's CRDs, and a member. nil without $KUBEBUILDER_ASSETS.
var testHub, testMember *envtest.Environment

// The tests set the process's loggers themselves (captureLogs).
var suite = &fleettest.Suite{
	MemberCount: 1,
	OwnLoggers:  true,
	Setup: func(s *fleettest.Suite) error {
		testHub, testMember = s.Hub, s.Members[0]
		return nil
	},
	Check: func(*fleettest.Suite) error {
		if leaked, err := publishedCredential(); err != nil || leaked != "" {
			return fmt.Errorf("credential material was published on the hub: %s %v", leaked, err)
		}
		return nil
	},
}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// publishedCredential scans what the package's managers and commands
// published on the hub for the credentials of every kubeconfig left in a
// hub Secret (those register wrote, and the tests'), and kubeconfigtest's.
func publishedCredential() (string, error) {
	if testHub == nil {
		return "", nil
	}
	c, err := client.New(testHub.Config, client.Options{})
	if err != nil {
		return "", err
	}
	secrets := &corev1.SecretList{}
	if err := c.List(context.Background(), secrets); err != nil {
		return "", err
	}
	credentials := slices.Clone(kubeconfigtest.Secrets)
	for _, s := range secrets.Items {
		for _, data := range s.Data {
			if found, err := kubeconfigtest.CredentialsOf(data); err == nil {
				credentials = append(credentials, found...)
			}
		}
	}
	return controlplane.FindPublishedCredential(context.Background(), testHub.Config, credentials)
}

// needAPIServers skips t without the package's API servers.
func needAPIServers(t *testing.T) {
	t.Helper()
	suite.Need(t)
}
