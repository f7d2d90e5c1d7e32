package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/engage"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

const propagationTable = "Propagation"

// pollInterval is how often the fan-out reads each member's reconcile
// count: the resolution of its latencies.
const pollInterval = 5 * time.Millisecond

// propagationNote explains how the Propagation figures are made.
var propagationNote = fmt.Sprintf("One Propagation in one hub namespace selects every member of its fleet. "+
	"Fan-out: the members share the lab's member API servers under their own Secret names, so all members of one server "+
	"write the same copy: the first to reconcile applies the change, the others find it in their own copy caches "+
	"(one per member) or apply it again as a server-side no-op, each over its own connection. "+
	"A member's clock starts as the hub object's Update is sent, once the fleet has made no reconcile for a second, "+
	"and stops at its first successful reconcile after it (its fleet_reconciles_total, read every %s): a reconcile "+
	"that starts after the hub event reads the new object, and ends with the member's copy holding it, written or "+
	"found; every server's copy is checked to hold it afterwards. "+
	"Drift: one more member of that fleet, alone on an API server of its own, has its copy edited by another field "+
	"manager (a plain Update); the clock starts as the edit is sent and stops when a watch on that server sees the "+
	"value back. "+
	"Restart: the members, all on that server, which logs every write (audit policy at Metadata level), share one "+
	"set of copies; the manager is stopped and a new one started, which must reconcile every member successfully "+
	"and then be quiet for 2 s; writes are the audit log's write requests with user agent fleet-manager/propagation "+
	"since the new start. The first start's writes show that the count sees them. "+
	"Copy-watch memory: fleet manager processes of their own, as in the Memory table, engage the same N members on the "+
	"shared servers, one without the Propagation controller, then one with it, at each GOGC of the Memory tables; each "+
	"reads its RSS, then its live heap after two collections, once every member is engaged (with the controller: its "+
	"copy cache watches and has synced) and %s idle. Per member is (with − without) ÷ N. With it, every member watches "+
	"ConfigMap copies of its fleet, because a Propagation copies ConfigMaps, and holds none, because that Propagation "+
	"selects no member. "+
	"Published figure for reference, not measured here: KubeFleet processes a placement on 100 of 1,000 clusters within "+
	"30 s (KubeFleet documentation and source, read 2026-11).", pollInterval, childIdle)

// benchPropagation runs the Propagation scenario: fan-out of a hub
// change, drift correction, a restart of an unchanged fleet, and the
// memory of the copy watches.
func (b *bench) benchPropagation(ctx context.Context) error {
	t := b.res.table(propagationTable, propagationNote)
	audited, err := startAuditedServer()
	if err != nil {
		return fmt.Errorf("starting an audited member API server: %w", err)
	}
	defer func() {
		if err := audited.stop(); err != nil {
			b.progress("stopping the audited member API server: %v", err)
		}
	}()
	driftSamples := 50
	fanOut := []int{100, 1000}
	restartMembers, objects := 100, 50
	if b.quick {
		driftSamples, fanOut, restartMembers = 20, []int{100}, 20
	}
	for _, n := range fanOut {
		samples := 0
		if n == 100 {
			samples = driftSamples
		}
		if err := b.propagationFanOut(ctx, t, audited, n, samples); err != nil {
			return fmt.Errorf("fan-out to %d members: %w", n, err)
		}
	}
	if err := b.propagationRestart(ctx, t, audited, restartMembers, objects); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return b.propagationMemory(ctx, t, 100)
}

// auditedServer is a member API server of the scenario's own, which logs
// every write request.
type auditedServer struct {
	env        *envtest.Environment
	client     client.WithWatch
	kubeconfig []byte
	dir        string
}

func startAuditedServer() (*auditedServer, error) {
	dir, err := os.MkdirTemp("", "fleet-bench-audit-")
	if err != nil {
		return nil, err
	}
	envs, err := controlplane.StartAudited(1, dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	s := &auditedServer{env: envs[0], dir: dir}
	if s.kubeconfig, err = controlplane.AdminKubeconfig(s.env, "fleet-manager"); err == nil {
		s.client, err = client.NewWithWatch(s.env.Config, client.Options{})
	}
	if err != nil {
		return nil, errors.Join(err, s.stop())
	}
	return s, nil
}

func (s *auditedServer) stop() error {
	return errors.Join(controlplane.Stop([]*envtest.Environment{s.env}), os.RemoveAll(s.dir))
}

// writes counts the write requests the Propagation controller made to
// the server since then.
func (s *auditedServer) writes(since time.Time) (int, error) {
	writes, err := controlplane.Writes(controlplane.AuditLog(s.dir, 0), "fleet-manager/"+propagation.ControllerName, since)
	return len(writes), err
}

// propFleet is a fleet manager, with or without the Propagation
// controller.
type propFleet struct {
	mgr             *fleet.Manager
	withPropagation bool
	journal         *journal.Journal
	cancel          context.CancelFunc
	done            chan error
}

// stateDir is the journal's directory of the fleet of namespace ns, which
// a restarted fleet finds again; clean-up removes it.
func stateDir(ns string) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("fleet-bench-state-%d-%s", os.Getpid(), ns))
}

func startPropFleet(hub *rest.Config, ns string, withPropagation bool) (*propFleet, error) {
	return startPropFleetIn(hub, ns, withPropagation, stateDir(ns))
}

// startPropFleetIn starts a fleet manager whose journal, if it runs the
// Propagation controller, is in dir.
func startPropFleetIn(hub *rest.Config, ns string, withPropagation bool, dir string) (*propFleet, error) {
	mgr, err := fleet.New(hub, managerOptions(ns))
	if err != nil {
		return nil, err
	}
	var j *journal.Journal
	if withPropagation {
		if j, err = journal.Open(dir, journal.Options{}); err != nil {
			return nil, err
		}
		if err := propagation.Add(mgr, propagation.Options{Journal: j}); err != nil {
			return nil, errors.Join(err, j.Close())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &propFleet{mgr: mgr, withPropagation: withPropagation, journal: j, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- mgr.Start(ctx) }()
	select {
	case <-mgr.Elected():
	case err := <-f.done:
		cancel()
		return nil, fmt.Errorf("fleet manager stopped: %w", errors.Join(err, f.closeJournal()))
	}
	return f, nil
}

func (f *propFleet) stop() error {
	f.cancel()
	return errors.Join(<-f.done, f.closeJournal())
}

func (f *propFleet) closeJournal() error {
	if f.journal == nil {
		return nil
	}
	return f.journal.Close()
}

// engaged counts the engaged members; with the Propagation controller,
// those it engaged: their copy caches watch every copied kind and have
// synced.
func (f *propFleet) engaged() int {
	names := f.mgr.ClusterNames()
	if !f.withPropagation {
		return len(names)
	}
	n := 0
	for _, name := range names {
		if slices.ContainsFunc(f.mgr.Engagements(name), func(e engage.Engagement) bool {
			return e.Aware == propagation.ControllerName && e.Engaged
		}) {
			n++
		}
	}
	return n
}

// propSetup is a fleet and one hub namespace holding ConfigMaps and a
// Propagation, named web, that copies them all to every member.
type propSetup struct {
	fleetNS string
	team    string
	names   []string
}

func (b *bench) setUpPropagation(ctx context.Context, n, objects int) (*propSetup, error) {
	fleetNS, err := b.lab.newNamespace(ctx)
	if err != nil {
		return nil, err
	}
	s := &propSetup{fleetNS: fleetNS, team: fleetNS + "-team"}
	for i := range n {
		s.names = append(s.names, fmt.Sprintf("%s-m%04d", fleetNS, i))
	}
	if err := b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.team}}); err != nil {
		return nil, err
	}
	if err := parallel(ctx, objects, func(j int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: objectName(j), Labels: map[string]string{"app": "web"}}, Data: map[string]string{"v": "0"}}
		return b.lab.hubClient.Create(ctx, cm)
	}); err != nil {
		return nil, err
	}
	return s, b.lab.hubClient.Create(ctx, &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.team, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})}},
		},
	})
}

func objectName(j int) string {
	if j == 0 {
		return "web"
	}
	return fmt.Sprintf("web-%02d", j)
}

// cleanUpPropagations deletes, once the fleet's manager has stopped, the
// Propagations of team (their finalizer released: no manager is left to
// release it), the hub objects, the copies in every member server, then
// the fleet.
func (b *bench) cleanUpPropagations(ctx context.Context, fleetNS, team string, servers ...client.Client) {
	props := &fleetv1alpha1.PropagationList{}
	err := b.lab.hubClient.List(ctx, props, client.InNamespace(team))
	for i := range props.Items {
		p := &props.Items[i]
		patch := client.MergeFrom(p.DeepCopy())
		p.Finalizers = nil
		err = errors.Join(err, client.IgnoreNotFound(b.lab.hubClient.Patch(ctx, p, patch)))
	}
	err = errors.Join(err,
		b.lab.hubClient.DeleteAllOf(ctx, &fleetv1alpha1.Propagation{}, client.InNamespace(team)),
		b.lab.hubClient.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(team)))
	for _, c := range append(slices.Clone(b.lab.clients), servers...) {
		err = errors.Join(err, c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(team)))
	}
	if err != nil {
		b.progress("cleaning up Propagations of %s: %v", team, err)
	}
	b.cleanUp(ctx, fleetNS)
}

// awaitPropagationReady waits until Propagation web of team is Ready and
// applied in n members.
func (b *bench) awaitPropagationReady(ctx context.Context, team string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var p fleetv1alpha1.Propagation
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: team, Name: "web"}, &p); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady) && int(p.Status.Applied) == n, nil
	})
	if err != nil {
		return fmt.Errorf("Propagation %s/web not Ready in %d members (%d applied, %d failed): %w", team, n, p.Status.Applied, p.Status.Failed, err)
	}
	return nil
}

// reconcileCounter reads fleet_reconciles_total, the vector every fleet
// manager of this process counts reconciles in, one series at a time:
// with 100 members, gathering the whole registry took 5–8 ms and reading
// these series 0.1–0.2 ms, which the fan-out can afford every few
// milliseconds.
type reconcileCounter struct{ vec *prometheus.CounterVec }

// newReconcileCounter returns the registered vector: registering one
// just like it hands it back. Call it once a fleet manager exists.
func newReconcileCounter() (*reconcileCounter, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_reconciles_total",
		Help: "Reconciles per controller and cluster, by result (success or error).",
	}, []string{"controller", "cluster", "result"})
	err := crmetrics.Registry.Register(vec)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return &reconcileCounter{vec: existing}, nil
		}
	}
	if err == nil {
		crmetrics.Registry.Unregister(vec)
		err = errors.New("no fleet manager registered it")
	}
	return nil, fmt.Errorf("finding fleet_reconciles_total: %w", err)
}

// count returns the Propagation controller's reconciles of cluster with
// result ("success" or "error").
func (c *reconcileCounter) count(cluster, result string) float64 {
	counter, err := c.vec.GetMetricWith(prometheus.Labels{"controller": propagation.ControllerName, "cluster": cluster, "result": result})
	if err != nil {
		return 0
	}
	var m dto.Metric
	if err := counter.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// successes returns each member's successful reconciles.
func (c *reconcileCounter) successes(names []string) map[string]float64 {
	counts := make(map[string]float64, len(names))
	for _, name := range names {
		counts[name] = c.count(name, "success")
	}
	return counts
}

// all returns every reconcile of the members and of the hub, whatever
// its result.
func (c *reconcileCounter) all(names []string) map[string]float64 {
	counts := make(map[string]float64, len(names)+1)
	for _, name := range append([]string{""}, names...) {
		counts[name] = c.count(name, "success") + c.count(name, "error")
	}
	return counts
}

// awaitQuiet waits until the Propagation controller made no reconcile in
// the members and the hub for quiet.
func (c *reconcileCounter) awaitQuiet(ctx context.Context, names []string, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := c.all(names)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(quiet):
		}
		now := c.all(names)
		if maps.Equal(now, last) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fleet still reconciled after %s", timeout)
		}
		last = now
	}
}

// propagationFanOut measures how long an update of a hub object takes to
// reach each of n members, then, with samples > 0, how long a member
// takes to correct an edit of its copy.
func (b *bench) propagationFanOut(ctx context.Context, t *table, audited *auditedServer, n, samples int) error {
	s, err := b.setUpPropagation(ctx, n, 1)
	if err != nil {
		return err
	}
	defer b.cleanUpPropagations(ctx, s.fleetNS, s.team, audited.client)
	defer os.RemoveAll(stateDir(s.fleetNS))
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
	if err := b.awaitPropagationReady(ctx, s.team, n, 5*time.Minute); err != nil {
		return err
	}
	var p99Target, allTarget *target
	switch n {
	case 100:
		p99Target = atMost(1000, "")
	case 1000:
		allTarget = atMost(15000, "")
	}
	p50, p99, every := fmt.Sprintf("N=%d, hub change in a member, p50", n), fmt.Sprintf("N=%d, hub change in a member, p99", n), fmt.Sprintf("N=%d, hub change in every member", n)
	latencies, err := b.fanOut(ctx, counter, s)
	if m, failed := errors.AsType[*measurementError](err); failed {
		t.fail(p50, "ms", m.why, nil)
		t.fail(p99, "ms", m.why, p99Target)
		t.fail(every, "ms", m.why, allTarget)
	} else if err != nil {
		return err
	} else {
		t.addDuration(p50, percentile(latencies, 50), nil)
		t.addDuration(p99, percentile(latencies, 99), p99Target)
		t.addDuration(every, slices.Max(latencies), allTarget)
	}
	if samples == 0 {
		return nil
	}
	return b.propagationDrift(ctx, t, audited, s, samples)
}

// measurementError is why a figure could not be measured under its
// scenario's conditions.
type measurementError struct{ why string }

func (e *measurementError) Error() string { return e.why }

// fanOut updates the hub object web of s, once the fleet is quiet, and
// returns how long each member took to reconcile after it.
func (b *bench) fanOut(ctx context.Context, counter *reconcileCounter, s *propSetup) ([]time.Duration, error) {
	if err := counter.awaitQuiet(ctx, s.names, time.Second, time.Minute); err != nil {
		return nil, &measurementError{err.Error()}
	}
	before := counter.successes(s.names)
	cm := &corev1.ConfigMap{}
	if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: s.team, Name: "web"}, cm); err != nil {
		return nil, err
	}
	cm.Data["v"] = "1"
	sent := time.Now()
	if err := b.lab.hubClient.Update(ctx, cm); err != nil {
		return nil, err
	}
	latencies := make([]time.Duration, 0, len(s.names))
	pending := slices.Clone(s.names)
	deadline := sent.Add(2 * time.Minute)
	for len(pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(pollInterval)
		now := time.Now()
		pending = slices.DeleteFunc(pending, func(name string) bool {
			if counter.count(name, "success") > before[name] {
				latencies = append(latencies, now.Sub(sent))
				return true
			}
			return false
		})
	}
	if len(pending) > 0 {
		return nil, &measurementError{fmt.Sprintf("%d of %d members reconciled the change within 2 minutes", len(s.names)-len(pending), len(s.names))}
	}
	if err := b.copiesHold(ctx, s.team, "1"); err != nil {
		return nil, &measurementError{err.Error()}
	}
	return latencies, nil
}

// copiesHold checks that the copy web in every lab member server holds
// data v == value.
func (b *bench) copiesHold(ctx context.Context, team, value string) error {
	for i, c := range b.lab.clients {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: team, Name: "web"}, cm); err != nil {
			return fmt.Errorf("reading the copy in member server %d: %w", i, err)
		}
		if cm.Data["v"] != value {
			return fmt.Errorf("the copy in member server %d holds v=%q, not %q", i, cm.Data["v"], value)
		}
	}
	return nil
}

// propagationDrift adds a member of its own on the audited server to the
// fleet of s, then edits its copy samples times, each once the edit
// before was corrected.
func (b *bench) propagationDrift(ctx context.Context, t *table, audited *auditedServer, s *propSetup, samples int) error {
	fail := func(why string) {
		t.fail("drift corrected, p50", "ms", why, nil)
		t.fail("drift corrected, p99", "ms", why, atMost(500, ""))
	}
	solo := s.fleetNS + "-solo"
	if err := b.lab.register(ctx, s.fleetNS, solo, audited.kubeconfig); err != nil {
		return err
	}
	if err := b.awaitPropagationReady(ctx, s.team, len(s.names)+1, 2*time.Minute); err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: s.team, Name: "web"}
	hubObject := &corev1.ConfigMap{}
	if err := b.lab.hubClient.Get(ctx, key, hubObject); err != nil {
		return err
	}
	want := hubObject.Data["v"]
	w, err := audited.client.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(s.team), client.MatchingFields{"metadata.name": "web"})
	if err != nil {
		return err
	}
	defer w.Stop()
	// next returns when the watch sees the copy next hold data v == value.
	next := func(value string, timeout time.Duration) (time.Time, error) {
		expired := time.After(timeout)
		for {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					return time.Time{}, errors.New("the watch of the copy ended")
				}
				if cm, isCM := e.Object.(*corev1.ConfigMap); isCM && e.Type == watch.Modified && cm.Data["v"] == value {
					return time.Now(), nil
				}
			case <-expired:
				return time.Time{}, fmt.Errorf("the copy did not hold v=%q within %s", value, timeout)
			}
		}
	}
	corrections := make([]time.Duration, 0, samples)
	for k := range samples {
		cm := &corev1.ConfigMap{}
		if err := audited.client.Get(ctx, key, cm); err != nil {
			return err
		}
		edit := fmt.Sprintf("edited-%d", k)
		cm.Data["v"] = edit
		sent := time.Now()
		if err := audited.client.Update(ctx, cm, client.FieldOwner("bench-editor")); err != nil {
			return err
		}
		if _, err := next(edit, 10*time.Second); err != nil {
			fail(err.Error())
			return nil
		}
		back, err := next(want, 30*time.Second)
		if err != nil {
			fail("an edit was not corrected: " + err.Error())
			return nil
		}
		corrections = append(corrections, back.Sub(sent))
	}
	t.addDuration("drift corrected, p50", percentile(corrections, 50), nil)
	t.addDuration("drift corrected, p99", percentile(corrections, 99), atMost(500, ""))
	return nil
}

// propagationRestart restarts the manager of an unchanged fleet of n
// members × objects copies, all on the audited server, and counts the
// writes the new manager makes to it.
func (b *bench) propagationRestart(ctx context.Context, t *table, audited *auditedServer, n, objects int) error {
	name := fmt.Sprintf("restart, %d members × %d objects unchanged: writes", n, objects)
	s, err := b.setUpPropagation(ctx, n, objects)
	if err != nil {
		return err
	}
	defer b.cleanUpPropagations(ctx, s.fleetNS, s.team, audited.client)
	defer os.RemoveAll(stateDir(s.fleetNS))
	firstStart := time.Now()
	f, err := startPropFleet(b.lab.hub.Config, s.fleetNS, true)
	if err != nil {
		return err
	}
	counter, err := newReconcileCounter()
	if err == nil {
		_, err = b.lab.registerAll(ctx, s.fleetNS, s.names, func(int) []byte { return audited.kubeconfig })
	}
	if err == nil {
		err = b.awaitPropagationReady(ctx, s.team, n, 5*time.Minute)
	}
	if err == nil {
		err = counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute)
	}
	if err := errors.Join(err, f.stop()); err != nil {
		return err
	}
	first, err := audited.writes(firstStart)
	if err != nil {
		return err
	}
	t.add(fmt.Sprintf("first start, %d members × %d objects: writes", n, objects), "writes", float64(first), nil)

	before := counter.successes(s.names)
	restarted := time.Now()
	if f, err = startPropFleet(b.lab.hub.Config, s.fleetNS, true); err != nil {
		return err
	}
	defer func() {
		if err := f.stop(); err != nil {
			b.progress("stopping fleet: %v", err)
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		for name, count := range counter.successes(s.names) {
			if count <= before[name] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		err = fmt.Errorf("not every member was reconciled by the new manager: %w", err)
		t.fail(name, "writes", err.Error(), atMost(0, ""))
		return nil
	}
	if err := counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		t.fail(name, "writes", err.Error(), atMost(0, ""))
		return nil
	}
	if err := b.awaitPropagationReady(ctx, s.team, n, time.Minute); err != nil {
		t.fail(name, "writes", err.Error(), atMost(0, ""))
		return nil
	}
	writes, err := audited.writes(restarted)
	if err != nil {
		return err
	}
	t.add(name, "writes", float64(writes), atMost(0, ""))
	return nil
}

// propagationMemory measures, at each GOGC of the memory scenario, the
// memory of a fleet manager process of n members with and without the
// Propagation controller, whose members watch ConfigMap copies and hold
// none.
func (b *bench) propagationMemory(ctx context.Context, t *table, n int) error {
	ns, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	team := ns + "-team"
	defer b.cleanUpPropagations(ctx, ns, team)
	if err := b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}); err != nil {
		return err
	}
	// Members watch ConfigMap copies, which this Propagation copies, and
	// hold none: it selects no member.
	if err := b.lab.hubClient.Create(ctx, &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "none"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "none"}},
			Members:   fleetv1alpha1.MemberSelector{Names: []string{"no-such-member"}},
		},
	}); err != nil {
		return err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%03d", ns, i)
	}
	if _, err := b.lab.registerAll(ctx, ns, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	for _, m := range b.memorySettings() {
		rss := fmt.Sprintf("copy watches, N=%d, RSS per member, %s", n, gogcLabel(m.gogc))
		heap := fmt.Sprintf("copy watches, N=%d, live heap per member, %s", n, gogcLabel(m.gogc))
		var reports [2]childReport
		for i, withPropagation := range []bool{false, true} {
			r, err := b.measurePropagationChild(ns, n, m.gogc, withPropagation)
			if err != nil {
				t.fail(rss, "MiB", err.Error(), atMost(0.3, ""))
				t.fail(heap, "MiB", err.Error(), nil)
				return nil
			}
			reports[i] = r
		}
		without, with := reports[0], reports[1]
		t.add(rss, "MiB", float64(with.RSSBytes-without.RSSBytes)/float64(n)/mib, atMost(0.3, ""))
		t.add(heap, "MiB", (float64(with.HeapBytes)-float64(without.HeapBytes))/float64(n)/mib, nil)
	}
	return nil
}

// measurePropagationChild runs a fleet manager process of the fleet of
// ns, with or without the Propagation controller, and returns its memory
// once its n members are engaged.
func (b *bench) measurePropagationChild(ns string, n int, gogc string, withPropagation bool) (childReport, error) {
	// The first argument names $BENCH_PROFILES's profiles.
	c, err := startChild(append(gogcEnv(gogc), propagationChildEnv+"=1"), fmt.Sprintf("-propagation=%t", withPropagation),
		"-hub="+b.lab.hubFile, "-namespace="+ns, fmt.Sprintf("-members=%d", n), "-idle="+childIdle.String())
	if err != nil {
		return childReport{}, err
	}
	settled, err := c.next(settleDeadline + time.Minute)
	if err != nil {
		return settled, err
	}
	if settled.Members < n {
		_, _ = c.stop(time.Minute)
		return settled, fmt.Errorf("%d of %d members engaged within %s", settled.Members, n, settleDeadline)
	}
	memory, err := c.next(time.Minute)
	if err != nil {
		return memory, err
	}
	if _, err := c.stop(time.Minute); err != nil {
		return memory, err
	}
	return memory, nil
}

// propagationChildEnv, set in a child's environment, makes it run
// runPropagationChild instead of runChild.
const propagationChildEnv = "BENCH_PROPAGATION_CHILD"

// runPropagationChild runs a fleet manager, with or without the
// Propagation controller, and reports how many members it engaged, once
// all were or the settle deadline passed, then its memory.
func runPropagationChild(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	hub := fs.String("hub", "", "hub kubeconfig file")
	namespace := fs.String("namespace", "", "hub namespace of the registration Secrets")
	members := fs.Int("members", 1, "members to wait for")
	withPropagation := fs.Bool("propagation", false, "run the Propagation controller")
	idle := fs.Duration("idle", childIdle, "idle time after settling before memory is read")
	_ = fs.Parse(args)
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := propagationChild(ctx, *hub, *namespace, *members, *withPropagation, memoryReadings{idle: *idle}); err != nil {
		fmt.Fprintln(os.Stderr, "bench propagation child:", err)
		return 1
	}
	return 0
}

func propagationChild(ctx context.Context, hubKubeconfig, namespace string, members int, withPropagation bool, readings memoryReadings) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir(namespace))
	f, err := startPropFleet(hub, namespace, withPropagation)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(settleDeadline)
	err = awaitCtx(ctx, "members engaged", func() bool {
		return f.engaged() >= members || time.Now().After(deadline)
	})
	if err == nil {
		report(childReport{Event: "settled", Members: f.engaged()})
		err = readings.report(ctx)
	}
	<-ctx.Done()
	return errors.Join(err, f.stop())
}

// parallel runs do for 0..n-1 on 8 workers and returns the first error.
func parallel(ctx context.Context, n int, do func(i int) error) error {
	errs := make([]error, 8)
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for ctx.Err() == nil {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= n {
					return
				}
				if err := do(k); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
