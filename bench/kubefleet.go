package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const kubeFleetTable = "KubeFleet's 1,000 placements, mirrored"

// The workload of KubeFleet's hack/perftest/1000placements
// (github.com/kubefleet-dev/kubefleet, read at commit 382c2cfe2287, the
// last to touch it, 2026-04-01): placement i selects the members labelled
// placement-group=i%10 and carries namespace work-i, which holds ConfigMap
// data-i (key foo: 1,024 random bytes, base64) and Deployment app-i (1
// replica of registry.k8s.io/pause:3.9, selector app=pause, a 60 s grace
// period); its strategy rolls out to all at once (maxUnavailable 100%).
const (
	kubeFleetGroupLabel = "placement-group"
	kubeFleetGroups     = 10
	kubeFleetDataBytes  = 1024
	// kubeFleetServers: a member API server per group, so that the
	// members of one server are selected by the same Propagations. Where
	// groups shared a server, each member removed the copies the others'
	// Propagations wrote as copies of a Propagation that no longer selects
	// it, and the others wrote them again, without end (seen in the first
	// quick runs, three servers, 2026-12: every Deployment copy deleted and
	// created again each second, never Available).
	kubeFleetServers = kubeFleetGroups
	// kubeFleetLabel, on the registration Secrets and the Propagations,
	// holds the fleet's namespace: a Propagation selects only the
	// members of its own run.
	kubeFleetLabel = "bench.fleetkube.io/kubefleet"
)

// Placements and members, full and quick.
var (
	fullKubeFleetPlacements  = 1000
	fullKubeFleetMembers     = 100
	quickKubeFleetPlacements = 100
	quickKubeFleetMembers    = 20
)

// kubeFleetPublished is KubeFleet's own figure, labelled with its source:
// the bench does not measure it.
const kubeFleetPublished = "KubeFleet's published figures, not measured here (KubeFleet's Q1 2026 performance report, as quoted in fleet-manager issue 41; " +
	"on KubeFleet's own fleet, not this machine): a restart's re-processing of 1,000 placements p50 10 min 25 s, the hub's API server using up to 13 cores and 47 GB; " +
	"a placement over 100 of 1,000 clusters p90 20 s (time to Available, from the placement's creation)"

func kubeFleetNote(placements, members int, quick bool) string {
	note := fmt.Sprintf("KubeFleet's hack/perftest/1000placements (kubefleet-dev/kubefleet at commit 382c2cfe2287, 2026-04-01), mirrored: Propagation i of %d, in namespace <fleet>-work-i "+
		"(the fleet's prefix, so that runs on the shared hub do not meet; KubeFleet's is work-i), copies, by name, its ConfigMap data-i (foo: %d random bytes, base64) and its Deployment app-i "+
		"(1 replica of registry.k8s.io/pause:3.9) to the members labelled %s=i%%%d, strategy All (KubeFleet's: maxUnavailable 100%%). "+
		"%d members, names over %d member API servers of the scenario's own that log every write, one per group (members that share a server must be selected by the same Propagations, or each removes the others' copies as no longer its own), %d to a group, so each Propagation selects %d. "+
		"The manager is a process of its own (the Propagation controller, default options), so that its CPU, memory and requests are its own; its figures are read from it. "+
		"envtest runs no controllers: the bench plays each member server's Deployment controller, reading its Deployments every second and writing each new one's status with its replica available. "+
		"KubeFleet counts a placement done once Available; here the clock stops at Ready (the status describes the generation, counts every member selected and applied, and Ready is True, which needs every copy Available). "+
		"Rollout: the hub objects exist and every member is engaged before the clock starts; the Propagations are then created from 8 writers at once "+
		"(KubeFleet's script: 15 writers, each pausing 1 s after each), and the hub is listed every %s: a Propagation's time runs from its creation to the first list that shows it Ready. "+
		"Restart: once the manager made no reconcile for 2 s, it is stopped (SIGTERM) and a new process started with the same journal; the clock runs from its start until, by its own counts, "+
		"every member was reconciled successfully at least as many times as Propagations select it and the hub side at least once per Propagation, and every Propagation reads Ready; "+
		"once it made no reconcile for 2 s: its writes to the members (the audit logs, user agent fleet-manager/%s, target 0), its requests to the hub (client-go's count), "+
		"its CPU seconds and its peak RSS (VmHWM) since its start, at the manager's default GOGC, then again with GOGC=100. %s.",
		placements, kubeFleetDataBytes, kubeFleetGroupLabel, kubeFleetGroups, members, kubeFleetServers, members/kubeFleetGroups, members/kubeFleetGroups, kubeFleetPoll,
		propagation.ControllerName, kubeFleetPublished)
	if quick {
		note += fmt.Sprintf(" Quick mode runs %d Propagations over %d members, not %d over %d.", quickKubeFleetPlacements, quickKubeFleetMembers, fullKubeFleetPlacements, fullKubeFleetMembers)
	}
	return note
}

// kubeFleetPoll is how often the scenario lists the Propagations.
const kubeFleetPoll = 500 * time.Millisecond

// kubeFleetSetup is one run of the scenario.
type kubeFleetSetup struct {
	fleetNS    string
	names      []string
	placements int
	servers    *auditedServers
}

func (s *kubeFleetSetup) namespace(i int) string { return fmt.Sprintf("%s-work-%d", s.fleetNS, i) }

// selectedBy returns how many members Propagation i selects.
func (s *kubeFleetSetup) selectedBy(i int) int {
	n := 0
	for m := range s.names {
		if m%kubeFleetGroups == i%kubeFleetGroups {
			n++
		}
	}
	return n
}

// placementsOf returns how many Propagations select member m.
func (s *kubeFleetSetup) placementsOf(m int) int {
	n := 0
	for i := range s.placements {
		if i%kubeFleetGroups == m%kubeFleetGroups {
			n++
		}
	}
	return n
}

// benchKubeFleet runs KubeFleet's 1,000-placement workload: the time until
// every Propagation is Ready, then a restart of the manager.
func (b *bench) benchKubeFleet(ctx context.Context) error {
	placements, members := fullKubeFleetPlacements, fullKubeFleetMembers
	if b.quick {
		placements, members = quickKubeFleetPlacements, quickKubeFleetMembers
	}
	t := b.res.table(kubeFleetTable, kubeFleetNote(placements, members, b.quick))
	servers, err := startAuditedServersBy(kubeFleetServers, 2)
	if err != nil {
		return fmt.Errorf("starting audited member API servers: %w", err)
	}
	defer func() {
		if err := servers.stop(); err != nil {
			b.progress("stopping the audited member API servers: %v", err)
		}
	}()
	fleetNS, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	s := &kubeFleetSetup{fleetNS: fleetNS, placements: placements, servers: servers}
	for i := range members {
		s.names = append(s.names, fmt.Sprintf("%s-m%04d", fleetNS, i))
	}
	defer os.RemoveAll(stateDir(fleetNS))
	defer b.cleanUpKubeFleet(context.WithoutCancel(ctx), s)

	b.progress("  %d namespaces, each with a ConfigMap and a Deployment", placements)
	if err := b.createKubeFleetObjects(ctx, s); err != nil {
		return err
	}
	if err := parallel(ctx, members, func(m int) error {
		return b.lab.hubClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: s.names[m], Labels: map[string]string{
				registry.KubeconfigLabel: "true", kubeFleetLabel: fleetNS, kubeFleetGroupLabel: strconv.Itoa(m % kubeFleetGroups),
			}},
			Data: map[string][]byte{registry.KubeconfigKey: servers.kubeconfigs[m%len(servers.kubeconfigs)]},
		})
	}); err != nil {
		return err
	}
	// The members' Deployment controller: envtest runs none.
	available, stopAvailable := context.WithCancel(ctx)
	defer stopAvailable()
	for _, c := range servers.clients {
		go makeDeploymentsAvailable(available, c)
	}
	first, err := b.startMeteredFleet(fleetNS, "")
	if err != nil {
		return err
	}
	defer first.c.kill()
	if err := first.awaitEngaged(ctx, members, 5*time.Minute); err != nil {
		return err
	}

	timeout := 15 * time.Minute
	if b.quick {
		timeout = 5 * time.Minute
	}
	ready := fmt.Sprintf("%d Propagations × %d members: creation to every one Ready", placements, members/kubeFleetGroups)
	p50, p90 := fmt.Sprintf("%d Propagations: creation to Ready, p50", placements), fmt.Sprintf("%d Propagations: creation to Ready, p90", placements)
	b.progress("  creating %d Propagations", placements)
	times, err := b.kubeFleetRollout(ctx, s, timeout)
	if m, failed := errors.AsType[*measurementError](err); failed {
		for _, name := range []string{ready, p50, p90} {
			t.fail(name, "s", m.why, nil)
		}
		b.failKubeFleetRestart(t, s, "the rollout before it failed")
		return nil
	} else if err != nil {
		return err
	}
	t.add(ready, "s", slices.Max(times).Seconds(), nil)
	t.add(p50, "s", percentile(times, 50).Seconds(), nil)
	t.add(p90, "s", percentile(times, 90).Seconds(), nil)
	if _, err := first.awaitQuiet(ctx, 2*time.Second, 5*time.Minute); err != nil {
		if _, failed := errors.AsType[*measurementError](err); !failed {
			return err
		}
		b.failKubeFleetRestart(t, s, "before it, "+err.Error())
		return nil
	}
	if err := first.stop(); err != nil {
		return fmt.Errorf("stopping the first manager: %w", err)
	}
	for _, gogc := range []string{"", "100"} {
		b.progress("  restart, %s", gogcLabel(gogc))
		if err := b.kubeFleetRestart(ctx, t, s, gogc, timeout); err != nil {
			return err
		}
	}
	return nil
}

// kubeFleetRestartFigures names the restart's figures at gogc.
func kubeFleetRestartFigures(s *kubeFleetSetup, gogc string) (confirmed, writes, hub, cpu, peak string) {
	at := fmt.Sprintf("restart of %d Propagations, %s", s.placements, gogcLabel(gogc))
	return at + ": start to every status confirmed", at + ": writes to members", at + ": hub requests until quiet",
		at + ": CPU until quiet", at + ": peak RSS"
}

func (b *bench) failKubeFleetRestart(t *table, s *kubeFleetSetup, why string) {
	for _, gogc := range []string{"", "100"} {
		confirmed, writes, hub, cpu, peak := kubeFleetRestartFigures(s, gogc)
		t.fail(confirmed, "s", why, nil)
		t.fail(writes, "writes", why, atMost(0, ""))
		t.fail(hub, "requests", why, nil)
		t.fail(cpu, "s", why, nil)
		t.fail(peak, "MiB", why, nil)
	}
}

// createKubeFleetObjects creates, for each Propagation, its namespace, its
// ConfigMap and its Deployment on the hub, as KubeFleet's script does.
func (b *bench) createKubeFleetObjects(ctx context.Context, s *kubeFleetSetup) error {
	return parallel(ctx, s.placements, func(i int) error {
		ns := s.namespace(i)
		data := make([]byte, kubeFleetDataBytes)
		_, _ = rand.Read(data)
		return errors.Join(
			b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}),
			b.lab.hubClient.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-%d", i)},
				Data:       map[string]string{"foo": base64.StdEncoding.EncodeToString(data)},
			}),
			b.lab.hubClient.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", i)},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To(int32(1)),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pause"}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pause"}},
						Spec: corev1.PodSpec{
							Containers:                    []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.9"}},
							TerminationGracePeriodSeconds: ptr.To(int64(60)),
						},
					},
				},
			}))
	})
}

// kubeFleetRollout creates every Propagation and returns, for each, the
// time from its creation until a list showed it Ready.
func (b *bench) kubeFleetRollout(ctx context.Context, s *kubeFleetSetup, timeout time.Duration) ([]time.Duration, error) {
	created := make([]time.Time, s.placements)
	if err := parallel(ctx, s.placements, func(i int) error {
		group := strconv.Itoa(i % kubeFleetGroups)
		p := &fleetv1alpha1.Propagation{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace(i), Name: fmt.Sprintf("crp-%d", i), Labels: map[string]string{kubeFleetLabel: s.fleetNS}},
			Spec: fleetv1alpha1.PropagationSpec{
				Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("data-%d", i)}, {APIVersion: "apps/v1", Kind: "Deployment", Name: fmt.Sprintf("app-%d", i)}},
				Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{kubeFleetLabel: s.fleetNS, kubeFleetGroupLabel: group})},
				Strategy:  fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutAll},
			},
		}
		created[i] = time.Now()
		return b.lab.hubClient.Create(ctx, p)
	}); err != nil {
		return nil, err
	}
	times := make([]time.Duration, s.placements)
	readyAt := map[int]time.Time{}
	err := b.awaitKubeFleetReady(ctx, s, created[0].Add(timeout), func(i int, now time.Time) {
		if _, seen := readyAt[i]; !seen {
			readyAt[i] = now
			times[i] = now.Sub(created[i])
		}
	})
	return times, err
}

// awaitKubeFleetReady lists the Propagations of s every kubeFleetPoll
// until all are Ready, telling ready each one that is at each list.
func (b *bench) awaitKubeFleetReady(ctx context.Context, s *kubeFleetSetup, deadline time.Time, ready func(i int, now time.Time)) error {
	for {
		var list fleetv1alpha1.PropagationList
		if err := b.lab.hubClient.List(ctx, &list, client.MatchingLabels{kubeFleetLabel: s.fleetNS}); err != nil {
			return err
		}
		now := time.Now()
		n, notReady := 0, ""
		for k := range list.Items {
			p := &list.Items[k]
			i, err := strconv.Atoi(p.Name[len("crp-"):])
			if err != nil {
				return fmt.Errorf("Propagation %s/%s: %w", p.Namespace, p.Name, err)
			}
			want := int32(s.selectedBy(i))
			if p.Status.ObservedGeneration == p.Generation && p.Status.Selected == want && p.Status.Applied == want &&
				meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady) {
				n++
				if ready != nil {
					ready(i, now)
				}
			} else if notReady == "" {
				notReady = fmt.Sprintf("%s/%s: %s", p.Namespace, p.Name, describeStatus(&p.Status))
			}
		}
		if n == s.placements {
			return nil
		}
		if now.After(deadline) {
			return &measurementError{fmt.Sprintf("%d of %d Propagations Ready in time; one not: %s", n, s.placements, notReady)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(kubeFleetPoll):
		}
	}
}

// kubeFleetRestart starts a new manager, with gogc, on the unchanged fleet
// of s and measures what it takes to confirm every status again.
func (b *bench) kubeFleetRestart(ctx context.Context, t *table, s *kubeFleetSetup, gogc string, timeout time.Duration) error {
	confirmed, writes, hub, cpu, peak := kubeFleetRestartFigures(s, gogc)
	fail := func(why string) {
		t.fail(confirmed, "s", why, nil)
		t.fail(writes, "writes", why, atMost(0, ""))
		t.fail(hub, "requests", why, nil)
		t.fail(cpu, "s", why, nil)
		t.fail(peak, "MiB", why, nil)
	}
	f, err := b.startMeteredFleet(s.fleetNS, gogc)
	if err != nil {
		return err
	}
	defer f.c.kill()
	restarted := f.started
	want := map[string]float64{"": float64(s.placements)}
	for m, name := range s.names {
		want[name] = float64(s.placementsOf(m))
	}
	if _, err := f.await(ctx, timeout, func(r meterReading) bool {
		for name, n := range want {
			if r.Successes[name] < n {
				return false
			}
		}
		return true
	}, func(r meterReading) string {
		short := 0
		for name, n := range want {
			if r.Successes[name] < n {
				short++
			}
		}
		return fmt.Sprintf("%d of %d members (and the hub) not reconciled once per Propagation within %s", short, len(want), timeout)
	}); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	if err := b.awaitKubeFleetReady(ctx, s, restarted.Add(timeout), nil); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	took := time.Since(restarted)
	quiet, err := f.awaitQuiet(ctx, 2*time.Second, 5*time.Minute)
	if err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	written, err := s.servers.writes(restarted)
	if err != nil {
		return err
	}
	for k, w := range written {
		if k == 5 {
			break
		}
		b.progress("  write after the restart: %s", w)
	}
	t.add(confirmed, "s", took.Seconds(), nil)
	t.add(writes, "writes", float64(len(written)), atMost(0, ""))
	t.add(hub, "requests", quiet.HubRequests, nil)
	t.add(cpu, "s", quiet.CPUSeconds, nil)
	t.add(peak, "MiB", float64(quiet.PeakRSSBytes)/mib, nil)
	return f.stop()
}

// cleanUpKubeFleet deletes the Propagations of s (their finalizers
// released: no manager is left), their revisions, the hub objects and
// namespaces, and the fleet. The member servers, the scenario's own, go
// with their copies.
func (b *bench) cleanUpKubeFleet(ctx context.Context, s *kubeFleetSetup) {
	err := parallel(ctx, s.placements, func(i int) error {
		ns := s.namespace(i)
		p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("crp-%d", i)}}
		return errors.Join(
			client.IgnoreNotFound(b.lab.hubClient.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))),
			client.IgnoreNotFound(b.lab.hubClient.Delete(ctx, p)),
			b.lab.hubClient.DeleteAllOf(ctx, &fleetv1alpha1.PropagationRevision{}, client.InNamespace(ns)),
			b.lab.hubClient.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns)),
			b.lab.hubClient.DeleteAllOf(ctx, &appsv1.Deployment{}, client.InNamespace(ns)),
			controlplane.RemoveNamespace(ctx, b.lab.hub.Config, ns))
	})
	if err != nil {
		b.progress("cleaning up the Propagations of %s: %v", s.fleetNS, err)
	}
	b.cleanUp(ctx, s.fleetNS)
}

// makeDeploymentsAvailable does, until ctx ends, what a member's
// Deployment controller and kubelet would for the pause Deployments: it
// reads every Deployment of the server each second and writes the status
// of each whose status does not describe its generation with all its
// replicas available.
func makeDeploymentsAvailable(ctx context.Context, c client.Client) {
	for ctx.Err() == nil {
		var list appsv1.DeploymentList
		if err := c.List(ctx, &list); err == nil {
			for k := range list.Items {
				d := &list.Items[k]
				replicas := ptr.Deref(d.Spec.Replicas, 1)
				if d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == replicas {
					continue
				}
				d.Status = appsv1.DeploymentStatus{
					ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
					Conditions: []appsv1.DeploymentCondition{
						{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
						{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
					},
				}
				_ = c.Status().Update(ctx, d)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
