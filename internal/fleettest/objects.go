package fleettest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// CreateNamespace creates namespace name with cl, or leaves the one there.
func CreateNamespace(t testing.TB, cl client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := client.IgnoreAlreadyExists(cl.Create(t.Context(), ns)); err != nil {
		t.Fatal(err)
	}
}

// CreateConfigMap creates an empty ConfigMap namespace/name with cl, and
// its namespace if need be.
func CreateConfigMap(t testing.TB, cl client.Client, namespace, name string) {
	t.Helper()
	CreateNamespace(t, cl, namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := cl.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
}

// InNamespace keeps a controller to the objects of namespace ns.
func InNamespace(ns string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
}

// QuickHealth, as FleetOptions.Configure, makes members fail and recover
// within seconds.
func QuickHealth(o *fleet.Options) {
	o.MemberHealth = member.HealthOptions{
		Interval:         200 * time.Millisecond,
		Timeout:          500 * time.Millisecond,
		FailureThreshold: 2,
		DisconnectAfter:  2 * time.Second,
	}
}

// ViaProxy returns kubeconfig with its server moved to a proxy in front
// of it, which the test can take down and up again; the proxy closes when
// the test ends.
func ViaProxy(t testing.TB, kubeconfig []byte) ([]byte, *controlplane.Proxy) {
	t.Helper()
	out, proxy, err := controlplane.ViaProxy(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return out, proxy
}

// HostileToken and HostilePassword are credentials for hostile Secrets;
// the suite fails if they show up in a log line or on the hub.
const (
	HostileToken    = "hostile-token-7f3a9c1e5b"
	HostilePassword = "S3cret-5d0e"
)

// HostileKubeconfig is a kubeconfig for a server of the test's choosing
// whose user entry is the YAML user.
func HostileKubeconfig(server, user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: ` + user + `}]
`)
}

// ArgoCDSecret is an Argo CD cluster Secret carrying the server and
// credentials of kubeconfig, as Argo CD writes them, with the extra keys
// real ones have.
func ArgoCDSecret(t testing.TB, namespace, name string, kubeconfig []byte) *corev1.Secret {
	t.Helper()
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kctx := raw.Contexts[raw.CurrentContext]
	server, user := raw.Clusters[kctx.Cluster], raw.AuthInfos[kctx.AuthInfo]
	config, err := json.Marshal(map[string]any{
		"tlsClientConfig": map[string]any{
			"caData":   server.CertificateAuthorityData,
			"certData": user.ClientCertificateData,
			"keyData":  user.ClientKeyData,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "cluster-" + name, Labels: map[string]string{registry.ArgoCDSecretTypeLabel: registry.ArgoCDClusterType}},
		Data: map[string][]byte{
			"name": []byte(name), "server": []byte(server.Server), "config": config,
			"project": []byte("default"), "namespaces": []byte(""), "clusterResources": []byte("true"), "shard": []byte("0"),
		},
	}
}

// WaitMemberCluster waits, up to a minute, until the MemberCluster named
// name satisfies cond, and returns it.
func (s *Suite) WaitMemberCluster(t testing.TB, name, what string, cond func(*fleetv1alpha1.MemberCluster) bool) *fleetv1alpha1.MemberCluster {
	t.Helper()
	s.Need(t)
	mc := &fleetv1alpha1.MemberCluster{}
	deadline := time.Now().Add(time.Minute)
	for s.HubClient.Get(t.Context(), types.NamespacedName{Name: name}, mc) != nil || !cond(mc) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for MemberCluster %s %s; last seen: %+v", name, what, mc.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return mc
}

// Condition returns the status of mc's condition of conditionType, or ""
// if it has none.
func Condition(mc *fleetv1alpha1.MemberCluster, conditionType string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(mc.Status.Conditions, conditionType); c != nil {
		return c.Status
	}
	return ""
}

// Series returns the fleet_ series served at /metrics that carry
// cluster=name, by metric name. Controller-runtime's registry is one per
// process: tests tell their series apart by cluster name.
func Series(t testing.TB, name string) map[string][]*dto.Metric {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "cluster" && l.GetValue() == name }) {
				out[f.GetName()] = append(out[f.GetName()], m)
			}
		}
	}
	return out
}
