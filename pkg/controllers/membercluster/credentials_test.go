package membercluster

import (
	"testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestCredentialTypesAreTheAPIs: the status takes the policy's credential
// type as it is, so each must be one the CRD's enum accepts.
func TestCredentialTypesAreTheAPIs(t *testing.T) {
	for policy, api := range map[kubeconfig.CredentialType]fleetv1alpha1.CredentialType{
		kubeconfig.CredentialToken:             fleetv1alpha1.CredentialTypeToken,
		kubeconfig.CredentialClientCertificate: fleetv1alpha1.CredentialTypeClientCertificate,
		kubeconfig.CredentialExecPlugin:        fleetv1alpha1.CredentialTypeExecPlugin,
		kubeconfig.CredentialBasicAuth:         fleetv1alpha1.CredentialTypeBasicAuth,
		kubeconfig.CredentialNone:              fleetv1alpha1.CredentialTypeNone,
	} {
		got := credentialStatus(&registry.Credentials{Credential: kubeconfig.Credential{Type: policy}})
		if got.Type != api {
			t.Errorf("credential type %q is status type %q, want %q", policy, got.Type, api)
		}
	}
}
