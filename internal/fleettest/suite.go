package fleettest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// Suite is the API servers of a test binary: a hub (or HubCount hubs)
// with fleet-manager's CRDs and MemberCount members. Set the
// configuration fields, then call Run from TestMain; Run sets the others
// before the tests run.
type Suite struct {
	// MemberCount is how many member API servers start beside the hub.
	MemberCount int
	// HubCount is how many hubs start; default 1. Every manager on a hub
	// reads what every fleet published there: a test whose fleets must be
	// the only ones on their hub takes it with OwnHubs, and HubCount
	// bounds how many such tests run at once.
	HubCount int
	// Audit has every API server log the write requests it serves, which
	// the tests read with Writes.
	Audit bool
	// Setup, if set, runs once the API servers are up, before the tests.
	Setup func(s *Suite) error
	// Check, if set, runs once the tests ended, before the API servers
	// stop, beside the suite's check of credentials: its error fails the
	// tests.
	Check func(s *Suite) error
	// Parallel is how many of the package's parallel tests run at once
	// unless -test.parallel is given; default GOMAXPROCS, as go test's.
	// Tests that wait on API servers more than they compute may run more
	// at once than there are cores.
	Parallel int
	// OwnLoggers leaves the process's loggers (controller-runtime's and
	// klog's) to the package's tests: Logs then holds only the lines of
	// the suite's fleets.
	OwnLoggers bool
	// Credentials is credential material of the package's own (beyond
	// the suite's kubeconfigs, kubeconfigtest's and the hostile ones)
	// that no log line and nothing published on the hub may hold.
	Credentials []string

	// Hub is the hub's API server, nil without $KUBEBUILDER_ASSETS.
	Hub *envtest.Environment
	// Hubs are the hubs, HubCount of them, the first being Hub.
	Hubs []*Hub
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

	envs          []*envtest.Environment
	auditDir      string
	hubsMu        sync.Mutex
	hubFreed      *sync.Cond
	hubTaken      []bool
	namespaces    atomic.Int32
	profileOnce   sync.Once
	profileClient client.Client
	profileErr    error
	crdOnce       sync.Once
	crdErr        error
	usersMu       sync.Mutex
}

// Hub is one hub of the suite: its API server, with fleet-manager's
// CRDs, and an admin client of it that knows the core and fleet-manager's
// kinds.
type Hub struct {
	Env    *envtest.Environment
	Client client.Client
}

// Run is the body of a TestMain: it starts the API servers, runs the
// tests with m, checks that no reconciler panicked and no credential
// leaked, stops the API servers and returns the exit code for os.Exit. Without $KUBEBUILDER_ASSETS it
// starts none and only runs the tests.
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
	if !s.OwnLoggers {
		logf.SetLogger(s.Logs.Logger())
		klog.SetLogger(s.Logs.Logger())
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return m.Run()
	}
	hubs := max(s.HubCount, 1)
	envs, err := s.startAPIServers(hubs + s.MemberCount)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	if err := s.start(envs, hubs); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
		if line := s.Logs.First("Observed a panic"); line != "" {
			fmt.Fprintln(os.Stderr, "a reconciler panicked:", line)
			code = 1
		}
		if err := s.checkCredentials(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
		if s.Check != nil {
			if err := s.Check(s); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	if err := controlplane.Stop(envs); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if s.auditDir != "" {
		_ = os.RemoveAll(s.auditDir)
	}
	return code
}

// startAPIServers starts n API servers, audited if the suite Audits.
func (s *Suite) startAPIServers(n int) ([]*envtest.Environment, error) {
	if !s.Audit {
		return controlplane.Start(n)
	}
	dir, err := os.MkdirTemp("", "fleettest-audit-")
	if err != nil {
		return nil, err
	}
	s.auditDir = dir
	return controlplane.StartAudited(n, dir)
}

// start sets the suite up on the API servers envs, the hubs first.
func (s *Suite) start(envs []*envtest.Environment, hubCount int) error {
	s.envs = envs
	hubEnvs, members := envs[:hubCount], envs[hubCount:]
	errs := make([]error, len(hubEnvs))
	var wg sync.WaitGroup
	for i, env := range hubEnvs {
		wg.Go(func() { errs[i] = controlplane.InstallCRDs(env) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	var hubs []*Hub
	for _, env := range hubEnvs {
		cl, err := client.New(env.Config, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		hubs = append(hubs, &Hub{Env: env, Client: cl})
	}
	s.HubClient = hubs[0].Client
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
	s.Hub, s.Hubs, s.Members = hubs[0].Env, hubs, members
	s.hubTaken = make([]bool, len(hubs))
	s.hubFreed = sync.NewCond(&s.hubsMu)
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
	for _, h := range s.Hubs {
		leaked, err := controlplane.FindPublishedCredential(context.Background(), h.Env.Config, secrets)
		if err != nil || leaked != "" {
			return fmt.Errorf("credential material was published on the hub: %s %v", leaked, err)
		}
	}
	return nil
}

// OwnHubs gives t n hubs that no other test takes until t ends, waiting
// until n are free. A fleet started on one of them (FleetOptions.Hub) is
// alone on its hub, but for the other fleets of t.
func (s *Suite) OwnHubs(t testing.TB, n int) []*Hub {
	t.Helper()
	s.Need(t)
	if n > len(s.Hubs) {
		t.Fatalf("%d hubs asked for, the suite has %d (HubCount)", n, len(s.Hubs))
	}
	s.hubsMu.Lock()
	defer s.hubsMu.Unlock()
	for {
		var free []int
		for i, taken := range s.hubTaken {
			if !taken {
				free = append(free, i)
			}
		}
		if len(free) >= n {
			var hubs []*Hub
			for _, i := range free[:n] {
				s.hubTaken[i] = true
				hubs = append(hubs, s.Hubs[i])
			}
			t.Cleanup(func() {
				s.hubsMu.Lock()
				defer s.hubsMu.Unlock()
				for _, i := range free[:n] {
					s.hubTaken[i] = false
				}
				s.hubFreed.Broadcast()
			})
			return hubs
		}
		s.hubFreed.Wait()
	}
}

// Writes returns the write requests API server env, of a suite that
// Audits, completed after since, whose user agent starts with userAgent.
func (s *Suite) Writes(t testing.TB, env *envtest.Environment, userAgent string, since time.Time) []controlplane.Write {
	t.Helper()
	s.Need(t)
	if s.auditDir == "" {
		t.Fatal("the suite does not audit its API servers (Suite.Audit)")
	}
	i := slices.Index(s.envs, env)
	if i < 0 {
		t.Fatal("not an API server of the suite")
	}
	writes, err := controlplane.Writes(controlplane.AuditLog(s.auditDir, i), userAgent, since)
	if err != nil {
		t.Fatal(err)
	}
	return writes
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
	ns := s.Name("fleet")
	CreateNamespace(t, s.HubClient, ns)
	return ns
}

// Name returns prefix and a number no other Name or FleetNamespace of
// the suite returned: a name of the test's own, for a namespace, a user
// or a cluster.
func (s *Suite) Name(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, s.namespaces.Add(1))
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
