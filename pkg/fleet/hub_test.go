package fleet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// hubOutage is long enough for client-go's reflector backoff to reach
// sleeps of 6 to 13 s, which a hub that comes back would wait out.
const hubOutage = 12 * time.Second

func TestHubReturnsWithinSeconds(t *testing.T) {
	ns := suite.FleetNamespace(t)
	cfg, proxy, err := controlplane.ProxyConfig(suite.Hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Config: cfg})
	f.Register(t, "before-outage", suite.Kubeconfigs[0])
	poll.Until(t, "before-outage engaged", func() bool { return slices.Contains(f.Manager.ClusterNames(), "before-outage") })

	// A request waits for the hub no longer than its context allows. The
	// client's first request, before the outage, reads discovery, which
	// has no context.
	cl, err := client.New(f.Manager.GetConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
		t.Fatal(err)
	}

	down := time.Now()
	proxy.Down()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := cl.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err == nil {
		t.Error("a request to a hub that is down succeeded")
	}
	if took := time.Since(down); took > 2*time.Second {
		t.Errorf("a request with a 1s deadline returned %s into the outage", took.Round(time.Millisecond))
	}
	time.Sleep(hubOutage - time.Since(down))
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	f.Register(t, "after-outage", suite.Kubeconfigs[1])
	poll.Until(t, "after-outage engaged", func() bool { return slices.Contains(f.Manager.ClusterNames(), "after-outage") })
	took := time.Since(back)
	t.Logf("engaged %s after the hub returned", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("a Secret created when the hub returned was engaged %s later, want ≤ 2s", took.Round(time.Millisecond))
	}
}

func TestHubDenialLoggedOnce(t *testing.T) {
	t.Parallel()
	ns := suite.FleetNamespace(t)
	nobody := suite.AddUser(t, suite.Hub, envtest.User{Name: "fleet-nobody-" + ns})
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Config: nobody.Config()})
	// The reflectors retry their list at 0.8 s, then 1.6 s and more.
	time.Sleep(5 * time.Second)
	cl, err := client.NewWithWatch(f.Manager.GetConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "denied"}}
	for range 2 {
		_ = cl.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{})
		_ = cl.Create(ctx, secret.DeepCopy())
		_ = cl.Delete(ctx, secret)
		if w, err := cl.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns)); err == nil {
			w.Stop()
		}
	}

	denial := func(verb, resource, namespace string) string {
		return `"verb"="` + verb + `" "resource"="` + resource + `" "namespace"="` + namespace + `"`
	}
	for _, want := range []string{
		denial("list", "secrets", ns),
		denial("get", "secrets", ns),
		denial("create", "secrets", ns),
		denial("delete", "secrets", ns),
		denial("watch", "secrets", ns),
	} {
		if n := f.Logs.Count(`"msg"="The hub denied a request`, want); n != 1 {
			t.Errorf("denial %s logged %d times, want once", want, n)
		}
	}
}
