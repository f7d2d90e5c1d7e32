package fleettest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
)

// Suite is the API servers of a test binary: a hub with fleet-manager's
// CRDs and MemberCount members. Set the configuration fields, then call
// Run from TestMain; Run sets the others before the tests run.
type Suite struct {
	// MemberCount is how many member API servers start beside the hub.
	MemberCount int
	// Setup, if set, runs once the API servers are up, before the tests.
	Setup func(s *Suite) error
	// Parallel is how many of the package's parallel tests run at once
	// unless -test.parallel is given; default GOMAXPROCS, as go test's.
	// Tests that wait on API servers more than they compute may run more
	// at once than there are cores.
	Parallel int
	// Credentials is credential material of the package's own (beyond
	// the suite's kubeconfigs, kubeconfigtest's and the hostile ones)
	// that no log line and nothing published on the hub may hold.
	Credentials []string

	// Hub is the hub's API server, nil without $KUBEBUILDER_ASSETS.
	Hub *envtest.Environment
	// Members are the members' API servers.
	Members []*envtest.Environment
	// HubClient is an admin client of the hub that knows the core and
	// fleet-manager's kinds.
	HubClient client.Client
	// MemberClients are admin clients of the members, one per member.
	MemberClients []client.Client
	// Kubeconfigs are admin kubeconfigs of the members, credentials
	// embedded, as a registration Secret holds them.
	Kubeconfigs [][]byte
	// Logs holds every line logged through controller-runtime or klog
	// while the suite runs, the fleets' included.
	Logs *Logs

	namespaces    atomic.Int32
	profileOnce   sync.Once
	profileClient client.Client
	profileErr    error
	crdOnce       sync.Once
	crdErr        error
	usersMu       sync.Mutex
}

// Run is the body of a TestMain: it starts the API servers, runs the
// tests with m, checks that no credential leaked, stops the API servers
// and returns the exit code for os.Exit.
func (s *Suite) Run(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if s.Parallel > 0 && !given {
		if err := flag.Set("test.parallel", strconv.Itoa(s.Parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	s.Logs = &Logs{}
	logf.SetLogger(s.Logs.Logger())
	klog.SetLogger(s.Logs.Logger())
	return controlplane.RunTests(func() int {
		code := m.Run()
		if s.Hub == nil {
			return code
		}
		if err := s.checkCredentials(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return code
	}, 1+s.MemberCount, s.start)
}

// start sets the suite up on the API servers envs, the hub first.
func (s *Suite) start(envs []*envtest.Environment) error {
	hub, members := envs[0], envs[1:]
	if err := controlplane.InstallCRDs(hub); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	hubClient, err := client.New(hub.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	s.HubClient = hubClient
	for _, env := range members {
		cl, err := client.New(env.Config, client.Options{})
		if err != nil {
			return err
		}
		// One request now, so the client's connection predates any
		// goroutine baseline.
		if err := cl.List(context.Background(), &corev1.NamespaceList{}); err != nil {
			return err
		}
		kc, err := controlplane.AdminKubeconfig(env, "fleet-manager")
		if err != nil {
			return err
		}
		s.MemberClients = append(s.MemberClients, cl)
		s.Kubeconfigs = append(s.Kubeconfigs, kc)
	}
	s.Hub, s.Members = hub, members
	if s.Setup != nil {
		return s.Setup(s)
	}
	return nil
}

// checkCredentials fails if a log line, or what the suite's managers
// wrote on the hub for others to read, holds credential material.
func (s *Suite) checkCredentials() error {
	secrets, err := kubeconfigtest.CredentialsOf(s.Kubeconfigs...)
	if err != nil {
		return err
	}
	secrets = append(secrets, kubeconfigtest.Secrets...)
	secrets = append(secrets, HostileToken, HostilePassword)
	secrets = append(secrets, s.Credentials...)
	if leaked := s.Logs.Holding(secrets); leaked != "" {
		return fmt.Errorf("credential material appeared in the logs: %s", leaked)
	}
	leaked, err := controlplane.FindPublishedCredential(context.Background(), s.Hub.Config, secrets)
	if err != nil || leaked != "" {
		return fmt.Errorf("credential material was published on the hub: %s %v", leaked, err)
	}
	return nil
}

// Need skips t when the suite started no API servers.
func (s *Suite) Need(t testing.TB) {
	t.Helper()
	if s.Hub == nil {
		t.Skip("needs KUBEBUILDER_ASSETS (run `make test`)")
	}
}

// FleetNamespace creates, on the hub, a fleet namespace no other test of
// the suite uses, and returns its name.
func (s *Suite) FleetNamespace(t testing.TB) string {
	t.Helper()
	s.Need(t)
	ns := fmt.Sprintf("fleet-%d", s.namespaces.Add(1))
	CreateNamespace(t, s.HubClient, ns)
	return ns
}

// AddUser adds user to the API server env and returns it. Envtest's
// AddUser is not safe for concurrent use; parallel tests add users
// through this, one at a time.
func (s *Suite) AddUser(t testing.TB, env *envtest.Environment, user envtest.User) *envtest.AuthenticatedUser {
	t.Helper()
	s.Need(t)
	s.usersMu.Lock()
	defer s.usersMu.Unlock()
	u, err := env.AddUser(user, nil)
	if err != nil {
		t.Fatalf("adding user %q: %v", user.Name, err)
	}
	return u
}

// AdminKubeconfig returns a kubeconfig of a cluster admin named user of
// env, credentials embedded, as controlplane.AdminKubeconfig does, safe
// for parallel tests.
func (s *Suite) AdminKubeconfig(t testing.TB, env *envtest.Environment, user string) []byte {
	t.Helper()
	u := s.AddUser(t, env, envtest.User{Name: user, Groups: []string{"system:masters"}})
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
