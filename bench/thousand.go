package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const thousandTable = "1,000 members in one process"

const (
	thousandMembers = 1000
	// idleCPUWindow is how long the idle CPU is measured.
	idleCPUWindow = 20 * time.Second
)

// benchThousand runs a fleet manager process of 1,000 members, spread over
// the member servers, each with a client certificate of its own and
// caching thousandObjects ConfigMaps, with default probe settings: from
// its start until every member settled, its RSS, its CPU while idle, and
// its goroutines and sockets once every member is removed, against a
// process of the same fleet with no member.
func (b *bench) benchThousand(ctx context.Context) error {
	n := thousandMembers
	health := member.DefaultHealthOptions()
	t := b.res.table(thousandTable, fmt.Sprintf("A fleet-manager process (ConfigMap controller, 2 workers, default probe settings, %s) of %d members registered before it starts, many names over %d member API servers, each member with a client certificate of its own and caching %d ConfigMaps of 256 bytes. Settled: from the moment the manager leads and runs its controllers, a few hundred milliseconds after the process starts, until every member's objects were reconciled. RSS: %s after that, no collection forced. Idle CPU: the process's CPU time over %s after that, in one core; probes are the members over the probe interval (%s), of which reviews are the members over the review interval (%s) and the rest HTTP/2 PINGs, and the CPU per probe is the idle CPU over them, an upper bound. Allocated while idle and collections: what the process allocated per second, and the collections its collector ran, over the same window; the collector's share of the idle CPU follows them. Removed: all %d registration Secrets are deleted at once; once the process serves no member, and its goroutines and open sockets have not changed for a second, they are compared with those of a process of the same fleet namespace with no member, read %s after its start.",
		gogcLabel(""), n, len(b.lab.servers), thousandObjects, childIdle, idleCPUWindow, health.Interval, health.ReviewInterval, n, childIdle))
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)

	b.progress("  a client certificate for each of %d members", n)
	names := make([]string, n)
	kubeconfigs := make([][]byte, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%04d", ns, i)
		if kubeconfigs[i], err = controlplane.AdminKubeconfig(b.lab.servers[i%len(b.lab.servers)], names[i]); err != nil {
			return err
		}
	}

	baseline, err := b.emptyFleetChild(ctx)
	if err != nil {
		return fmt.Errorf("fleet with no member: %w", err)
	}
	if err := b.registerRefused(ctx, ns); err != nil {
		return err
	}

	if _, err := b.lab.registerAll(ctx, ns, names, func(i int) []byte { return kubeconfigs[i] }); err != nil {
		return err
	}
	c, err := startChild(gogcEnv(""), "-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns, "-watch="+thousandNamespace,
		fmt.Sprintf("-members=%d", n), fmt.Sprintf("-objects=%d", thousandObjects), "-idle="+childIdle.String(),
		"-settle="+settleDeadline.String(), "-idle-cpu="+idleCPUWindow.String(), "-removal")
	if err != nil {
		return err
	}
	defer c.kill()
	settled, err := c.next(settleDeadline + time.Minute)
	if err != nil {
		return err
	}
	if settled.Members < n {
		t.fail("start to all settled", "s", fmt.Sprintf("%d of %d members settled within %s", settled.Members, n, settleDeadline), atMost(10, ""))
		return nil
	}
	b.progress("  settled in %.1f s, with %.1f s of CPU, %d false Unhealthy transitions", settled.SettledSeconds, settled.CPUSeconds, settled.UnhealthyTransitions)
	t.add("start to all settled", "s", settled.SettledSeconds, atMost(10, ""))
	t.add("CPU to settle", "s", settled.CPUSeconds, nil)
	// No outage is injected: every change to Unhealthy while the members
	// settle is a false one, load taken for a failure.
	t.add("false Unhealthy transitions while the members settle", "transitions", float64(settled.UnhealthyTransitions), atMost(0, ""))
	memory, err := c.next(time.Minute)
	if err != nil {
		return err
	}
	t.add("RSS", "MiB", float64(memory.RSSBytes)/mib, atMost(1024, ""))
	t.add("RSS per member", "MiB", float64(memory.RSSBytes)/mib/float64(n), nil)
	t.add("goroutines per member", "goroutines", float64(memory.Goroutines-baseline.Goroutines)/float64(n), nil)
	idle, err := c.next(idleCPUWindow + time.Minute)
	if err != nil {
		return err
	}
	probes := float64(n) / health.Interval.Seconds()
	t.add("idle CPU", "% of a core", 100*idle.CPUFraction, atMost(5, ""))
	t.add("probes", "/s", probes, nil)
	t.add("of which reviews", "/s", float64(n)/health.ReviewInterval.Seconds(), nil)
	t.add("CPU per probe, at most", "µs", 1e6*idle.CPUFraction/probes, nil)
	t.add("allocated while idle", "KiB/s", idle.AllocBytesPerSecond/1024, nil)
	t.add("collections while idle", "collections", float64(idle.Collections), nil)

	if err := b.lab.hubClient.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: memberSecrets}); err != nil {
		return err
	}
	removed, err := c.next(2 * time.Minute)
	if err != nil {
		return err
	}
	t.add("goroutines after removal, over the memberless process's", "goroutines", float64(removed.Goroutines-baseline.Goroutines), atMost(0, ""))
	t.add("sockets after removal, over the memberless process's", "sockets", float64(removed.Sockets-baseline.Sockets), atMost(0, ""))
	if _, err := c.stop(time.Minute); err != nil {
		return err
	}
	return nil
}

// refusedLabel marks the registration Secret registerRefused makes, which
// the thousand scenario keeps when it removes its members.
const refusedLabel = "bench.fleetkube.io/refused"

// memberSecrets selects the registration Secrets of the thousand scenario's
// members.
var memberSecrets = labels.SelectorFromSet(labels.Set{registry.KubeconfigLabel: "true"}).Add(*mustRequirement(refusedLabel, selection.DoesNotExist))

func mustRequirement(key string, op selection.Operator) *labels.Requirement {
	r, err := labels.NewRequirement(key, op, nil)
	if err != nil {
		panic(err)
	}
	return r
}

// registerRefused registers a Secret the manager refuses in fleet
// namespace ns: the memberless process and the process whose members were
// all removed then hold the same registration, and have both recorded
// Events, whose machinery starts with the first.
func (b *bench) registerRefused(ctx context.Context, ns string) error {
	return b.lab.hubClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns + "-refused", Labels: map[string]string{registry.KubeconfigLabel: "true", refusedLabel: "true"}},
		Data:       map[string][]byte{registry.KubeconfigKey: []byte("not a kubeconfig")},
	})
}

// emptyFleetChild runs a fleet manager process of a fleet namespace whose
// only registration is refused, and returns its memory report, read
// childIdle after it started: the baseline of goroutines and sockets.
func (b *bench) emptyFleetChild(ctx context.Context) (childReport, error) {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return childReport{}, err
	}
	defer b.cleanUp(ctx, ns)
	if err := b.registerRefused(ctx, ns); err != nil {
		return childReport{}, err
	}
	c, err := startChild(gogcEnv(""), "-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns, "-watch="+thousandNamespace,
		"-members=0", "-idle="+childIdle.String())
	if err != nil {
		return childReport{}, err
	}
	defer c.kill()
	if _, err := c.next(time.Minute); err != nil {
		return childReport{}, err
	}
	memory, err := c.next(time.Minute)
	if err != nil {
		return childReport{}, err
	}
	_, err = c.stop(time.Minute)
	return memory, err
}
