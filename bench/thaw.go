package main

import (
	"context"
	"fmt"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

const thawTable = "Thaw"

// benchThaw freezes (SIGSTOP) the API server of a member, which reaches
// it directly, for b.freeze, then thaws it (SIGCONT) and creates a
// ConfigMap in it at once: the time from the freeze until the member is
// Unhealthy, and from the thaw until it is Ready again and until the
// ConfigMap's first reconcile. With the default DisconnectAfter (3m) a
// freeze of 3 minutes or more has the member Disconnected, its cluster
// torn down, when it is thawed.
func (b *bench) benchThaw(ctx context.Context) error {
	server, err := b.lab.apiServer(outageServer)
	if err != nil {
		return err
	}
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2, trackRequests: true, refuseDuplicates: true})
	if err != nil {
		return err
	}
	defer b.stopFleet(f)
	name := ns + "-frozen"
	if err := b.lab.register(ctx, ns, name, b.lab.kubeconfig[outageServer]); err != nil {
		return err
	}
	if _, err := f.awaitEngaged(name, time.Minute); err != nil {
		return err
	}
	if err := await(name+" Ready", time.Minute, func() bool {
		state, _ := f.mgr.MemberState(name)
		return state == fleetv1alpha1.MemberStateReady
	}); err != nil {
		return err
	}

	t := b.res.table(thawTable, fmt.Sprintf("A member's kube-apiserver, which it reaches directly, is frozen (SIGSTOP) for %s, then thawed (SIGCONT), and a ConfigMap created in it at once (the create waits for the thawed server), as the outside benchmark does with 90 s; default probe settings and the identity check on (the member is alone on its server), so a freeze shorter than DisconnectAfter (3 min) leaves the member Unhealthy at the thaw, its cache kept and its informers' calls held, and a longer one has it Disconnected, its cluster torn down. Detection: from the freeze until the member is Unhealthy. Created: from the thaw until the create of the ConfigMap returned, how soon the thawed server serves a request. Ready: from the thaw until the manager reports it Ready again. Reconcile: from the thaw until the ConfigMap's first reconcile.", b.freeze))
	frozen := time.Now()
	if err := server.freeze(); err != nil {
		return err
	}
	thawed := false
	thaw := func() error {
		if thawed {
			return nil
		}
		thawed = true
		return server.thaw()
	}
	defer func() { _ = thaw() }()
	if err := await(name+" Unhealthy", time.Minute, func() bool {
		state, _ := f.mgr.MemberState(name)
		return state == fleetv1alpha1.MemberStateUnhealthy
	}); err != nil {
		return err
	}
	detected := time.Since(frozen)
	select {
	case <-time.After(time.Until(frozen.Add(b.freeze))):
	case <-ctx.Done():
		return ctx.Err()
	}
	atThaw, _ := f.mgr.MemberState(name)

	ready := make(chan time.Time, 1)
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go func() {
		for watchCtx.Err() == nil {
			if state, _ := f.mgr.MemberState(name); state == fleetv1alpha1.MemberStateReady {
				ready <- time.Now()
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	start := time.Now()
	if err := thaw(); err != nil {
		return err
	}
	object := ns + "-after-thaw"
	if err := b.lab.clients[outageServer].Create(ctx, configMap(engageNamespace, object, 16)); err != nil {
		return err
	}
	created := time.Now()
	reconciled, err := f.awaitReconciled(fleet.Request{ClusterName: name, NamespacedName: types.NamespacedName{Namespace: engageNamespace, Name: object}}, 2*time.Minute)
	if err != nil {
		return err
	}
	var readyAt time.Time
	select {
	case readyAt = <-ready:
	case <-time.After(time.Minute):
		return fmt.Errorf("%s not Ready a minute after the thaw", name)
	}

	t.addDuration("freeze to Unhealthy", detected, atMost(5000, "never noticed"))
	t.addDuration(fmt.Sprintf("thaw (%s at it) to the ConfigMap created", atThaw), created.Sub(start), nil)
	t.addDuration(fmt.Sprintf("thaw (%s at it) to Ready", atThaw), readyAt.Sub(start), nil)
	t.addDuration(fmt.Sprintf("thaw (%s at it) to first reconcile of a ConfigMap created then", atThaw), reconciled.Sub(start), atMost(100, "46.5 ms after 90 s"))
	return nil
}
