package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/internal/syncbuffer"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// Where deploy/ puts the manager.
const (
	deployNamespace      = "fleet-system"
	deployServiceAccount = "fleet-manager"
)

// TestDeploy applies deploy/ to the hub as `kubectl apply -k deploy/` and
// then `kubectl apply --server-side -k deploy/` would, and runs the
// manager in-process with the Deployment's arguments and nothing but its
// ServiceAccount's token: with the native format, and with each example
// of deploy/formats. The hub has no kubelet, so the Deployment's pods
// never run.
func TestDeploy(t *testing.T) {
	needAPIServers(t)
	d := applyDeploy(t)

	t.Run("manifests", func(t *testing.T) { checkManifests(t, d.rendered) })
	t.Run("tenants cannot widen their reach", d.checkTenants)

	t.Run("native", func(t *testing.T) {
		m := d.startManager(t)
		registered := d.registerNative(t, "deploy-native")
		refused := d.refuseNative(t, "deploy-native-refused")
		m.waitReady(t, registered)
		m.waitEvent(t, refused)
		m.checkLease(t)
		m.checkMetrics(t)
		d.checkAccess(t, nil, nil)
		d.checkPropagation(t)
		m.checkNoForbidden(t)
	})

	t.Run("propagate secrets", func(t *testing.T) {
		const ns = "secrets-opt-in"
		d.createNamespace(t, ns)
		example := readFile(t, filepath.Join(deployDir(t), "examples", "propagate-secrets.yaml"))
		d.kubectlApply(t, bytes.ReplaceAll(example, []byte("namespace: team-a"), []byte("namespace: "+ns)))
		for _, verb := range []string{"get", "list", "watch"} {
			if a := (access{verb: verb, resource: "secrets", namespace: ns}); !d.allowed(t, a) {
				t.Errorf("after the opt-in, the manager's ServiceAccount may not %s", a)
			}
		}
		d.wantDenied(t, access{verb: "list", resource: "secrets", namespace: "team-a"})
		d.wantDenied(t, access{verb: "update", resource: "secrets", namespace: ns})
	})

	t.Run("argocd", func(t *testing.T) {
		const ns = "argocd"
		d.createNamespace(t, ns)
		d.kubectlApplyFile(t, filepath.Join(deployDir(t), "formats", "argocd-role.yaml"))
		m := d.startManager(t, "--argocd-secrets")
		d.register(t, d.argoCDSecret(t, ns, "deploy-argocd", false))
		refused := d.register(t, d.argoCDSecret(t, ns, "deploy-argocd-refused", true))
		m.waitReady(t, "deploy-argocd")
		m.waitEvent(t, refused)
		d.checkAccess(t, formatAccess(ns), []access{
			{verb: "create", resource: "secrets", namespace: ns},
			{verb: "update", resource: "secrets", namespace: ns},
		})
		m.checkNoForbidden(t)
	})

	t.Run("capi in its namespaces", func(t *testing.T) {
		const ns = "capi-clusters"
		d.createNamespace(t, ns)
		// As the file's comment says: its ClusterRole, bound in each
		// namespace by a RoleBinding instead of its ClusterRoleBinding.
		capi := splitDocuments(t, readFile(t, filepath.Join(deployDir(t), "formats", "capi-clusterrole.yaml")))
		d.kubectlApply(t, documentOfKind(t, capi, "ClusterRole"))
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-manager-capi"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-manager-capi"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: deployServiceAccount, Namespace: deployNamespace}},
		}
		d.create(t, binding)
		m := d.startManager(t, "--capi-secrets", "--capi-namespaces="+ns)
		d.register(t, d.capiSecret(t, ns, "deploy-capi", false))
		refused := d.register(t, d.capiSecret(t, ns, "deploy-capi-refused", true))
		m.waitReady(t, ns+".deploy-capi")
		m.waitEvent(t, refused)
		d.checkAccess(t, formatAccess(ns), []access{
			{verb: "create", resource: "secrets", namespace: ns},
			{verb: "delete", resource: "secrets", namespace: ns},
		})
		m.checkNoForbidden(t)
	})

	t.Run("capi in every namespace", func(t *testing.T) {
		const ns = "capi-everywhere"
		d.createNamespace(t, ns)
		d.kubectlApplyFile(t, filepath.Join(deployDir(t), "formats", "capi-clusterrole.yaml"))
		m := d.startManager(t, "--capi-secrets")
		d.register(t, d.capiSecret(t, ns, "deploy-capi", false))
		refused := d.register(t, d.capiSecret(t, ns, "deploy-capi-refused", true))
		m.waitReady(t, ns+".deploy-capi")
		m.waitEvent(t, refused)
		// Reading every Secret, and reporting on any, is what this
		// example grants; writing any is not.
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			d.wantDenied(t, access{verb: verb, resource: "secrets", namespace: "kube-system"})
		}
		m.checkNoForbidden(t)
	})

	t.Run("clusterprofiles", func(t *testing.T) {
		if err := controlplane.InstallClusterProfileCRD(testHub); err != nil {
			t.Fatal(err)
		}
		d.kubectlApplyFile(t, filepath.Join(deployDir(t), "formats", "clusterprofiles-clusterrole.yaml"))
		providers := writeTemp(t, "providers.json", []byte(`{"providers": [{"name": "secretreader", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "secretreader-plugin", "provideClusterInfo": true}}]}`))
		m := d.startManager(t, "--cluster-profiles", "--clusterprofile-provider-file="+providers, "--export-cluster-profiles")
		name := d.registerNative(t, "deploy-profiled")
		m.waitReady(t, name)
		scheme := runtime.NewScheme()
		if err := inventoryv1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		profiles, err := client.New(testHub.Config, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "the member's ClusterProfile published", func() bool {
			cp := &inventoryv1alpha1.ClusterProfile{}
			err := profiles.Get(t.Context(), client.ObjectKey{Namespace: deployNamespace, Name: name}, cp)
			return err == nil && meta.IsStatusConditionTrue(cp.Status.Conditions, inventoryv1alpha1.ClusterConditionControlPlaneHealthy)
		})
		d.wantDenied(t, access{verb: "create", group: "multicluster.x-k8s.io", resource: "clusterprofiles", namespace: "default"})
		m.checkNoForbidden(t)
	})
}

// deployment is deploy/ as applied to the hub.
type deployment struct {
	rendered   []byte
	args       []string // the manager container's, after the command
	kubeconfig string   // a hub admin's, for kubectl
	admin      client.Client
	clientset  kubernetes.Interface
	member     []byte // the member's admin kubeconfig
}

// applyDeploy renders deploy/ in-process and applies it with the project's
// kubectl: client-side, then server-side with kubectl's field manager and
// no --force-conflicts, which must find nothing to conflict on.
func applyDeploy(t *testing.T) *deployment {
	t.Helper()
	d := &deployment{rendered: renderKustomization(t, deployDir(t))}
	var err error
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	if d.admin, err = client.New(testHub.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if d.clientset, err = kubernetes.NewForConfig(testHub.Config); err != nil {
		t.Fatal(err)
	}
	admin, err := controlplane.AdminKubeconfig(testHub, "deploy-test-admin")
	if err != nil {
		t.Fatal(err)
	}
	d.kubeconfig = writeTemp(t, "admin.kubeconfig", admin)
	if d.member, err = controlplane.AdminKubeconfig(testMember, "deploy-test-member"); err != nil {
		t.Fatal(err)
	}

	rendered := writeTemp(t, "deploy.yaml", d.rendered)
	d.kubectl(t, nil, "apply", "-f", rendered)
	d.kubectl(t, nil, "apply", "--server-side", "-f", rendered)
	// As kube-controller-manager would: the Propagation sources role is
	// aggregated.
	if err := controlplane.AggregateClusterRoles(testHub.Config); err != nil {
		t.Fatal(err)
	}

	deploy := &appsv1.Deployment{}
	if err := d.admin.Get(t.Context(), client.ObjectKey{Namespace: deployNamespace, Name: "fleet-manager"}, deploy); err != nil {
		t.Fatal(err)
	}
	container := deploy.Spec.Template.Spec.Containers[0]
	if len(container.Args) == 0 || container.Args[0] != "run" {
		t.Fatalf("the Deployment's args are %q, want run and its flags", container.Args)
	}
	for _, arg := range container.Args[1:] {
		d.args = append(d.args, strings.ReplaceAll(arg, "$(POD_NAMESPACE)", deployNamespace))
	}
	checkStateVolume(t, deploy.Spec.Template.Spec, "emptyDir")
	return d
}

// checkStateVolume checks that --state-dir is a mounted volume, of kind
// source ("emptyDir" or "persistentVolumeClaim").
func checkStateVolume(t *testing.T, pod corev1.PodSpec, source string) {
	t.Helper()
	container := pod.Containers[0]
	var stateDir string
	for _, arg := range container.Args {
		if dir, ok := strings.CutPrefix(arg, "--state-dir="); ok {
			stateDir = dir
		}
	}
	i := slices.IndexFunc(container.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == stateDir })
	if stateDir == "" || i < 0 || container.VolumeMounts[i].ReadOnly {
		t.Fatalf("--state-dir %q is not a writable volume mount of the manager: %+v", stateDir, container.VolumeMounts)
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == container.VolumeMounts[i].Name })
	if j < 0 {
		t.Fatalf("the state volume %q is not in the pod", container.VolumeMounts[i].Name)
	}
	v := pod.Volumes[j]
	if got := map[bool]string{v.EmptyDir != nil: "emptyDir", v.PersistentVolumeClaim != nil: "persistentVolumeClaim"}[true]; got != source {
		t.Errorf("the state volume is %+v, want a %s", v.VolumeSource, source)
	}
}

// kubectl runs the project's kubectl as the hub's admin, with stdin.
func (d *deployment) kubectl(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	out, err := kubectlCommand(t, d.kubeconfig, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (d *deployment) kubectlApply(t *testing.T, manifest []byte) {
	t.Helper()
	d.kubectl(t, manifest, "apply", "-f", "-")
}

// kubectlApplyFile applies an example from deploy/, and deletes what it
// created when t ends, so that each subtest checks its own grants only.
func (d *deployment) kubectlApplyFile(t *testing.T, path string) {
	t.Helper()
	d.kubectl(t, nil, "apply", "-f", path)
	t.Cleanup(func() {
		if out, err := kubectlCommand(t, d.kubeconfig, nil, "delete", "--wait=false", "-f", path); err != nil {
			t.Errorf("kubectl delete -f %s: %v\n%s", path, err, out)
		}
	})
}

// create creates obj as the hub's admin and deletes it when t ends.
func (d *deployment) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := d.admin.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.admin.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %s: %v", obj.GetName(), err)
		}
	})
}

func (d *deployment) createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := d.admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// register creates a registration Secret and returns its key.
func (d *deployment) register(t *testing.T, s *corev1.Secret) client.ObjectKey {
	t.Helper()
	d.create(t, s)
	return client.ObjectKeyFromObject(s)
}

// registerNative registers the member as cluster name, and returns name.
func (d *deployment) registerNative(t *testing.T, name string) string {
	t.Helper()
	d.register(t, nativeSecret(name, d.member))
	return name
}

// refuseNative creates a native registration the policy refuses.
func (d *deployment) refuseNative(t *testing.T, name string) client.ObjectKey {
	t.Helper()
	return d.register(t, nativeSecret(name, insecure(t, d.member)))
}

func nativeSecret(name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: deployNamespace, Name: name, Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	}
}

// capiSecret is Cluster API's kubeconfig Secret of cluster name; refused
// skips TLS verification, which the policy refuses.
func (d *deployment) capiSecret(t *testing.T, namespace, name string, refused bool) *corev1.Secret {
	kubeconfig := d.member
	if refused {
		kubeconfig = insecure(t, kubeconfig)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + registry.ClusterAPINameSuffix, Labels: map[string]string{registry.ClusterAPIClusterLabel: name}},
		Type:       registry.ClusterAPISecretType,
		Data:       map[string][]byte{registry.ClusterAPIKey: kubeconfig},
	}
}

// argoCDSecret is Argo CD's cluster Secret for the member, named name;
// refused skips TLS verification, which the policy refuses.
func (d *deployment) argoCDSecret(t *testing.T, namespace, name string, refused bool) *corev1.Secret {
	t.Helper()
	raw, err := clientcmd.Load(d.member)
	if err != nil {
		t.Fatal(err)
	}
	kctx := raw.Contexts[raw.CurrentContext]
	server, user := raw.Clusters[kctx.Cluster], raw.AuthInfos[kctx.AuthInfo]
	tlsConfig := map[string]any{"caData": server.CertificateAuthorityData, "certData": user.ClientCertificateData, "keyData": user.ClientKeyData}
	if refused {
		tlsConfig = map[string]any{"insecure": true, "certData": user.ClientCertificateData, "keyData": user.ClientKeyData}
	}
	config, err := json.Marshal(map[string]any{"tlsClientConfig": tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType}},
		Data:       map[string][]byte{"name": []byte(name), "server": []byte(server.Server), "config": config},
	}
}

// insecure returns kubeconfig with TLS verification off.
func insecure(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range raw.Clusters {
		c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
	}
	out, err := clientcmd.Write(*raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// token mints a token for a ServiceAccount with TokenRequest.
func (d *deployment) token(t *testing.T, namespace, serviceAccount string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	resp, err := d.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status.Token
}

// runningManager is a manager run in-process for one subtest.
type runningManager struct {
	d           *deployment
	logs        *syncbuffer.Buffer
	metricsAddr string
	probeAddr   string
}

// startManager runs the manager with the Deployment's args, extra ones
// and a hub kubeconfig holding only the ServiceAccount's token, until t
// ends.
func (d *deployment) startManager(t *testing.T, extra ...string) *runningManager {
	t.Helper()
	m := &runningManager{d: d, logs: &syncbuffer.Buffer{}, metricsAddr: closedAddress(t), probeAddr: closedAddress(t)}
	hub := clientcmdapi.NewConfig()
	hub.Clusters["hub"] = &clientcmdapi.Cluster{Server: testHub.Config.Host, CertificateAuthorityData: testHub.Config.CAData}
	hub.AuthInfos[deployServiceAccount] = &clientcmdapi.AuthInfo{Token: d.token(t, deployNamespace, deployServiceAccount)}
	hub.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: deployServiceAccount}
	hub.CurrentContext = "hub"
	kubeconfig, err := clientcmd.Write(*hub)
	if err != nil {
		t.Fatal(err)
	}

	args := slices.Clone(d.args)
	for i, arg := range args {
		if strings.HasPrefix(arg, "--state-dir=") {
			args[i] = "--state-dir=" + t.TempDir() // the pod's volume
		}
	}
	args = append(args, extra...)
	args = append(args, "--hub-kubeconfig="+writeTemp(t, "hub.kubeconfig", kubeconfig),
		"--metrics-bind-address="+m.metricsAddr, "--health-probe-bind-address="+m.probeAddr)
	f, err := parseRunFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	f.skipNameValidation = true
	logger, stopLogging := captureLogs(m.logs)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, f, logger) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("run: %v", err)
		}
		stopLogging()
		if t.Failed() {
			t.Logf("the manager's log:\n%s", m.logs)
		}
	})
	return m
}

// waitReady waits until the member's MemberCluster is Ready with its
// status written, and the manager's /readyz answers 200.
func (m *runningManager) waitReady(t *testing.T, cluster string) {
	t.Helper()
	mc := &fleetv1alpha1.MemberCluster{}
	poll.Until(t, "MemberCluster "+cluster+" is Ready", func() bool {
		if err := m.d.admin.Get(t.Context(), client.ObjectKey{Name: cluster}, mc); err != nil {
			return false
		}
		return meta.IsStatusConditionTrue(mc.Status.Conditions, fleetv1alpha1.ConditionReady)
	})
	if mc.Status.ServerVersion == "" || mc.Status.LastProbeTime == nil || mc.Status.State == "" ||
		!meta.IsStatusConditionTrue(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted) {
		t.Errorf("MemberCluster %s is Ready with an incomplete status: %+v", cluster, mc.Status)
	}
	// A cluster-scoped object's Events go to the default namespace.
	poll.Until(t, "an Event about MemberCluster "+cluster, func() bool {
		return m.hasEvent(t, "default", cluster)
	})
	poll.Until(t, "/readyz answers 200", func() bool {
		resp, err := http.Get("http://" + m.probeAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// checkPropagation propagates a ConfigMap of a team's namespace to the
// member with the deployed RBAC, and waits for its copy and for Ready.
func (d *deployment) checkPropagation(t *testing.T) {
	t.Helper()
	const ns = "deploy-team"
	d.createNamespace(t, ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"color": "blue"}}
	d.create(t, cm)
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}},
		},
	}
	d.create(t, p)
	// A fresh install enforces tenancy: the namespace reaches the member
	// only as a policy lets it.
	d.create(t, &fleetv1alpha1.TenancyPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: fleetv1alpha1.TenancyPolicySpec{
			Namespaces: fleetv1alpha1.NamespaceSelector{Names: []string{ns}},
			Members:    fleetv1alpha1.ReachableMembers{Selector: &fleetv1alpha1.LabelSelector{}},
		},
	})
	member, err := client.New(testMember.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the ConfigMap's copy in the member", func() bool {
		return member.Get(t.Context(), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}) == nil
	})
	poll.Until(t, "Propagation "+ns+"/settings Ready", func() bool {
		return d.admin.Get(t.Context(), client.ObjectKeyFromObject(p), p) == nil && meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	})
}

// waitEvent waits for an Event about a refused registration Secret.
func (m *runningManager) waitEvent(t *testing.T, secret client.ObjectKey) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("an Event about Secret %s", secret), func() bool {
		return m.hasEvent(t, secret.Namespace, secret.Name)
	})
}

func (m *runningManager) hasEvent(t *testing.T, namespace, name string) bool {
	events := &corev1.EventList{}
	if err := m.d.admin.List(t.Context(), events, client.InNamespace(namespace)); err != nil {
		return false
	}
	return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.InvolvedObject.Name == name })
}

// checkLease checks that a manager holds the leader election Lease.
func (m *runningManager) checkLease(t *testing.T) {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := m.d.admin.Get(t.Context(), client.ObjectKey{Namespace: deployNamespace, Name: leaderElectionID}, lease); err != nil {
		t.Fatalf("the leader election Lease: %v", err)
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
		t.Errorf("nobody holds the Lease %s/%s", deployNamespace, leaderElectionID)
	}
}

// checkMetrics checks that /metrics answers only callers the hub
// authenticates and who are bound to fleet-manager-metrics-reader.
func (m *runningManager) checkMetrics(t *testing.T) {
	t.Helper()
	const scraper, stranger = "deploy-test-scraper", "deploy-test-stranger"
	for _, name := range []string{scraper, stranger} {
		m.d.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: deployNamespace, Name: name}})
	}
	m.d.create(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: scraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-manager-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: scraper, Namespace: deployNamespace}},
	})
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+m.metricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The endpoint's certificate is self-signed.
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return resp.StatusCode, body.String()
	}
	var code int
	var body string
	authorized := m.d.token(t, deployNamespace, scraper)
	poll.Until(t, "/metrics answers an authorized scraper", func() bool {
		code, body = get(authorized)
		return code == http.StatusOK
	})
	if !strings.Contains(body, "cluster=") {
		t.Errorf("/metrics has no series labelled by cluster:\n%s", body)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	// controller-runtime's filter answers 500 to a token the TokenReview
	// finds malformed, 401 to none.
	if code, _ := get("not-a-token"); code == http.StatusOK {
		t.Errorf("/metrics with a token the hub refuses: %d", code)
	}
	if code, _ := get(m.d.token(t, deployNamespace, stranger)); code != http.StatusForbidden {
		t.Errorf("/metrics with a token not bound to fleet-manager-metrics-reader: %d, want 403", code)
	}
	if code, _ := get(m.d.token(t, deployNamespace, deployServiceAccount)); code != http.StatusForbidden {
		t.Errorf("/metrics with the manager's own token: %d, want 403", code)
	}
}

// checkNoForbidden fails if the manager's log has a forbidden request.
func (m *runningManager) checkNoForbidden(t *testing.T) {
	t.Helper()
	for _, line := range linesWith(m.logs.String(), "forbidden") {
		t.Errorf("the manager's log shows a forbidden request: %s", line)
	}
}

// formatAccess is what a registration format needs in its namespace ns:
// read its Secrets and report on them with Events.
func formatAccess(ns string) []access {
	return []access{
		{verb: "list", resource: "secrets", namespace: ns},
		{verb: "create", resource: "events", namespace: ns},
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: ns},
	}
}

// access is a request of the manager's ServiceAccount.
type access struct {
	verb, group, resource, subresource, name, namespace string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	return s
}

// checkAccess checks with SubjectAccessReviews what deploy/ lets the
// manager do and not do, plus a format's allowed and denied requests.
func (d *deployment) checkAccess(t *testing.T, allowed, denied []access) {
	t.Helper()
	const group = "fleet.fleetkube.io"
	allowed = append(allowed,
		access{verb: "list", resource: "secrets", namespace: deployNamespace},
		access{verb: "watch", resource: "secrets", namespace: deployNamespace},
		// A renewed token, written into its registration Secret.
		access{verb: "update", resource: "secrets", namespace: deployNamespace},
		access{verb: "create", resource: "events", namespace: deployNamespace},
		access{verb: "create", resource: "events", namespace: "default"},
		access{verb: "patch", group: "events.k8s.io", resource: "events", namespace: "default"},
		access{verb: "update", group: "coordination.k8s.io", resource: "leases", name: leaderElectionID, namespace: deployNamespace},
		// The fleet's identity, created once, then read.
		access{verb: "create", resource: "configmaps", namespace: deployNamespace},
		access{verb: "get", resource: "configmaps", name: "fleet-identity", namespace: deployNamespace},
		access{verb: "delete", group: group, resource: "memberclusters"},
		access{verb: "patch", group: group, resource: "memberclusters", subresource: "status"},
		access{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		access{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		// Propagations anywhere, and the common kinds they copy.
		access{verb: "patch", group: group, resource: "propagations", namespace: "team-a"},
		access{verb: "patch", group: group, resource: "propagations", subresource: "status", namespace: "team-a"},
		access{verb: "update", group: group, resource: "propagations", subresource: "finalizers", namespace: "team-a"},
		access{verb: "create", group: "events.k8s.io", resource: "events", namespace: "team-a"},
		access{verb: "list", resource: "configmaps", namespace: "team-a"},
		access{verb: "watch", group: "apps", resource: "deployments", namespace: "team-a"},
		access{verb: "list", group: "networking.k8s.io", resource: "networkpolicies", namespace: "team-a"},
		access{verb: "list", group: "policy", resource: "poddisruptionbudgets", namespace: "team-a"},
		// Tenancy: the policies and the Namespaces' labels, read only.
		access{verb: "list", group: group, resource: "tenancypolicies"},
		access{verb: "watch", group: group, resource: "tenancypolicies"},
		access{verb: "get", resource: "namespaces", name: "team-a"},
		access{verb: "watch", resource: "namespaces"},
	)
	denied = append(denied,
		// Secrets outside its namespaces, and any write but an update in
		// the fleet namespace.
		access{verb: "get", resource: "secrets", namespace: "kube-system"},
		access{verb: "list", resource: "secrets", namespace: "default"},
		access{verb: "watch", resource: "secrets"},
		access{verb: "create", resource: "secrets", namespace: deployNamespace},
		access{verb: "patch", resource: "secrets", namespace: deployNamespace},
		access{verb: "delete", resource: "secrets", namespace: deployNamespace},
		access{verb: "update", resource: "secrets", namespace: "default"},
		// Secrets to propagate, unless a namespace opts in.
		access{verb: "list", resource: "secrets", namespace: "team-a"},
		// Reading or deleting Events, and writing what it copies.
		access{verb: "delete", resource: "events", namespace: deployNamespace},
		access{verb: "list", resource: "events", namespace: "default"},
		// The status subresource: get, update and patch only.
		access{verb: "delete", group: group, resource: "memberclusters", subresource: "status"},
		access{verb: "create", group: group, resource: "memberclusters", subresource: "status"},
		access{verb: "list", group: group, resource: "memberclusters", subresource: "status"},
		// Other Leases, other kinds, other identities.
		access{verb: "update", group: "coordination.k8s.io", resource: "leases", name: "kube-scheduler", namespace: "kube-system"},
		access{verb: "update", group: "coordination.k8s.io", resource: "leases", name: "another", namespace: deployNamespace},
		access{verb: "delete", group: "coordination.k8s.io", resource: "leases", name: leaderElectionID, namespace: deployNamespace},
		access{verb: "update", resource: "configmaps", name: "fleet-identity", namespace: deployNamespace},
		access{verb: "delete", resource: "configmaps", name: "fleet-identity", namespace: deployNamespace},
		access{verb: "create", resource: "configmaps", namespace: "default"},
		access{verb: "patch", group: "apps", resource: "deployments", namespace: "team-a"},
		access{verb: "delete", group: "fleet.fleetkube.io", resource: "propagations", namespace: "team-a"},
		access{verb: "create", resource: "serviceaccounts", subresource: "token", name: deployServiceAccount, namespace: deployNamespace},
		access{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: deployNamespace},
		access{verb: "impersonate", resource: "users"},
		access{verb: "create", group: group, resource: "tenancypolicies"},
		access{verb: "update", group: group, resource: "tenancypolicies", name: "any"},
		access{verb: "delete", group: group, resource: "tenancypolicies", name: "any"},
		access{verb: "patch", resource: "namespaces", name: "team-a"},
	)
	// The owed removals' mirror, by name only.
	for _, name := range propagation.OwedRemovalsConfigMaps() {
		for _, verb := range []string{"get", "update", "delete"} {
			allowed = append(allowed, access{verb: verb, resource: "configmaps", name: name, namespace: deployNamespace})
		}
	}
	denied = append(denied,
		access{verb: "update", resource: "configmaps", name: "another", namespace: deployNamespace},
		access{verb: "delete", resource: "configmaps", name: "another", namespace: deployNamespace},
		access{verb: "update", resource: "configmaps", name: "owed-removals-0", namespace: "default"},
	)
	for _, a := range allowed {
		if !d.allowed(t, a) {
			t.Errorf("the manager's ServiceAccount may not %s", a)
		}
	}
	for _, a := range denied {
		d.wantDenied(t, a)
	}
}

func (d *deployment) wantDenied(t *testing.T, a access) {
	t.Helper()
	if d.allowed(t, a) {
		t.Errorf("the manager's ServiceAccount may %s", a)
	}
}

// allowed asks the hub whether the manager's ServiceAccount may do a.
func (d *deployment) allowed(t *testing.T, a access) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + deployNamespace + ":" + deployServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Name: a.name, Namespace: a.namespace,
		},
	}}
	if err := d.admin.Create(t.Context(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// checkManifests checks what applying cannot: the Deployment's choices.
func checkManifests(t *testing.T, rendered []byte) {
	docs := splitDocuments(t, rendered)
	deploy := &appsv1.Deployment{}
	decodeDocument(t, documentOfKind(t, docs, "Deployment"), deploy)
	if got := ptr.Deref(deploy.Spec.Replicas, 1); got < 2 {
		t.Errorf("the Deployment runs %d replicas, want 2 with leader election", got)
	}
	if sel := deploy.Spec.Selector.MatchLabels; len(sel) != 2 || sel["app.kubernetes.io/part-of"] != "" {
		t.Errorf("the Deployment's immutable selector is %v, want its two labels and none of kustomize's", sel)
	}
	spec := deploy.Spec.Template.Spec
	if len(spec.TopologySpreadConstraints) == 0 || spec.TopologySpreadConstraints[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("the Deployment spreads its replicas by %v, want over hostnames", spec.TopologySpreadConstraints)
	}
	if sc := spec.SecurityContext; ptr.Deref(sc.RunAsUser, 0) != 65532 || ptr.Deref(sc.RunAsGroup, 0) != 65532 {
		t.Errorf("the pod runs as %v:%v, want the image's 65532:65532", sc.RunAsUser, sc.RunAsGroup)
	}
	container := spec.Containers[0]
	if version, err := os.ReadFile(filepath.Join(deployDir(t), "..", "VERSION")); err == nil {
		if want := "ghcr.io/fleetkube/fleet-manager:" + strings.TrimSpace(string(version)); container.Image != want {
			t.Errorf("the Deployment's image is %s, want %s as VERSION says", container.Image, want)
		}
	} else if strings.HasSuffix(container.Image, ":latest") || !strings.Contains(container.Image, ":v") {
		t.Errorf("the Deployment's image is %s, want one pinned by version", container.Image)
	}
	limit := container.Resources.Limits[corev1.ResourceMemory]
	var goMemLimit string
	for _, env := range container.Env {
		if env.Name == "GOMEMLIMIT" {
			goMemLimit = env.Value
		}
	}
	// GOMEMLIMIT's units are Go's (MiB), resource.Quantity's are Mi.
	soft, err := resource.ParseQuantity(strings.TrimSuffix(goMemLimit, "B"))
	if err != nil {
		t.Fatalf("GOMEMLIMIT %q: %v", goMemLimit, err)
	}
	if ratio := float64(soft.Value()) / float64(limit.Value()); ratio < 0.85 || ratio > 0.95 {
		t.Errorf("GOMEMLIMIT is %s, %.0f%% of the memory limit %s: keep it near 90%%", goMemLimit, 100*ratio, limit.String())
	}
	// Only the events Role stays outside the fleet namespace.
	for _, doc := range docs {
		var obj metav1.PartialObjectMetadata
		decodeDocument(t, doc, &obj)
		if ns := obj.Namespace; ns != "" && ns != deployNamespace && (obj.Kind != "Role" && obj.Kind != "RoleBinding" || ns != "default") {
			t.Errorf("%s %s is in namespace %s", obj.Kind, obj.Name, ns)
		}
	}

	// The optional ServiceMonitor, in an overlay of deploy/ as the
	// component's comment says.
	var monitor struct {
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector  metav1.LabelSelector `json:"selector"`
			Endpoints []struct {
				Port   string `json:"port"`
				Scheme string `json:"scheme"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	withMonitor := renderWithComponent(t, "prometheus")
	decodeDocument(t, documentOfKind(t, withMonitor, "ServiceMonitor"), &monitor)
	service := &corev1.Service{}
	decodeDocument(t, documentOfKind(t, withMonitor, "Service"), service)
	selector, err := metav1.LabelSelectorAsSelector(&monitor.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if monitor.Namespace != deployNamespace || !selector.Matches(labels.Set(service.Labels)) || len(monitor.Spec.Endpoints) != 1 ||
		monitor.Spec.Endpoints[0].Port != service.Spec.Ports[0].Name || monitor.Spec.Endpoints[0].Scheme != "https" {
		t.Errorf("the ServiceMonitor does not scrape the Service %s over https: %+v", service.Name, monitor)
	}
}

// TestPersistentStateComponent renders deploy/ with the persistent-state
// component as its comment says: one replica, replaced with Recreate, its
// journal on the claim the component adds.
func TestPersistentStateComponent(t *testing.T) {
	docs := renderWithComponent(t, "persistent-state")
	deploy := &appsv1.Deployment{}
	decodeDocument(t, documentOfKind(t, docs, "Deployment"), deploy)
	claim := &corev1.PersistentVolumeClaim{}
	decodeDocument(t, documentOfKind(t, docs, "PersistentVolumeClaim"), claim)
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas != 1 || deploy.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %v, strategy %q: two pods could hold one ReadWriteOnce journal", deploy.Spec.Replicas, deploy.Spec.Strategy.Type)
	}
	checkStateVolume(t, deploy.Spec.Template.Spec, "persistentVolumeClaim")
	pod := deploy.Spec.Template.Spec
	if v := pod.Volumes[slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil })]; v.PersistentVolumeClaim.ClaimName != claim.Name || claim.Namespace != deploy.Namespace {
		t.Errorf("the volume claims %s, the component adds %s/%s", v.PersistentVolumeClaim.ClaimName, claim.Namespace, claim.Name)
	}
}

// TestShardedComponent renders deploy/ with the sharded component as its
// comment says: three replicas sharing the fleet (--shard, not
// --leader-elect), each named by its pod, with the rights on Leases the
// replicas need.
func TestShardedComponent(t *testing.T) {
	docs := renderWithComponent(t, "sharded")
	deploy := &appsv1.Deployment{}
	decodeDocument(t, documentOfKind(t, docs, "Deployment"), deploy)
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", deploy.Spec.Replicas)
	}
	manager := deploy.Spec.Template.Spec.Containers[0]
	if !slices.Contains(manager.Args, "--shard") || slices.Contains(manager.Args, "--leader-elect") {
		t.Errorf("args %v: want --shard, not --leader-elect", manager.Args)
	}
	if i := slices.IndexFunc(manager.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); i < 0 || manager.Env[i].ValueFrom == nil || manager.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env %v: want POD_NAME from metadata.name, which names the replica", manager.Env)
	}
	role := &rbacv1.Role{}
	for _, doc := range docs {
		if text := string(doc); strings.Contains(text, "name: fleet-manager-replicas") && strings.Contains(text, "kind: Role\n") {
			decodeDocument(t, doc, role)
		}
	}
	for _, verb := range []string{"create", "get", "list", "watch", "update", "delete"} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, verb)
		}) {
			t.Errorf("the replicas' Role may not %s Leases: %+v", verb, role.Rules)
		}
	}
}

// renderWithComponent renders deploy/ in an overlay with the component
// named, as the components' comments say to, and splits its documents.
func renderWithComponent(t *testing.T, component string) [][]byte {
	t.Helper()
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, deployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources: [%q]\ncomponents: [%q]\n", base, filepath.Join(base, "components", component))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	return splitDocuments(t, renderKustomization(t, overlay))
}
