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
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// The package's API servers, shared by its envtest tests: a hub with the
// fleet's CRDs, and a member. nil without $KUBEBUILDER_ASSETS.
var testHub, testMember *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(func() int {
		code := m.Run()
		if leaked, err := publishedCredential(); err != nil || leaked != "" {
			fmt.Fprintf(os.Stderr, "credential material was published on the hub: %s %v\n", leaked, err)
			return 1
		}
		return code
	}, 2, func(envs []*envtest.Environment) error {
		testHub, testMember = envs[0], envs[1]
		return controlplane.InstallCRDs(testHub)
	}))
}

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
	if testHub == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
}
