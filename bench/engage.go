package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const engageTable = "Engage latency"

// benchEngage measures, for n members, the time from each Secret's
// creation to the first reconcile of an object in that member: Secrets
// created one at a time, each once the one before has engaged, and all at
// once; and one at a time again with the identity check on. Every member
// holds one ConfigMap. Beside each, a plain informer in the bench's
// process shows the hub's part: from the Secret's creation to its event.
func (b *bench) benchEngage(ctx context.Context, n int) error {
	t := b.res.table(engageTable, "From a registration Secret's creation to the first reconcile of an object in its member, which holds one ConfigMap. "+
		"Members share the member API servers under different Secret names, so the identity check (duplicate clusters refused, the default) is off, "+
		"except in the rows that say it is on: there each member is unregistered once engaged, before the next, so no two names reach one server at once. "+
		"\"Hub delivery\" is the hub's part, not fleet-manager's: from the same Secret's creation to its event in a plain client-go informer on the registration Secrets, in the bench's process, in the same run.")

	oneByOne, err := b.engage(ctx, n, false, false)
	if err != nil {
		return fmt.Errorf("one at a time: %w", err)
	}
	var allTarget *target
	if n == 10 {
		allTarget = atMost(60, "1,126 ms; fleet-manager 110 ms, "+outsideMCR)
	}
	t.addDuration(fmt.Sprintf("one at a time, N=%d, p50", n), percentile(oneByOne.latencies, 50), atMost(12, "116 ms; fleet-manager 17.2 ms, "+outsideMCR))
	t.addDuration(fmt.Sprintf("one at a time, N=%d, p99", n), percentile(oneByOne.latencies, 99), nil)
	t.addDuration(fmt.Sprintf("one at a time, N=%d, max", n), percentile(oneByOne.latencies, 100), nil)
	t.addDuration(fmt.Sprintf("one at a time, N=%d, hub delivery p50 (the hub's part)", n), percentile(oneByOne.hubDelivery, 50), nil)

	atOnce, err := b.engage(ctx, n, true, false)
	if err != nil {
		return fmt.Errorf("all at once: %w", err)
	}
	var p99Target, settledTarget *target
	if n == 100 {
		p99Target = atMost(2000, "")
		settledTarget = atMost(3000, "8.4 s")
	}
	t.addDuration(fmt.Sprintf("all at once, N=%d, p50", n), percentile(atOnce.latencies, 50), nil)
	t.addDuration(fmt.Sprintf("all at once, N=%d, p99", n), percentile(atOnce.latencies, 99), p99Target)
	t.addDuration(fmt.Sprintf("all at once, N=%d, max", n), percentile(atOnce.latencies, 100), allTarget)
	t.addDuration(fmt.Sprintf("all at once, N=%d, all settled", n), atOnce.settled, settledTarget)
	t.addDuration(fmt.Sprintf("all at once, N=%d, hub delivery p50 (the hub's part)", n), percentile(atOnce.hubDelivery, 50), nil)

	identified, err := b.engage(ctx, n, false, true)
	if err != nil {
		return fmt.Errorf("one at a time, identity check on: %w", err)
	}
	t.addDuration(fmt.Sprintf("one at a time, identity check on, N=%d, p50", n), percentile(identified.latencies, 50), nil)
	t.addDuration(fmt.Sprintf("one at a time, identity check on, N=%d, hub delivery p50 (the hub's part)", n), percentile(identified.hubDelivery, 50), nil)

	const plot, title, y = "engage-latency", "Engage latency against members", "latency (ms)"
	b.res.plot(plot, title, y, "one at a time p50", n, ms(percentile(oneByOne.latencies, 50)))
	b.res.plot(plot, title, y, "one at a time p99", n, ms(percentile(oneByOne.latencies, 99)))
	b.res.plot(plot, title, y, "all at once p50", n, ms(percentile(atOnce.latencies, 50)))
	b.res.plot(plot, title, y, "all at once p99", n, ms(percentile(atOnce.latencies, 99)))
	return nil
}

// engagement is what one engage run measured.
type engagement struct {
	// latencies are each member's engage latency.
	latencies []time.Duration
	// hubDelivery are, for each member's Secret, the time from its
	// creation to its event in a plain informer: the hub's part.
	hubDelivery []time.Duration
	// settled is, all at once, the time from the first creation until
	// every member had engaged.
	settled time.Duration
}

// engage registers n members with a fresh fleet, one at a time or all at
// once, and measures them. With identify, the fleet refuses duplicate
// clusters, as by default, and each member is unregistered once engaged,
// and gone, before the next is registered (one at a time only).
func (b *bench) engage(ctx context.Context, n int, atOnce, identify bool) (*engagement, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return nil, err
	}
	defer b.cleanUp(ctx, ns)
	f, err := startFleet(b.lab.hub.Config, fleetConfig{namespace: ns, watch: engageNamespace, workers: 2, refuseDuplicates: identify})
	if err != nil {
		return nil, err
	}
	defer b.stopFleet(f)
	seen, err := b.watchSecrets(ctx, ns)
	if err != nil {
		return nil, err
	}
	defer seen.stop()

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%03d", ns, i)
	}
	res := &engagement{latencies: make([]time.Duration, n), hubDelivery: make([]time.Duration, n)}
	created := make([]time.Time, n)
	if !atOnce {
		for i, name := range names {
			if identify && i > 0 {
				if err := b.lab.unregister(ctx, ns, names[i-1]); err != nil {
					return nil, err
				}
				if err := await(names[i-1]+" gone", time.Minute, func() bool { return !slices.Contains(f.mgr.ClusterNames(), names[i-1]) }); err != nil {
					return nil, err
				}
			}
			created[i] = time.Now()
			if err := b.lab.register(ctx, ns, name, b.lab.serverKubeconfig(i)); err != nil {
				return nil, err
			}
			engaged, err := f.awaitEngaged(name, time.Minute)
			if err != nil {
				return nil, err
			}
			res.latencies[i] = engaged.Sub(created[i])
		}
	} else {
		start := time.Now()
		if created, err = b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
			return nil, err
		}
		var last time.Time
		for i, name := range names {
			engaged, err := f.awaitEngaged(name, 2*time.Minute)
			if err != nil {
				return nil, err
			}
			res.latencies[i] = engaged.Sub(created[i])
			if engaged.After(last) {
				last = engaged
			}
		}
		res.settled = last.Sub(start)
	}
	for i, name := range names {
		at, err := seen.await(name)
		if err != nil {
			return nil, err
		}
		res.hubDelivery[i] = at.Sub(created[i])
	}
	return res, nil
}

// secretEvents is a plain client-go informer on the registration Secrets
// of one namespace: the time each Secret's add event reached it.
type secretEvents struct {
	mu    sync.Mutex
	added map[string]time.Time
	stop  context.CancelFunc
}

// watchSecrets starts a plain informer on ns's registration Secrets and
// returns once it has listed them.
func (b *bench) watchSecrets(ctx context.Context, ns string) (*secretEvents, error) {
	cs, err := kubernetes.NewForConfig(b.lab.hub.Config)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = registry.KubeconfigLabel + "=true" }))
	informer := factory.Core().V1().Secrets().Informer()
	s := &secretEvents{added: map[string]time.Time{}}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		at := time.Now()
		if secret, ok := obj.(*corev1.Secret); ok {
			s.mu.Lock()
			s.added[secret.Name] = at
			s.mu.Unlock()
		}
	}}); err != nil {
		return nil, err
	}
	ctx, s.stop = context.WithCancel(ctx)
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		s.stop()
		factory.Shutdown()
		return nil, fmt.Errorf("the plain informer on %s's Secrets did not sync", ns)
	}
	stop := s.stop
	s.stop = func() { stop(); factory.Shutdown() }
	return s, nil
}

// await returns when Secret name's add event reached the informer.
func (s *secretEvents) await(name string) (time.Time, error) {
	var at time.Time
	err := await(name+" seen by a plain informer", time.Minute, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		var ok bool
		at, ok = s.added[name]
		return ok
	})
	return at, err
}
