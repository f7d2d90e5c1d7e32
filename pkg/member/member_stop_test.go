package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// A reconciler may ignore its context and keep the client of a member
// that has since been removed: its requests must fail without reaching
// the member.
func TestRemovedMemberNeverDialsAgain(t *testing.T) {
	needEnvtest(t)
	viaProxy, proxy, err := controlplane.ViaProxy(kubeconfig(t, members[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)

	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage})
	baseline, sockets := goleak.IgnoreCurrent(), poll.OpenSockets(t)

	if err := pool.Set(registry.Registration{ClusterName: "removed", Kubeconfig: viaProxy}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	cl, err := pool.Get("removed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whoAmI(t.Context(), cl); err != nil {
		t.Fatalf("before removal: %v", err)
	}

	if !pool.Remove("removed") {
		t.Fatal("Remove reported no member")
	}
	poll.Until(t, "the removed member's connections closed", func() bool { return len(proxy.Accepted()) == 0 })

	// A context of its own, as a reconciler that ignores the member's.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if user, err := whoAmI(ctx, cl); err == nil {
		t.Errorf("a write through a removed member's client succeeded, as %q", user)
	}
	if err := cl.GetAPIReader().List(ctx, &corev1.NamespaceList{}); err == nil {
		t.Error("a read through a removed member's client succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the requests took %s to fail", d)
	}
	if n := len(proxy.Accepted()); n > 0 {
		t.Errorf("the removed member opened %d connections", n)
	}
	waitForBaseline(t, baseline, sockets)
}
