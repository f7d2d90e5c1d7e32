package main

import (
	"context"
	"fmt"
	"time"
)

const engageTable = "Engage latency"

// benchEngage measures, for n members, the time from each Secret's
// creation to the first reconcile of an object in that member: Secrets
// created one at a time, each once the one before has engaged, and all at
// once. Every member holds one ConfigMap.
func (b *bench) benchEngage(ctx context.Context, n int) error {
	t := b.res.table(engageTable, "From a registration Secret's creation to the first reconcile of an object in its member, which holds one ConfigMap. Members share the member API servers under different Secret names.")

	oneByOne, _, err := b.engage(ctx, n, false)
	if err != nil {
		return fmt.Errorf("one at a time: %w", err)
	}
	var allTarget *target
	if n == 10 {
		allTarget = atMost(60, "1,126 ms; fleet-manager 110 ms, "+outsideMCR)
	}
	t.addDuration(fmt.Sprintf("one at a time, N=%d, p50", n), percentile(oneByOne, 50), atMost(12, "116 ms; fleet-manager 17.2 ms, "+outsideMCR))
	t.addDuration(fmt.Sprintf("one at a time, N=%d, p99", n), percentile(oneByOne, 99), nil)
	t.addDuration(fmt.Sprintf("one at a time, N=%d, max", n), percentile(oneByOne, 100), nil)

	atOnce, settled, err := b.engage(ctx, n, true)
	if err != nil {
		return fmt.Errorf("all at once: %w", err)
	}
	var p99Target, settledTarget *target
	if n == 100 {
		p99Target = atMost(2000, "")
		settledTarget = atMost(3000, "8.4 s")
	}
	t.addDuration(fmt.Sprintf("all at once, N=%d, p50", n), percentile(atOnce, 50), nil)
	t.addDuration(fmt.Sprintf("all at once, N=%d, p99", n), percentile(atOnce, 99), p99Target)
	t.addDuration(fmt.Sprintf("all at once, N=%d, max", n), percentile(atOnce, 100), allTarget)
	t.addDuration(fmt.Sprintf("all at once, N=%d, all settled", n), settled, settledTarget)

	const plot, title, y = "engage-latency", "Engage latency against members", "latency (ms)"
	b.res.plot(plot, title, y, "one at a time p50", n, ms(percentile(oneByOne, 50)))
	b.res.plot(plot, title, y, "one at a time p99", n, ms(percentile(oneByOne, 99)))
	b.res.plot(plot, title, y, "all at once p50", n, ms(percentile(atOnce, 50)))
	b.res.plot(plot, title, y, "all at once p99", n, ms(percentile(atOnce, 99)))
	return nil
}

// engage registers n members with a fresh fleet, one at a time or all at
// once, and returns each member's engage latency and the time from the
// first creation until every member had settled.
func (b *bench) engage(ctx context.Context, n int, atOnce bool) ([]time.Duration, time.Duration, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2})
	if err != nil {
		return nil, 0, err
	}
	defer b.stopFleet(f)

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%03d", ns, i)
	}
	latencies := make([]time.Duration, n)
	if !atOnce {
		for i, name := range names {
			start := time.Now()
			if err := b.lab.register(ctx, ns, name, b.lab.serverKubeconfig(i)); err != nil {
				return nil, 0, err
			}
			engaged, err := f.awaitEngaged(name, time.Minute)
			if err != nil {
				return nil, 0, err
			}
			latencies[i] = engaged.Sub(start)
		}
		return latencies, 0, nil
	}

	start := time.Now()
	created, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig)
	if err != nil {
		return nil, 0, err
	}
	var last time.Time
	for i, name := range names {
		engaged, err := f.awaitEngaged(name, 2*time.Minute)
		if err != nil {
			return nil, 0, err
		}
		latencies[i] = engaged.Sub(created[i])
		if engaged.After(last) {
			last = engaged
		}
	}
	return latencies, last.Sub(start), nil
}
