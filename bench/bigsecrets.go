package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/kubeconfigtest"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

const bigSecretsTable = "Large Secrets"

// The large Secrets of issue 12 (defect 10): each a valid kubeconfig just
// under the 1 MiB a kubeconfig may have, a key per line under preferences,
// which decoding turned into hundreds of megabytes. Quick mode creates
// half as many, to stay within 30 s.
const (
	bigSecrets     = 100
	bigSecretBytes = kubeconfig.MaxKubeconfigBytes - 4<<10
	// bigSecretsRSSTarget is the most, in MiB, the large Secrets may add
	// to the fleet manager's peak RSS.
	bigSecretsRSSTarget = 50
	bigSecretsDeadline  = 2 * time.Minute
)

// benchBigSecrets runs a fleet-manager process with two good members
// until it idles, then creates the large Secrets on its hub, followed by
// one good Secret. It measures the process's peak RSS from its RSS just
// before the first large Secret was created, and how long until every
// large Secret's MemberCluster carried its refusal and the good member's
// was Ready. Then it starts a second process on the same hub, where the
// large Secrets now are, and compares its start-up peak with the first's.
func (b *bench) benchBigSecrets(ctx context.Context) error {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	defer b.cleanUp(ctx, ns)
	good := []string{ns + "-good0", ns + "-good1"}
	if _, err := b.lab.registerAll(ctx, ns, good, b.lab.serverKubeconfig); err != nil {
		return err
	}
	n := bigSecrets
	if b.quick {
		n /= 2
	}
	per := fmt.Sprintf(", %d Secrets", n)
	t := b.res.table(bigSecretsTable, fmt.Sprintf("A fleet-manager process (%s) with %d good members engaged and idle; then %d registration Secrets are created on its hub, from 8 writers, each a valid kubeconfig of %d KiB with a key per line and no current context, followed by one good Secret. The RSS baseline is the process's RSS just before the first large Secret is created; its peak (VmHWM, reset at the baseline) is read once every large Secret's MemberCluster says CredentialsAccepted=False for %s and the good member's says Ready; RSS after is read 3 s later. The clocks start when the first large Secret is created, and, for the good member, when its Secret is. At start-up: the peak RSS (VmHWM) of a second process started once the large Secrets are there, 1 s after its good members settled, less the first process's at the same point.",
		gogcLabel(""), len(good), n, bigSecretBytes>>10, kubeconfig.ReasonKubeconfigTooComplex))
	first, err := b.startBigSecretsChild(ns, len(good))
	if err != nil {
		return err
	}
	defer func() { b.stopBigSecretsChild(first) }()
	if first == nil {
		t.fail("RSS added at peak"+per, "MiB", fmt.Sprintf("the good members did not settle within %s", settleDeadline), atMost(bigSecretsRSSTarget, ""))
		return nil
	}
	status := fmt.Sprintf("/proc/%d/status", first.cmd.Process.Pid)
	startupWithout, err := procStatusKiB(status, "VmHWM")
	if err != nil {
		return err
	}
	m, err := b.bigSecrets(ctx, first.cmd.Process.Pid, ns, n)
	if err != nil {
		return err
	}
	t.add("RSS added at peak"+per, "MiB", m.peak, atMost(bigSecretsRSSTarget, ""))
	t.add("RSS added, 3 s after"+per, "MiB", m.after, nil)
	t.addDuration("creating the Secrets on the hub"+per, m.created, nil)
	t.addDuration("every large Secret refused on its MemberCluster"+per, m.refused, nil)
	t.addDuration("the good member's Secret to its MemberCluster Ready"+per, m.goodReady, nil)

	b.stopBigSecretsChild(first)
	first = nil
	second, err := b.startBigSecretsChild(ns, len(good)+1)
	if err != nil {
		return err
	}
	defer func() { b.stopBigSecretsChild(second) }()
	if second == nil {
		t.fail("start-up peak RSS added"+per, "MiB", fmt.Sprintf("the good members did not settle within %s", settleDeadline), atMost(bigSecretsRSSTarget, ""))
		return nil
	}
	startupWith, err := procStatusKiB(fmt.Sprintf("/proc/%d/status", second.cmd.Process.Pid), "VmHWM")
	if err != nil {
		return err
	}
	t.add("start-up peak RSS added"+per, "MiB", float64(startupWith-startupWithout)/1024, atMost(bigSecretsRSSTarget, ""))
	return nil
}

// startBigSecretsChild starts a fleet-manager process on the Secrets of
// ns and returns it once members members settled and it idled 1 s; nil,
// stopped, if they did not settle.
func (b *bench) startBigSecretsChild(ns string, members int) (*child, error) {
	c, err := startChild(gogcEnv(""), "-mode=fleet", "-hub="+b.lab.hubFile, "-namespace="+ns,
		"-watch="+engageNamespace, fmt.Sprintf("-members=%d", members), "-objects=1", "-idle=1s")
	if err != nil {
		return nil, err
	}
	settled, err := c.next(settleDeadline + time.Minute)
	if err == nil {
		_, err = c.next(time.Minute) // idled
	}
	if err != nil || settled.Members < members {
		b.stopBigSecretsChild(c)
		return nil, err
	}
	return c, nil
}

func (b *bench) stopBigSecretsChild(c *child) {
	if c == nil {
		return
	}
	if _, err := c.stop(time.Minute); err != nil {
		b.progress("stopping a large Secrets child: %v", err)
	}
}

// bigSecretsFigures are one run's measurements: RSS in MiB over the
// baseline, durations from the first large Secret's creation.
type bigSecretsFigures struct {
	peak, after                 float64
	created, refused, goodReady time.Duration
}

func (b *bench) bigSecrets(ctx context.Context, pid int, ns string, n int) (bigSecretsFigures, error) {
	var m bigSecretsFigures
	status := fmt.Sprintf("/proc/%d/status", pid)
	baseline, err := procStatusKiB(status, "VmRSS")
	if err != nil {
		return m, err
	}
	// Writing 5 resets VmHWM to the current RSS; sampling covers a kernel
	// that does not allow it.
	resetErr := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	stopSampling := sampleRSS(status)

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-big%03d", ns, i)
	}
	big := kubeconfigtest.Flat(bigSecretBytes)
	start := time.Now()
	if _, err := b.lab.registerAll(ctx, ns, names, func(int) []byte { return big }); err != nil {
		stopSampling()
		return m, err
	}
	m.created = time.Since(start)
	goodName := ns + "-late"
	goodCreated := time.Now()
	if err := b.lab.register(ctx, ns, goodName, b.lab.serverKubeconfig(2)); err != nil {
		stopSampling()
		return m, err
	}

	deadline := start.Add(bigSecretsDeadline)
	for m.refused == 0 || m.goodReady == 0 {
		if time.Now().After(deadline) {
			stopSampling()
			return m, fmt.Errorf("after %s: every large Secret refused: %v, the good member Ready: %v", bigSecretsDeadline, m.refused != 0, m.goodReady != 0)
		}
		list := &fleetv1alpha1.MemberClusterList{}
		if err := b.lab.hubClient.List(ctx, list); err != nil {
			stopSampling()
			return m, err
		}
		refused := 0
		for _, mc := range list.Items {
			accepted := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
			switch {
			case mc.Name == goodName && mc.Status.State == fleetv1alpha1.MemberStateReady && m.goodReady == 0:
				m.goodReady = time.Since(goodCreated)
			case accepted != nil && accepted.Status == metav1.ConditionFalse && accepted.Reason == kubeconfig.ReasonKubeconfigTooComplex:
				refused++
			}
		}
		if refused == n && m.refused == 0 {
			m.refused = time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	peakKiB := stopSampling()
	if resetErr == nil {
		hwm, err := procStatusKiB(status, "VmHWM")
		if err != nil {
			return m, err
		}
		peakKiB = max(peakKiB, hwm)
	}
	time.Sleep(3 * time.Second)
	after, err := procStatusKiB(status, "VmRSS")
	if err != nil {
		return m, err
	}
	m.peak = float64(peakKiB-baseline) / 1024
	m.after = float64(after-baseline) / 1024
	return m, ctx.Err()
}

// sampleRSS reads the VmRSS of the process status is the /proc status
// file of, every 10 ms, until the returned function is called; that
// returns the largest, in KiB.
func sampleRSS(status string) (stop func() int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak int64
	wg.Go(func() {
		for {
			if rss, err := procStatusKiB(status, "VmRSS"); err == nil {
				peak = max(peak, rss)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		return peak
	}
}
