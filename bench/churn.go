package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const churnTable = "Propagation: unrelated hub churn"

const (
	churnMembers = 1000
	// churnObjects unrelated ConfigMaps are updated in turn, churnRate
	// updates a second in all, for churnWindow.
	churnObjects = 10
	churnRate    = 10
	churnWindow  = 10 * time.Second
)

var churnNote = fmt.Sprintf("One Propagation, web, copies the ConfigMaps labelled app=web of its hub namespace (one) to all %d members "+
	"of its fleet, spread over the lab's member API servers. The namespace also holds %d ConfigMaps labelled app=other, which "+
	"no Propagation selects. Once web is Ready in every member and the fleet made no reconcile for a second, those %d are "+
	"updated in turn, %d updates a second in all, for %s; the clock starts at the first update. Member reconciles caused: the "+
	"Propagation controller's reconciles of the members (fleet_reconciles_total, every result) from the first update until "+
	"the fleet made no reconcile for a second after the last, over the time from the first update to one interval after the "+
	"last. Then web itself is updated and every member must reconcile it, and every server's copy hold it: a fleet that "+
	"missed the churn because it saw no hub event fails the figure.",
	churnMembers, churnObjects, churnObjects, churnRate, churnWindow)

// benchChurn measures the member reconciles that updates of hub objects
// no Propagation selects cause.
func (b *bench) benchChurn(ctx context.Context) error {
	t := b.res.table(churnTable, churnNote)
	const figure = "unrelated ConfigMap updates: member reconciles caused"
	s, err := b.setUpPropagation(ctx, churnMembers, 1)
	if err != nil {
		return err
	}
	defer b.cleanUpPropagations(ctx, s.fleetNS, s.team)
	defer os.RemoveAll(stateDir(s.fleetNS))
	for i := range churnObjects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: churnName(i), Labels: map[string]string{"app": "other"}}, Data: map[string]string{"v": "0"}}
		if err := b.lab.hubClient.Create(ctx, cm); err != nil {
			return err
		}
	}
	f, err := startPropFleet(b.lab.hub.Config, s.fleetNS, true)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.stop(); err != nil {
			b.progress("stopping fleet: %v", err)
		}
	}()
	counter, err := newReconcileCounter()
	if err != nil {
		return err
	}
	if _, err := b.lab.registerAll(ctx, s.fleetNS, s.names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	if err := b.awaitPropagationReady(ctx, s.team, churnMembers, 5*time.Minute); err != nil {
		return err
	}
	if err := counter.awaitQuiet(ctx, s.names, time.Second, 2*time.Minute); err != nil {
		t.fail(figure, "/s", err.Error(), atMost(0, ""))
		return nil
	}
	before := counter.members(s.names)
	took, err := b.churn(ctx, s.team)
	if err != nil {
		return err
	}
	if err := counter.awaitQuiet(ctx, s.names, time.Second, 2*time.Minute); err != nil {
		t.fail(figure, "/s", err.Error(), atMost(0, ""))
		return nil
	}
	caused := counter.members(s.names) - before
	b.progress("  %.0f member reconciles over %.1f s of churn", caused, took.Seconds())
	if _, err := b.fanOut(ctx, counter, s); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			t.fail(figure, "/s", "after the churn, web did not reach every member: "+m.why, atMost(0, ""))
			return nil
		}
		return err
	}
	t.add(figure, "/s", caused/took.Seconds(), atMost(0, ""))
	return nil
}

func churnName(i int) string { return "other-" + strconv.Itoa(i) }

// churn updates the unrelated ConfigMaps of team in turn, churnRate a
// second, for churnWindow, and returns how long from the first update to
// the tick after the last.
func (b *bench) churn(ctx context.Context, team string) (time.Duration, error) {
	tick := time.NewTicker(time.Second / churnRate)
	defer tick.Stop()
	started := time.Now()
	for i := range int(churnWindow.Seconds() * churnRate) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: churnName(i % churnObjects)}}
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":%q}}`, strconv.Itoa(i)))
		if err := b.lab.hubClient.Patch(ctx, cm, patch); err != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	return time.Since(started), nil
}

// members returns the members' reconciles, whatever their result.
func (c *reconcileCounter) members(names []string) float64 {
	total := 0.0
	for _, name := range names {
		total += c.count(name, "success") + c.count(name, "error")
	}
	return total
}
