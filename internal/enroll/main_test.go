package enroll_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// The package's API servers: a hub with the fleet's CRDs, and a member.
var hubEnv, memberEnv *envtest.Environment

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(fleetv1alpha1.AddToScheme(scheme))
}

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m.Run, 2, func(envs []*envtest.Environment) error {
		hubEnv, memberEnv = envs[0], envs[1]
		if err := controlplane.InstallCRDs(hubEnv); err != nil {
			return err
		}
		return controlplane.AggregateClusterRoles(memberEnv.Config)
	}))
}

// clients returns admin clients of the hub and the member, and a fresh
// fleet namespace on the hub. Whatever the test registers in the member
// is removed when it ends, so the next test finds the member bare.
func clients(t *testing.T) (hub, member client.Client, fleetNS string) {
	t.Helper()
	if hubEnv == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
	var err error
	if hub, err = client.New(hubEnv.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if member, err = client.New(memberEnv.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := hub.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resetMember(t) })
	return hub, member, ns.Name
}

// resetMember removes what any register left in the member, and
// fleet-system, which envtest, without a namespace controller, would
// otherwise keep terminating forever.
func resetMember(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"eu-1", "eu-2", "other"} {
		if _, err := enroll.Cleanup(ctx, memberEnv.Config, name); err != nil {
			t.Errorf("cleanup of %s: %v", name, err)
		}
	}
	if err := controlplane.RemoveNamespace(ctx, memberEnv.Config, enroll.MemberNamespace); err != nil {
		t.Fatal(err)
	}
}
