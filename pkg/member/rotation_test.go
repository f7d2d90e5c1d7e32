package member_test

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

const (
	rotatedMessage  = "Rotated member credentials"
	replacedMessage = "Replacing member"
)

func TestPoolSetRotatesOnlyCredentials(t *testing.T) {
	certOne, keyOne, err := certutil.GenerateSelfSignedCertKey("one", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certTwo, keyTwo, err := certutil.GenerateSelfSignedCertKey("two", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	type edit = func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
	onCluster := func(f func(*clientcmdapi.Cluster)) edit {
		return func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { f(cl) }
	}
	onUser := func(f func(*clientcmdapi.AuthInfo)) edit {
		return func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { f(u) }
	}
	token := func(tok string) edit { return onUser(func(u *clientcmdapi.AuthInfo) { u.Token = tok }) }
	clientCert := func(cert, key []byte) edit {
		return onUser(func(u *clientcmdapi.AuthInfo) { u.ClientCertificateData, u.ClientKeyData = cert, key })
	}
	proxy := onCluster(func(cl *clientcmdapi.Cluster) { cl.ProxyURL = "http://proxy.example.com:3128" })

	// Every kubeconfig has a CA, a token and a client certificate.
	for name, tc := range map[string]struct {
		from, to edit
		rotated  bool // else replaced
	}{
		"token":                      {to: token("tok-two"), rotated: true},
		"client certificate":         {to: clientCert(certTwo, keyTwo), rotated: true},
		"token behind a proxy":       {from: proxy, to: token("tok-two"), rotated: true},
		"server":                     {to: onCluster(func(cl *clientcmdapi.Cluster) { cl.Server = "https://other.example.com:6443" })},
		"CA":                         {to: onCluster(func(cl *clientcmdapi.Cluster) { cl.CertificateAuthorityData = certTwo })},
		"TLS server name":            {to: onCluster(func(cl *clientcmdapi.Cluster) { cl.TLSServerName = "other.example.com" })},
		"proxy":                      {to: proxy},
		"insecure":                   {to: onCluster(func(cl *clientcmdapi.Cluster) { cl.CertificateAuthorityData, cl.InsecureSkipTLSVerify = nil, true })},
		"token removed":              {to: token("")},
		"client certificate removed": {to: clientCert(nil, nil)},
		"impersonation":              {to: onUser(func(u *clientcmdapi.AuthInfo) { u.Impersonate = "someone" })},
	} {
		t.Run(name, func(t *testing.T) {
			build := func(edits ...edit) []byte {
				return kubeconfigtest.Build(t, func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
					cl.CertificateAuthorityData = certOne
					u.ClientCertificateData, u.ClientKeyData = certOne, keyOne
					for _, e := range edits {
						if e != nil {
							e(cl, u)
						}
					}
				})
			}
			logs := &messages{}
			pool, err := member.NewPool(member.Options{
				Registry: member.NewObservedRegistry(nil),
				Engage:   engageNothing,
				Logger:   logs.logger(),
				Policy:   kubeconfigtest.Permissive,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Remove("member")
			for _, kc := range [][]byte{
				build(tc.from),
				build(tc.from, tc.to),
				build(tc.from, tc.to), // the same bytes again: nothing to do
			} {
				if err := pool.Set(registry.Registration{ClusterName: "member", Kubeconfig: kc}); err != nil {
					t.Fatal(err)
				}
			}
			want := [2]int{0, 1}
			if tc.rotated {
				want = [2]int{1, 0}
			}
			if got := [2]int{logs.count(rotatedMessage), logs.count(replacedMessage)}; got != want {
				t.Fatalf("logged %d rotations and %d replacements, want %d and %d", got[0], got[1], want[0], want[1])
			}
		})
	}
}

func TestPoolRotatesServiceAccountToken(t *testing.T) {
	needEnvtest(t)
	env, admin := members[0], memberClients[0]
	ctx := t.Context()

	// envtest runs no token controller: tokens are minted with TokenRequest,
	// bound to Secrets, and revoked by deleting their Secret.
	const ns = "rotation-token"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-manager"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rotation-fleet-manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	secretA := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token-a"}}
	secretB := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token-b"}}
	for _, obj := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, sa, binding, secretA, secretB} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = admin.Delete(context.WithoutCancel(ctx), binding) })
	mint := func(secret *corev1.Secret) string {
		t.Helper()
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID},
		}}
		if err := admin.SubResource("token").Create(ctx, sa, req); err != nil {
			t.Fatal(err)
		}
		return req.Status.Token
	}

	// The member is reached through a proxy, which shows its connections.
	viaProxy, proxy, err := controlplane.ViaProxy(kubeconfig(t, env))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	raw, err := clientcmd.Load(viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	kctx := raw.Contexts[raw.CurrentContext]

	w := newWatcher()
	defer w.queue.ShutDown()
	logs := &messages{}
	var probesOK, leftReady atomic.Int64
	var ready atomic.Bool
	pool := startPool(t, member.Options{
		Engage: w.engage,
		Logger: logs.logger(),
		Health: member.HealthOptions{Interval: 200 * time.Millisecond, Timeout: time.Second},
		Registry: member.NewObservedRegistry(func(_ string, s fleetv1alpha1.MemberState, r *registry.ProbeResult) {
			if r != nil && r.Err == nil {
				probesOK.Add(1)
			}
			if s == fleetv1alpha1.MemberStateReady {
				ready.Store(true)
			} else if ready.Load() {
				leftReady.Add(1)
			}
		}),
	})
	set := func(token string) {
		t.Helper()
		raw.AuthInfos[kctx.AuthInfo] = &clientcmdapi.AuthInfo{Token: token}
		if err := pool.Set(registry.Registration{ClusterName: "rotating", Kubeconfig: kubeconfigtest.Write(t, raw)}); err != nil {
			t.Fatal(err)
		}
	}

	tokenA := mint(secretA)
	set(tokenA)
	first := <-w.engaged
	poll.Until(t, "member Ready", ready.Load)
	createConfigMap(t, admin, ns, "before", nil)
	for r := w.next(t); r.Name != "before"; r = w.next(t) {
	}

	opened := proxy.Accepted()
	if len(opened) == 0 {
		t.Fatal("the member has no connection open")
	}
	set(mint(secretB))
	poll.Until(t, "connections opened with token A closed, new ones open", func() bool {
		now := proxy.Accepted()
		return len(now) > 0 && !slices.ContainsFunc(opened, func(c net.Conn) bool { return slices.Contains(now, c) })
	})
	if err := admin.Delete(ctx, secretA); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "token A revoked", func() bool { return apierrors.IsUnauthorized(review(ctx, env.Config, tokenA)) })

	createConfigMap(t, admin, ns, "after", nil)
	for r := w.next(t); r.Name != "after"; r = w.next(t) {
	}
	probed := probesOK.Load()
	poll.Until(t, "three more probes succeed", func() bool { return probesOK.Load() >= probed+3 })
	if n := leftReady.Load(); n > 0 {
		t.Fatalf("the member left Ready on %d probes", n)
	}
	assertRotatedInPlace(t, pool, w, logs, "rotating", first.cl)
}

func TestPoolRotatesClientCertificate(t *testing.T) {
	needEnvtest(t)
	env, admin := members[1], memberClients[1]
	ctx := t.Context()
	one, err := controlplane.AdminKubeconfig(env, "rotation-one")
	if err != nil {
		t.Fatal(err)
	}
	two, err := controlplane.AdminKubeconfig(env, "rotation-two")
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher()
	defer w.queue.ShutDown()
	logs := &messages{}
	pool := startPool(t, member.Options{Engage: w.engage, Logger: logs.logger()})

	if err := pool.Set(registry.Registration{ClusterName: "rotating", Kubeconfig: one}); err != nil {
		t.Fatal(err)
	}
	first := <-w.engaged
	if user, err := whoAmI(ctx, first.cl); err != nil || user != "rotation-one" {
		t.Fatalf("the member authenticated as %q, %v; want rotation-one", user, err)
	}
	if err := pool.Set(registry.Registration{ClusterName: "rotating", Kubeconfig: two}); err != nil {
		t.Fatal(err)
	}
	// Rotation closed every connection made with the old certificate, so
	// no request can succeed with it.
	poll.Until(t, "the member authenticates again", func() bool {
		user, err := whoAmI(ctx, first.cl)
		if err == nil && user != "rotation-two" {
			t.Fatalf("after rotation the member authenticated as %q, want rotation-two", user)
		}
		return err == nil
	})
	createConfigMap(t, admin, "rotation-cert", "after", nil)
	for r := w.next(t); r.Name != "after"; r = w.next(t) {
	}
	assertRotatedInPlace(t, pool, w, logs, "rotating", first.cl)
}

// assertRotatedInPlace fails unless member name still runs cl, was
// engaged only once, and had its credentials rotated once.
func assertRotatedInPlace(t *testing.T, pool *member.Pool, w *watcher, logs *messages, name string, cl cluster.Cluster) {
	t.Helper()
	select {
	case e := <-w.engaged:
		t.Fatalf("member %q was engaged again: its cache was rebuilt", e.name)
	default:
	}
	if got, err := pool.Get(name); err != nil || got != cl {
		t.Fatalf("Get returned %v, %v; want the cluster built before the rotation", got, err)
	}
	if rotated, replaced := logs.count(rotatedMessage), logs.count(replacedMessage); rotated != 1 || replaced != 0 {
		t.Fatalf("logged %d rotations and %d replacements, want 1 and 0", rotated, replaced)
	}
	if s, _ := pool.State(name); s != fleetv1alpha1.MemberStateReady {
		t.Fatalf("member is %s, want Ready", s)
	}
}

// review makes a SelfSubjectReview on the API server of cfg with token
// alone, and returns its error.
func review(ctx context.Context, cfg *rest.Config, token string) error {
	reviews, err := authenticationv1client.NewForConfig(&rest.Config{
		Host:            cfg.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData},
	})
	if err != nil {
		return err
	}
	_, err = reviews.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}

// whoAmI returns the user cl's client authenticates as.
func whoAmI(ctx context.Context, cl cluster.Cluster) (string, error) {
	r := &authenticationv1.SelfSubjectReview{}
	if err := cl.GetClient().Create(ctx, r); err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// messages records the messages a logger logs.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var line struct {
			Msg string `json:"msg"`
		}
		_ = json.Unmarshal([]byte(obj), &line)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.msgs = append(m.msgs, line.Msg)
	}, funcr.Options{})
}

func (m *messages) count(msg string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, got := range m.msgs {
		if got == msg {
			n++
		}
	}
	return n
}
