package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const rolloutTable = "Rollout: Progressive against All, and revisions"

// The rollout's shape: rolloutConfigMaps ConfigMaps of one hub namespace,
// selected by a label, in one Propagation, named rollout, over members on
// rolloutServers member API servers of the scenario's own.
const (
	rolloutConfigMaps = 10
	rolloutServers    = 3
	// rolloutLabel, on the hub ConfigMaps and the registration Secrets,
	// holds the fleet's namespace: the Propagation selects only those.
	rolloutLabel = "bench.fleetkube.io/rollout"
	// rolloutName names the Propagation of each fleet.
	rolloutName = "rollout"
	// rolloutConcurrency is the Progressive rollout's maxConcurrency.
	rolloutConcurrency = "10%"
	// rolloutChanges are the changes made in a row for the revisions
	// figures.
	rolloutChanges = 15
	// rolloutIdle is how long nothing changes on the hub once the
	// revisions part's first rollout is Complete.
	rolloutIdle = 10 * time.Second
)

// Members of the timed rollouts and of the revisions figures, full and
// quick, and the targets.
var (
	fullRolloutMembers  = 100
	quickRolloutMembers = 20
	fullHistoryMembers  = 1000
	// The targets of the timed rollouts, at 100 members, from the first
	// runs (2026-11-28, with one ConfigMap; see README.md, Rollout): All
	// 1.1 s at 20 and at 100 members, Progressive 10 s at 20 and 19 s at
	// 100, on 2 cores shared with other test suites.
	rolloutAllTarget         = atMost(5000, "")
	rolloutProgressiveTarget = atMost(60000, "")
	// rolloutKeptTarget is the default history limit plus the one
	// revision every member is given once an All rollout is complete.
	rolloutKeptTarget   = atMost(float64(fleetv1alpha1.DefaultRevisionHistoryLimit+1), "")
	rolloutStatusTarget = atMost(256, "")
)

// rolloutNote explains how the rollout figures are made.
func rolloutNote(n, history int, quick bool) string {
	note := fmt.Sprintf("One Propagation copies %d ConfigMaps (available once applied), selected by a label, to %d members: names over %d member API servers of the scenario's own, "+
		"which log every write request (audit policy at Metadata level), as in the Baseline table. "+
		"Members share those servers, so members given different revisions write the same copies over one another: the Propagation sets drift: Report, "+
		"so that no member corrects another's write as drift (a member whose copy carries another revision's content hash still applies its own; see README.md, Rollout). "+
		"Timed rollouts: once the first rollout is Complete and the fleet made no reconcile for 2 s, the ConfigMaps' data are updated at once (the clock starts as the first update is sent); "+
		"the Propagation is read every %s (the controller writes its status at most every %s), and the clock stops once status.rollout.revision is a revision whose content holds every ConfigMap's new value, "+
		"its phase Complete, and status.available counts every member. The same Propagation is timed with strategy All, then, switched to Progressive "+
		"(maxConcurrency %s, minSuccessTime 0, one group in name order) and Complete again, with Progressive. "+
		"Between revisions at once: the most, over the reads while the rollout is Progressing, of the members given the rolled-out revision less those done with it (status.rollout.updated): "+
		"target maxConcurrency, %s of the members rounded down, at least 1. Writes: the audit logs' write requests by user agent fleet-manager/%s from the clock's start until the fleet made no reconcile for 2 s; "+
		"then every server's copies must hold the new value. "+
		"A newer revision holding the same values as one before, made with nothing changed on the hub, fails a timed rollout at once, naming both. "+
		"Revisions: a Propagation of the same %d ConfigMaps with strategy All over %d members, in a fleet of its own; once Complete (or failed), nothing changes for %.0f s, and the revisions made meanwhile are counted (target 0); "+
		"then %d changes in a row, each made once a revision holds the one before; "+
		"once the last is Complete and the fleet quiet for 2 s, its PropagationRevisions are counted (target: the default revisionHistoryLimit, %d, plus the one revision every member is given) "+
		"and their JSON summed as the hub's API server returns them in a list; the status's size is the JSON of .status as the API server returns the Propagation (it holds status.rollout.members, every member's name), "+
		"at Complete (target ≤ %g KiB) and the largest read during the changes. "+
		"Targets of the times: All ≤ %g s, Progressive ≤ %g s, from the first runs at 100 members with one ConfigMap (1.1 s and 19 s).",
		rolloutConfigMaps, n, rolloutServers, statusPoll, propagation.StatusInterval, rolloutConcurrency, rolloutConcurrency, propagation.ControllerName,
		rolloutConfigMaps, history, rolloutIdle.Seconds(), rolloutChanges, fleetv1alpha1.DefaultRevisionHistoryLimit, rolloutStatusTarget.limit,
		rolloutAllTarget.limit/1000, rolloutProgressiveTarget.limit/1000)
	if quick {
		note += fmt.Sprintf(" Quick mode runs %d members in both parts, not %d and %d.", quickRolloutMembers, fullRolloutMembers, fullHistoryMembers)
	}
	return note
}

// rolloutSetup is one fleet of the rollout scenario: its manager, its
// members and the hub namespace of its ConfigMaps and Propagation.
type rolloutSetup struct {
	fleetNS string
	team    string // the hub namespace of the ConfigMaps and the Propagation
	names   []string
	f       *propFleet
	counter *reconcileCounter
	servers *auditedServers
	// raw reads the hub's fleet objects as JSON, as its API server
	// returns them.
	raw rest.Interface
	// contents remembers each revision read: a revision never changes.
	contents map[int64]revisionContent
}

// benchRollout runs the rollout scenario: the same change rolled out All
// at once and Progressive, timed, then the revisions a Propagation keeps
// over many changes, and the size of its status.
func (b *bench) benchRollout(ctx context.Context) error {
	n, history := fullRolloutMembers, fullHistoryMembers
	if b.quick {
		n, history = quickRolloutMembers, quickRolloutMembers
	}
	t := b.res.table(rolloutTable, rolloutNote(n, history, b.quick))
	servers, err := startAuditedServers(rolloutServers)
	if err != nil {
		return fmt.Errorf("starting audited member API servers: %w", err)
	}
	defer func() {
		if err := servers.stop(); err != nil {
			b.progress("stopping the audited member API servers: %v", err)
		}
	}()
	if err := b.rolloutTimes(ctx, t, servers, n); err != nil {
		return fmt.Errorf("timed rollouts: %w", err)
	}
	if err := b.rolloutRevisions(ctx, t, servers, history); err != nil {
		return fmt.Errorf("revisions: %w", err)
	}
	return nil
}

// rolloutTimes times one change rolled out to n members with strategy
// All, then the next with Progressive.
func (b *bench) rolloutTimes(ctx context.Context, t *table, servers *auditedServers, n int) error {
	all := fmt.Sprintf("N=%d, All: change to every member Available", n)
	progressive := fmt.Sprintf("N=%d, Progressive (maxConcurrency %s, minSuccessTime 0): change to every member Available", n, rolloutConcurrency)
	overhead := fmt.Sprintf("N=%d, Progressive's overhead over All (Progressive − All)", n)
	ratio := fmt.Sprintf("N=%d, Progressive ÷ All", n)
	// maxConcurrency as the controller takes it: rounded down, at least 1.
	concurrency := intstr.FromString(rolloutConcurrency)
	maxConcurrency, err := intstr.GetScaledValueFromIntOrPercent(&concurrency, n, false)
	if err != nil {
		return err
	}
	maxConcurrency = max(maxConcurrency, 1)
	between := fmt.Sprintf("N=%d, Progressive: most members between revisions at once", n)
	allWrites, progressiveWrites := fmt.Sprintf("N=%d, All: writes to the member servers", n), fmt.Sprintf("N=%d, Progressive: writes to the member servers", n)
	betweenTarget := atMost(float64(maxConcurrency), "")
	failAll := func(why string) {
		t.fail(all, "ms", why, rolloutAllTarget)
		t.fail(allWrites, "writes", why, nil)
	}
	failProgressive := func(why string) {
		t.fail(progressive, "ms", why, rolloutProgressiveTarget)
		t.fail(between, "members", why, betweenTarget)
		t.fail(progressiveWrites, "writes", why, nil)
	}
	failBoth := func(why string) {
		failAll(why)
		failProgressive(why)
		t.fail(overhead, "ms", why, nil)
		t.fail(ratio, "×", why, nil)
	}

	s, cleanUp, err := b.startAllRollout(ctx, servers, n)
	defer cleanUp()
	if err != nil {
		return err
	}
	if _, err := b.awaitRollout(ctx, s, "0", time.Now(), 5*time.Minute, nil); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			failBoth("the first rollout: " + m.why)
			return nil
		}
		return err
	}

	// All.
	var allTook, progressiveTook time.Duration
	r, err := b.timedRollout(ctx, s, "1", 2*time.Minute, nil)
	if m, failed := errors.AsType[*measurementError](err); failed {
		failAll(m.why)
	} else if err != nil {
		return err
	} else {
		allTook = r.took
		t.addDuration(all, r.took, rolloutAllTarget)
		t.add(allWrites, "writes", float64(r.writes), nil)
	}

	// Progressive, once the switch is Complete.
	p := &fleetv1alpha1.Propagation{}
	if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: s.team, Name: rolloutName}, p); err != nil {
		return err
	}
	before := p.DeepCopy()
	p.Spec.Strategy = progressiveStrategy()
	if err := b.lab.hubClient.Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("switching to Progressive: %w", err)
	}
	value := "1"
	if allTook == 0 {
		// The All rollout failed: its value may not be everywhere yet.
		value = ""
	}
	if _, err := b.awaitRollout(ctx, s, value, time.Now(), 3*time.Minute, nil); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			failProgressive("switching to Progressive: " + m.why)
			t.fail(overhead, "ms", "the Progressive rollout failed", nil)
			t.fail(ratio, "×", "the Progressive rollout failed", nil)
			return nil
		}
		return err
	}
	most := 0
	r, err = b.timedRollout(ctx, s, "2", 5*time.Minute, func(p *fleetv1alpha1.Propagation, before int64) {
		ro := p.Status.Rollout
		if ro == nil || ro.Phase != fleetv1alpha1.RolloutProgressing || ro.Revision <= before {
			return
		}
		for _, g := range ro.Members {
			if g.Revision == ro.Revision {
				most = max(most, len(g.Names)-int(ro.Updated))
			}
		}
	})
	if m, failed := errors.AsType[*measurementError](err); failed {
		failProgressive(m.why)
	} else if err != nil {
		return err
	} else {
		progressiveTook = r.took
		t.addDuration(progressive, r.took, rolloutProgressiveTarget)
		t.add(between, "members", float64(most), betweenTarget)
		t.add(progressiveWrites, "writes", float64(r.writes), nil)
	}
	if allTook == 0 || progressiveTook == 0 {
		t.fail(overhead, "ms", "a rollout it compares failed", nil)
		t.fail(ratio, "×", "a rollout it compares failed", nil)
		return nil
	}
	t.addDuration(overhead, progressiveTook-allTook, nil)
	t.add(ratio, "×", float64(progressiveTook)/float64(allTook), nil)
	return nil
}

// rolloutRun is one timed rollout.
type rolloutRun struct {
	took   time.Duration
	writes int
}

// timedRollout, once the fleet of s is quiet, updates every ConfigMap of
// s to value and returns the time until the Propagation's rollout of a
// revision holding it is Complete, with every member Available, and the
// writes to the member servers until the fleet is quiet again. observe,
// if set, sees each read of the Propagation, with the revision rolled out
// before the change.
func (b *bench) timedRollout(ctx context.Context, s *rolloutSetup, value string, timeout time.Duration, observe func(p *fleetv1alpha1.Propagation, before int64)) (rolloutRun, error) {
	if err := s.counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		return rolloutRun{}, &measurementError{err.Error()}
	}
	p := &fleetv1alpha1.Propagation{}
	if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: s.team, Name: rolloutName}, p); err != nil {
		return rolloutRun{}, err
	}
	var before int64
	if p.Status.Rollout != nil {
		before = p.Status.Rollout.Revision
	}
	started := time.Now()
	if err := b.changeRolloutObjects(ctx, s, value); err != nil {
		return rolloutRun{}, err
	}
	var watch func(*fleetv1alpha1.Propagation, int)
	if observe != nil {
		watch = func(p *fleetv1alpha1.Propagation, _ int) { observe(p, before) }
	}
	took, err := b.awaitRollout(ctx, s, value, started, timeout, watch)
	if err != nil {
		return rolloutRun{}, err
	}
	if err := s.counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		return rolloutRun{}, &measurementError{err.Error()}
	}
	writes, err := s.servers.writes(started)
	if err != nil {
		return rolloutRun{}, err
	}
	if err := b.rolloutCopiesHold(ctx, s, value); err != nil {
		return rolloutRun{}, &measurementError{err.Error()}
	}
	return rolloutRun{took: took, writes: len(writes)}, nil
}

// rolloutRevisions makes rolloutChanges changes in a row to a Propagation
// of n members with strategy All, and reports the revisions it keeps,
// their size on the hub, and the size of its status.
func (b *bench) rolloutRevisions(ctx context.Context, t *table, servers *auditedServers, n int) error {
	made := fmt.Sprintf("N=%d, %d changes: revisions made", n, rolloutChanges)
	kept := fmt.Sprintf("N=%d, %d changes: PropagationRevisions kept", n, rolloutChanges)
	keptBytes := fmt.Sprintf("N=%d, %d changes: PropagationRevisions kept, JSON on the hub", n, rolloutChanges)
	status := fmt.Sprintf("N=%d, Propagation status at Complete, JSON", n)
	largest := fmt.Sprintf("N=%d, Propagation status, largest read during the changes, JSON", n)
	fail := func(why string) {
		t.fail(made, "revisions", why, nil)
		t.fail(kept, "revisions", why, rolloutKeptTarget)
		t.fail(keptBytes, "KiB", why, nil)
		t.fail(status, "KiB", why, rolloutStatusTarget)
		t.fail(largest, "KiB", why, nil)
	}
	s, cleanUp, err := b.startAllRollout(ctx, servers, n)
	defer cleanUp()
	if err != nil {
		return err
	}
	_, firstErr := b.awaitRollout(ctx, s, "0", time.Now(), 5*time.Minute, nil)
	m, firstFailed := errors.AsType[*measurementError](firstErr)
	if firstErr != nil && !firstFailed {
		return firstErr
	}
	// Nothing changes on the hub for rolloutIdle: no revision is made.
	first, err := b.newestRevision(ctx, s)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rolloutIdle):
	}
	idle, err := b.newestRevision(ctx, s)
	if err != nil {
		return err
	}
	t.add(fmt.Sprintf("N=%d, revisions made in %.0f s with nothing changed", n, rolloutIdle.Seconds()), "revisions", float64(idle-first), atMost(0, ""))
	if firstFailed {
		fail("the first rollout: " + m.why)
		return nil
	}
	first = idle
	most := 0
	sized := func(_ *fleetv1alpha1.Propagation, size int) { most = max(most, size) }
	for k := 1; k <= rolloutChanges; k++ {
		value := strconv.Itoa(k)
		if err := b.changeRolloutObjects(ctx, s, value); err != nil {
			return err
		}
		if err := b.awaitRevision(ctx, s, value, 30*time.Second, sized); err != nil {
			if m, failed := errors.AsType[*measurementError](err); failed {
				fail(fmt.Sprintf("change %d: %s", k, m.why))
				return nil
			}
			return err
		}
	}
	last := strconv.Itoa(rolloutChanges)
	if _, err := b.awaitRollout(ctx, s, last, time.Now(), 5*time.Minute, sized); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail("the last change's rollout: " + m.why)
			return nil
		}
		return err
	}
	if err := s.counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		fail(err.Error())
		return nil
	}
	_, size, err := b.readRolloutPropagation(ctx, s)
	if err != nil {
		return err
	}
	newest, err := b.newestRevision(ctx, s)
	if err != nil {
		return err
	}
	revs, err := b.listRolloutRevisions(ctx, s)
	if err != nil {
		return err
	}
	total := 0
	for _, rev := range revs {
		total += len(rev)
	}
	b.progress("  revisions %d to %d made, %d kept (%d bytes), status %d bytes, largest %d bytes", first+1, newest, len(revs), total, size, most)
	t.add(made, "revisions", float64(newest-first), nil)
	t.add(kept, "revisions", float64(len(revs)), rolloutKeptTarget)
	t.add(keptBytes, "KiB", float64(total)/1024, nil)
	t.add(status, "KiB", float64(size)/1024, rolloutStatusTarget)
	t.add(largest, "KiB", float64(max(most, size))/1024, nil)
	return nil
}

// startAllRollout sets up a fleet of n members and its Propagation with
// strategy All; cleanUp removes what was set up, even on an error.
func (b *bench) startAllRollout(ctx context.Context, servers *auditedServers, n int) (s *rolloutSetup, cleanUp func(), err error) {
	s, err = b.setUpRollout(ctx, servers, n)
	cleanUp = func() {
		if s != nil {
			b.cleanUpRollout(context.WithoutCancel(ctx), s)
		}
	}
	if err != nil {
		return s, cleanUp, err
	}
	return s, cleanUp, b.createRolloutPropagation(ctx, s, fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutAll})
}

// setUpRollout makes a fleet of n members over servers, its hub namespace
// and ConfigMaps, starts its manager, and waits until every member is
// Ready and engaged. Clean s up even when it returns an error.
func (b *bench) setUpRollout(ctx context.Context, servers *auditedServers, n int) (*rolloutSetup, error) {
	fleetNS, err := b.lab.newNamespace(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := newRawHubClient(b.lab.hub.Config)
	if err != nil {
		return nil, err
	}
	s := &rolloutSetup{fleetNS: fleetNS, team: fleetNS + "-rollout", servers: servers, raw: raw, contents: map[int64]revisionContent{}}
	for i := range n {
		s.names = append(s.names, fmt.Sprintf("%s-m%04d", fleetNS, i))
	}
	if err := b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.team}}); err != nil {
		return s, err
	}
	if err := parallel(ctx, rolloutConfigMaps, func(i int) error {
		return b.lab.hubClient.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: rolloutObject(i), Labels: map[string]string{rolloutLabel: fleetNS}},
			Data:       map[string]string{"v": "0", "index": strconv.Itoa(i)},
		})
	}); err != nil {
		return s, err
	}
	if s.f, err = startPropFleet(b.lab.hub.Config, fleetNS, true); err != nil {
		return s, err
	}
	if s.counter, err = newReconcileCounter(); err != nil {
		return s, err
	}
	if err := parallel(ctx, n, func(i int) error {
		return b.lab.hubClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: s.names[i], Labels: map[string]string{registry.KubeconfigLabel: "true", rolloutLabel: fleetNS}},
			Data:       map[string][]byte{registry.KubeconfigKey: servers.kubeconfigs[i%len(servers.kubeconfigs)]},
		})
	}); err != nil {
		return s, err
	}
	timeout := 3 * time.Minute
	if n > 200 {
		timeout = 10 * time.Minute
	}
	return s, await(fmt.Sprintf("%d members Ready and engaged", n), timeout, func() bool {
		if s.f.engaged() != n {
			time.Sleep(50 * time.Millisecond)
			return false
		}
		return allReady(s.f, s.names)
	})
}

func rolloutObject(i int) string { return fmt.Sprintf("settings-%02d", i) }

// createRolloutPropagation creates the Propagation of s: every ConfigMap
// of s to every member of s, with strategy, and drift Report: members
// given different revisions write the same copies of their shared
// servers.
func (b *bench) createRolloutPropagation(ctx context.Context, s *rolloutSetup, strategy fleetv1alpha1.RolloutStrategy) error {
	byLabel := fleetv1alpha1.SetAsLabelSelector(map[string]string{rolloutLabel: s.fleetNS})
	return b.lab.hubClient.Create(ctx, &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: rolloutName},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: byLabel}},
			Members:   fleetv1alpha1.MemberSelector{Selector: byLabel},
			Drift:     fleetv1alpha1.DriftReport,
			Strategy:  strategy,
		},
	})
}

// progressiveStrategy is the Progressive strategy the scenario times.
func progressiveStrategy() fleetv1alpha1.RolloutStrategy {
	return fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
		MaxConcurrency: ptr.To(intstr.FromString(rolloutConcurrency)), MinSuccessTime: &metav1.Duration{},
	}}
}

// changeRolloutObjects sets data v of every ConfigMap of s to value, all
// at once.
func (b *bench) changeRolloutObjects(ctx context.Context, s *rolloutSetup, value string) error {
	patch := fmt.Appendf(nil, `{"data":{"v":%q}}`, value)
	return parallel(ctx, rolloutConfigMaps, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: rolloutObject(i)}}
		return b.lab.hubClient.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
	})
}

// awaitRollout reads the Propagation of s every statusPoll until its
// status describes its generation and its rollout of a revision holding
// value (any, if value is empty) is Complete, with every member
// Available, and returns the time since then. observe, if set, sees each
// read and the size of its status. Nothing may change on the hub
// meanwhile but what made value: a newer revision that holds value too
// was made with nothing changed, and fails the measurement at once.
func (b *bench) awaitRollout(ctx context.Context, s *rolloutSetup, value string, since time.Time, timeout time.Duration, observe func(*fleetv1alpha1.Propagation, int)) (time.Duration, error) {
	deadline := since.Add(timeout)
	var first int64 // the first revision seen that holds value
	for {
		p, size, err := b.readRolloutPropagation(ctx, s)
		now := time.Now()
		if err != nil {
			return 0, err
		}
		if observe != nil {
			observe(p, size)
		}
		if newest := p.Status.Revision; value != "" && newest > first {
			c, err := b.readRevision(ctx, s, newest)
			if err != nil {
				return 0, err
			}
			switch {
			case c.value != value:
			case first == 0:
				first = newest
			default:
				return 0, &measurementError{b.unchangedRevision(ctx, s, first, newest)}
			}
		}
		ro := p.Status.Rollout
		if p.Status.ObservedGeneration == p.Generation && ro != nil && ro.Phase == fleetv1alpha1.RolloutComplete && ro.Revision > 0 &&
			int(p.Status.Available) == len(s.names) && int(p.Status.Selected) == len(s.names) {
			c, err := b.readRevision(ctx, s, ro.Revision)
			if err != nil {
				return 0, err
			}
			if value == "" || c.value == value {
				return now.Sub(since), nil
			}
		}
		if now.After(deadline) {
			return 0, &measurementError{fmt.Sprintf("the rollout was not Complete in every member within %s: %s", timeout, describeRollout(p))}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(statusPoll):
		}
	}
}

// unchangedRevision says why revision newer, made when nothing changed
// on the hub since revision older, whose ConfigMaps it holds too, is a
// failure, and how the two differ.
func (b *bench) unchangedRevision(ctx context.Context, s *rolloutSetup, older, newer int64) string {
	a, _ := b.readRevision(ctx, s, older)
	c, _ := b.readRevision(ctx, s, newer)
	why := fmt.Sprintf("the controller made revision %d with nothing changed on the hub since revision %d, whose ConfigMaps it holds", newer, older)
	switch {
	case len(a.raw) == 0 || len(c.raw) == 0:
		return why + " (revision " + strconv.FormatInt(older, 10) + " was pruned meanwhile)"
	case slices.Equal(a.names, c.names):
		return why + fmt.Sprintf(", in the same order (%d and %d bytes of content)", len(a.raw), len(c.raw))
	}
	return why + fmt.Sprintf(" in another order: its content lists the objects as the hub cache lists them, unsorted, so its hash changes with the order (%s against %s)",
		strings.Join(c.names, ","), strings.Join(a.names, ","))
}

// awaitRevision waits until the Propagation of s has a revision holding
// value, reading the Propagation every statusPoll for observe.
func (b *bench) awaitRevision(ctx context.Context, s *rolloutSetup, value string, timeout time.Duration, observe func(*fleetv1alpha1.Propagation, int)) error {
	deadline := time.Now().Add(timeout)
	for {
		p, size, err := b.readRolloutPropagation(ctx, s)
		if err != nil {
			return err
		}
		observe(p, size)
		var list fleetv1alpha1.PropagationRevisionList
		if err := b.lab.hubClient.List(ctx, &list, client.InNamespace(s.team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: rolloutName}); err != nil {
			return err
		}
		for _, rev := range list.Items {
			if contentOf(rev.Content.Raw).value == value {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return &measurementError{fmt.Sprintf("no revision held the change within %s: %s", timeout, describeRollout(p))}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(statusPoll):
		}
	}
}

// describeRollout sums up a Propagation's status and rollout for a
// failure's reason.
func describeRollout(p *fleetv1alpha1.Propagation) string {
	s := describeStatus(&p.Status)
	if p.Status.ObservedGeneration != p.Generation {
		s += fmt.Sprintf(", status of generation %d, not %d", p.Status.ObservedGeneration, p.Generation)
	}
	if ro := p.Status.Rollout; ro != nil {
		s += fmt.Sprintf("; rollout of revision %d (newest %d) %s, %d updated: %s", ro.Revision, p.Status.Revision, ro.Phase, ro.Updated, ro.Message)
	} else {
		s += "; no rollout status"
	}
	return s
}

// revisionContent is what the scenario reads of a revision's content:
// the value data v of every ConfigMap holds ("" if they differ, or are
// not all there), the objects' names in the content's order, and the
// content itself.
type revisionContent struct {
	value string
	names []string
	raw   []byte
}

// readRevision reads revision n of the Propagation of s, each once: a
// revision never changes. A revision not found reads as empty.
func (b *bench) readRevision(ctx context.Context, s *rolloutSetup, n int64) (revisionContent, error) {
	if c, ok := s.contents[n]; ok {
		return c, nil
	}
	var rev fleetv1alpha1.PropagationRevision
	if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: s.team, Name: fmt.Sprintf("%s-%d", rolloutName, n)}, &rev); err != nil {
		return revisionContent{}, client.IgnoreNotFound(err)
	}
	s.contents[n] = contentOf(rev.Content.Raw)
	return s.contents[n], nil
}

// contentOf reads a revision's content as the controller writes it:
// {"objects": [{"object": {...}}]}.
func contentOf(raw []byte) revisionContent {
	var c struct {
		Objects []struct {
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Data map[string]string `json:"data"`
			} `json:"object"`
		} `json:"objects"`
	}
	rc := revisionContent{raw: raw}
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Objects) == 0 {
		return rc
	}
	rc.value = c.Objects[0].Object.Data["v"]
	for _, o := range c.Objects {
		rc.names = append(rc.names, o.Object.Metadata.Name)
		if o.Object.Data["v"] != rc.value {
			rc.value = ""
		}
	}
	if len(c.Objects) != rolloutConfigMaps {
		rc.value = ""
	}
	return rc
}

// newRawHubClient returns a REST client of the hub's fleet API that reads
// JSON, unthrottled: the scenario reads the Propagation every statusPoll.
func newRawHubClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &fleetv1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	c.QPS = -1
	return rest.RESTClientFor(c)
}

// readRolloutPropagation reads the Propagation of s and returns it with
// the size of its status's JSON as the hub's API server returns it.
func (b *bench) readRolloutPropagation(ctx context.Context, s *rolloutSetup) (*fleetv1alpha1.Propagation, int, error) {
	body, err := s.raw.Get().Namespace(s.team).Resource("propagations").Name(rolloutName).DoRaw(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("reading Propagation %s/%s: %w", s.team, rolloutName, err)
	}
	var p fleetv1alpha1.Propagation
	var parts struct {
		Status json.RawMessage `json:"status"`
	}
	if err := errors.Join(json.Unmarshal(body, &p), json.Unmarshal(body, &parts)); err != nil {
		return nil, 0, fmt.Errorf("decoding Propagation %s/%s: %w", s.team, rolloutName, err)
	}
	return &p, len(parts.Status), nil
}

// newestRevision returns the number of the newest PropagationRevision of
// the Propagation of s, 0 if none.
func (b *bench) newestRevision(ctx context.Context, s *rolloutSetup) (int64, error) {
	var list fleetv1alpha1.PropagationRevisionList
	if err := b.lab.hubClient.List(ctx, &list, client.InNamespace(s.team), client.MatchingLabels{fleetv1alpha1.PropagationLabel: rolloutName}); err != nil {
		return 0, err
	}
	var newest int64
	for _, rev := range list.Items {
		newest = max(newest, rev.Revision)
	}
	return newest, nil
}

// listRolloutRevisions returns the JSON of each PropagationRevision of the
// Propagation of s, as the hub's API server returns it in a list.
func (b *bench) listRolloutRevisions(ctx context.Context, s *rolloutSetup) ([]json.RawMessage, error) {
	selector := fmt.Sprintf("%s=%s,%s=Propagation", fleetv1alpha1.PropagationLabel, rolloutName, fleetv1alpha1.RevisionOfLabel)
	body, err := s.raw.Get().Namespace(s.team).Resource("propagationrevisions").Param("labelSelector", selector).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the revisions of %s/%s: %w", s.team, rolloutName, err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decoding the revisions of %s/%s: %w", s.team, rolloutName, err)
	}
	return list.Items, nil
}

// rolloutCopiesHold checks that every server holds every ConfigMap copy
// of s with data v == value.
func (b *bench) rolloutCopiesHold(ctx context.Context, s *rolloutSetup, value string) error {
	for i, c := range s.servers.clients {
		cms := &corev1.ConfigMapList{}
		if err := c.List(ctx, cms, client.InNamespace(s.team), client.MatchingLabels{rolloutLabel: s.fleetNS}); err != nil {
			return fmt.Errorf("listing the copies in member server %d: %w", i, err)
		}
		if len(cms.Items) != rolloutConfigMaps {
			return fmt.Errorf("member server %d holds %d ConfigMap copies, not %d", i, len(cms.Items), rolloutConfigMaps)
		}
		for _, cm := range cms.Items {
			if cm.Data["v"] != value {
				return fmt.Errorf("the copy of ConfigMap %s in member server %d holds v=%q, not %q", cm.Name, i, cm.Data["v"], value)
			}
		}
	}
	return nil
}

// cleanUpRollout stops the manager of s, then deletes the Propagation
// (its finalizer released), its revisions (envtest runs no garbage
// collector), the ConfigMaps, the hub namespace and the fleet. The member
// servers, the scenario's own, go with their copies.
func (b *bench) cleanUpRollout(ctx context.Context, s *rolloutSetup) {
	if s.f != nil {
		b.stopPropFleet(s.f)
	}
	defer os.RemoveAll(stateDir(s.fleetNS))
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: rolloutName}}
	err := errors.Join(
		client.IgnoreNotFound(b.lab.hubClient.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))),
		client.IgnoreNotFound(b.lab.hubClient.Delete(ctx, p)),
		b.lab.hubClient.DeleteAllOf(ctx, &fleetv1alpha1.PropagationRevision{}, client.InNamespace(s.team)),
		b.lab.hubClient.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(s.team)),
		controlplane.RemoveNamespace(ctx, b.lab.hub.Config, s.team))
	if err != nil {
		b.progress("cleaning up the rollout of %s: %v", s.fleetNS, err)
	}
	b.cleanUp(ctx, s.fleetNS)
}
