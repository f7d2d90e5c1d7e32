package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

func TestHubProbeSaysWhatIsWrong(t *testing.T) {
	needAPIServers(t)
	unreachable := rest.CopyConfig(testHub.Config)
	unreachable.Host = "https://" + closedAddress(t)
	badToken := rest.AnonymousClientConfig(testHub.Config)
	badToken.BearerToken = "not-a-token"
	cases := map[string]struct {
		cfg     *rest.Config
		want    string
		notWant string
	}{
		"unreachable":    {cfg: unreachable, want: "is unreachable"},
		"refused token":  {cfg: badToken, want: "401 Unauthorized", notWant: "unreachable"},
		"no credentials": {cfg: rest.AnonymousClientConfig(testHub.Config), want: "sees no credentials", notWant: "unknown"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := probeHub(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Fatalf("probeHub: %v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "not-a-token") {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
	user, err := probeHub(context.Background(), testHub.Config)
	if err != nil || user == "" {
		t.Fatalf("probeHub as an admin: user %q, %v", user, err)
	}
}

func TestNoHubKubeconfigNamesTheFlag(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	_, err := hubConfig(hubFlags{})
	if err == nil || !strings.Contains(err.Error(), "--hub-kubeconfig") || strings.Contains(err.Error(), "KUBERNETES_MASTER") {
		t.Fatalf("hubConfig: %v, want an error naming --hub-kubeconfig", err)
	}
}

// TestReadyOnlyOnceRegistrationsAreRead runs the manager as a user that
// may not read the fleet's Secrets, nor the MemberClusters that record
// the identities of its clusters: it stays unready until it may.
func TestReadyOnlyOnceRegistrationsAreRead(t *testing.T) {
	needAPIServers(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin, err := client.New(testHub.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "readyz"}}
	if err := admin.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const userName = "fleet-manager-without-rbac"
	user, err := testHub.AddUser(envtest.User{Name: userName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	probeAddr := closedAddress(t)
	f, err := parseRunFlags([]string{"--hub-kubeconfig=" + path, "--namespace=" + ns.Name, "--metrics-bind-address=0", "--health-probe-bind-address=" + probeAddr, "--state-dir=" + t.TempDir()}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, f, logr.Discard()) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	status := func(path string) int {
		resp, err := http.Get("http://" + probeAddr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	readyz := func() int { return status("/readyz") }
	healthz := func() int { return status("/healthz") }
	poll.Until(t, "/healthz answers 200", func() bool { return healthz() == http.StatusOK })
	// A manager that may not list its Secrets stays unready.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if code := readyz(); code == http.StatusOK {
			t.Fatal("/readyz answers 200 while the Secrets are forbidden")
		}
		time.Sleep(200 * time.Millisecond)
	}

	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "registrations"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "registrations"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   subjects,
	}
	records := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "readyz-cluster-identities"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"memberclusters"}, Verbs: []string{"get", "list", "watch"}}},
	}
	recordsBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: records.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: records.Name},
		Subjects:   subjects,
	}
	for _, obj := range []client.Object{role, binding, records, recordsBinding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "/readyz answers 200 once the Secrets and MemberClusters may be read", func() bool { return readyz() == http.StatusOK })
}

// closedAddress returns a loopback address nothing listens on.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}

func TestHubFlagsPickTheKubeconfigAndContext(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg := clientcmdapi.NewConfig()
	for _, name := range []string{"a", "b"} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + name + ".example:6443"}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-" + name}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "a"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		hub  hubFlags
		want string
	}{
		{hubFlags{kubeconfig: path}, "https://a.example:6443"},
		{hubFlags{kubeconfig: path, context: "b"}, "https://b.example:6443"},
	} {
		got, err := hubConfig(tc.hub)
		if err != nil || got.Host != tc.want {
			t.Errorf("hubConfig(%+v) = %v, %v; want host %s", tc.hub, got, err, tc.want)
		}
	}
	t.Setenv("KUBECONFIG", path)
	if got, err := (&hubFlags{context: "b"}).restConfig(); err != nil || got.Host != "https://b.example:6443" {
		t.Errorf("--hub-context=b with $KUBECONFIG: %v, %v", got, err)
	}
	if _, err := (&hubFlags{kubeconfig: path, context: "c"}).restConfig(); err == nil || !strings.Contains(err.Error(), `context "c"`) {
		t.Errorf("--hub-context=c: %v, want an error naming the missing context", err)
	}
}

// TestSecondManagerOnAStateDirFails: a manager whose --state-dir another
// holds stops with a clear error within the journal's lock timeout.
func TestSecondManagerOnAStateDirFails(t *testing.T) {
	needAPIServers(t)
	dir := t.TempDir()
	held, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	kubeconfig, err := controlplane.AdminKubeconfig(testHub, "second-manager")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseRunFlags([]string{"--hub-kubeconfig=" + writeTemp(t, "hub.kubeconfig", kubeconfig), "--state-dir=" + dir,
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	f.skipNameValidation = true
	start := time.Now()
	err = run(t.Context(), f, logr.Discard())
	if !errors.Is(err, journal.ErrLocked) || !strings.Contains(err.Error(), "another fleet-manager") {
		t.Fatalf("run on a held state dir: %v, want an error saying another manager holds it", err)
	}
	if took := time.Since(start); took > journal.DefaultLockTimeout+5*time.Second {
		t.Errorf("it took %s to give up", took)
	}
	t.Log(err)
}

// TestCorruptJournalIsLoggedAndReplaced: a journal that cannot be read is
// moved aside with an error log line, and the manager goes on with a new
// one in the same directory.
func TestCorruptJournalIsLoggedAndReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, journal.FileName), []byte("truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuffer.Buffer{}
	logger, stop := captureLogs(logs)
	defer stop()
	rj, err := openJournal(dir, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer rj.close()
	rec := rj.Recovered()
	if rj.tempDir != "" || rec == nil || rec.MovedTo == "" || !strings.Contains(logs.String(), "The journal could not be used") || !strings.Contains(logs.String(), rec.MovedTo) {
		t.Fatalf("recovery %+v, temporary dir %q; logs:\n%s", rec, rj.tempDir, logs.String())
	}
}
