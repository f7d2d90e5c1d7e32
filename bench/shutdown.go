package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
)

const shutdownTable = "Shutdown"

// benchShutdown measures, in a fleet-manager process of its own with two
// healthy members engaged, the time from SIGTERM to its exit, without and
// with 5 hung members registered.
func (b *bench) benchShutdown(ctx context.Context) error {
	hung, proxy, err := controlplane.ViaProxy(b.lab.kubeconfig[0])
	if err != nil {
		return err
	}
	defer proxy.Close()
	proxy.Hang(true)
	t := b.res.table(shutdownTable, "A fleet-manager process with two healthy members engaged, and hung members (TCP accepted, never answered) registered: from SIGTERM to the process's exit.")
	for _, hungMembers := range []int{0, 5} {
		took, err := b.shutdown(ctx, hung, hungMembers)
		if err != nil {
			return fmt.Errorf("%d hung members: %w", hungMembers, err)
		}
		t.addDuration(fmt.Sprintf("SIGTERM to exit, %d hung members", hungMembers), took, atMost(2000, "10 s"))
	}
	return nil
}

func (b *bench) shutdown(ctx context.Context, hung []byte, hungMembers int) (time.Duration, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return 0, err
	}
	defer b.cleanUp(ctx, ns)
	for i := range hungMembers {
		if err := b.lab.register(ctx, ns, fmt.Sprintf("%s-hung%d", ns, i), hung); err != nil {
			return 0, err
		}
	}
	for i := range 2 {
		if err := b.lab.register(ctx, ns, fmt.Sprintf("%s-healthy%d", ns, i), b.lab.serverKubeconfig(i)); err != nil {
			return 0, err
		}
	}
	c, err := startChild(nil, "-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns,
		"-watch="+engageNamespace, "-members=2", "-objects=1", "-idle=1h")
	if err != nil {
		return 0, err
	}
	settled, err := c.next(settleDeadline + time.Minute)
	if err != nil {
		return 0, err
	}
	if settled.Members < 2 {
		c.kill()
		return 0, fmt.Errorf("%d of 2 healthy members settled within %s", settled.Members, settleDeadline)
	}
	return c.stop(time.Minute)
}
