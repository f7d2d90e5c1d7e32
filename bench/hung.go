package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

const (
	headOfLineTable  = "Head-of-line blocking"
	connectionsTable = "Connections of a removed member"
	headOfLineProbes = 15
)

// benchHeadOfLine measures healthy members' engage latency right after 0,
// 1 and 5 hung members (TCP accepted, never answered) were registered.
func (b *bench) benchHeadOfLine(ctx context.Context) error {
	hung, proxy, err := controlplane.ViaProxy(b.lab.kubeconfig[0])
	if err != nil {
		return err
	}
	defer proxy.Close()
	proxy.Hang(true)

	t := b.res.table(headOfLineTable, fmt.Sprintf("The median engage latency of %d healthy members, registered one at a time right after the hung members (whose API server accepts TCP and never answers), each holding one ConfigMap.", headOfLineProbes))
	var without time.Duration
	for _, hungMembers := range []int{0, 1, 5} {
		latency, err := b.headOfLine(ctx, hung, hungMembers)
		if err != nil {
			return fmt.Errorf("%d hung members: %w", hungMembers, err)
		}
		t.addDuration(fmt.Sprintf("after %d hung members", hungMembers), latency, nil)
		switch hungMembers {
		case 0:
			without = latency
		case 1:
			t.add("after 1 hung member ÷ without", "×", ms(latency)/ms(without), atMost(1.2, "9.1 s with 1 hung member"))
		case 5:
			t.add("after 5 hung members ÷ without", "×", ms(latency)/ms(without), atMost(1.2, "49 s with 5"))
		}
	}
	return nil
}

func (b *bench) headOfLine(ctx context.Context, hung []byte, hungMembers int) (time.Duration, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return 0, err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2})
	if err != nil {
		return 0, err
	}
	defer b.stopFleet(f)
	for i := range hungMembers {
		if err := b.lab.register(ctx, ns, fmt.Sprintf("%s-hung%d", ns, i), hung); err != nil {
			return 0, err
		}
	}
	latencies := make([]time.Duration, headOfLineProbes)
	for i := range latencies {
		name := fmt.Sprintf("%s-healthy%d", ns, i)
		start := time.Now()
		if err := b.lab.register(ctx, ns, name, b.lab.serverKubeconfig(i+1)); err != nil {
			return 0, err
		}
		engaged, err := f.awaitEngaged(name, time.Minute)
		if err != nil {
			return 0, err
		}
		latencies[i] = engaged.Sub(start)
	}
	return percentile(latencies, 50), nil
}

// benchConnections measures how long a removed member's network
// connections stay open after its Secret is deleted.
func (b *bench) benchConnections(ctx context.Context) error {
	kubeconfig, proxy, err := controlplane.ViaProxy(b.lab.kubeconfig[1])
	if err != nil {
		return err
	}
	defer proxy.Close()
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2})
	if err != nil {
		return err
	}
	defer b.stopFleet(f)
	name := ns + "-removed"
	if err := b.lab.register(ctx, ns, name, kubeconfig); err != nil {
		return err
	}
	if _, err := f.awaitEngaged(name, time.Minute); err != nil {
		return err
	}
	open := len(proxy.Accepted())
	start := time.Now()
	if err := b.lab.unregister(ctx, ns, name); err != nil {
		return err
	}
	if err := await("connections closed", 2*time.Minute, func() bool { return len(proxy.Accepted()) == 0 }); err != nil {
		return err
	}
	t := b.res.table(connectionsTable, "From the deletion of a member's Secret until the member's API server (behind a TCP proxy that counts them) has no open connection from the manager.")
	t.addDuration("Secret deleted to every connection closed", time.Since(start), atMost(5000, "kept about 90 s"))
	t.add("connections open before", "connections", float64(open), nil)
	return nil
}
