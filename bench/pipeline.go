package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
)

const pipelineTable = "Propagation pipeline: cost per change, watches, status lag"

// The shapes of the pipeline figures (issue 41).
const (
	// costObjects ConfigMaps of costBytes, in one Propagation: the
	// content whose cost per member run issue 41 measured.
	costObjects = 30
	costBytes   = 10 << 10
	// watchNamespaces team namespaces, each with a Propagation of
	// watchKindsEach of the len(watchKinds) kinds.
	watchNamespaces = 50
	watchKindsEach  = 3
	// lagMembers is the fleet of the status lag.
	lagMembers = 100
	// lagPoll is how often the status lag's clock reads the Propagation.
	lagPoll = 20 * time.Millisecond
	// idleWindow is how long the idle CPU and allocations subtracted from
	// a change's are measured.
	idleWindow = 5 * time.Second
)

func pipelineNote(costMembers []int) string {
	return fmt.Sprintf("Cost per change: a manager process of its own (the Propagation controller, default options, its figures read from it) with one Propagation of %d ConfigMaps of %d KiB to every one of N members "+
		"(names over the lab's member servers); once all are applied and the manager made no reconcile for 2 s, its CPU and heap allocations over %s are its idle rate; then one ConfigMap's data is replaced "+
		"and, once every member reconciled after it and the manager made no reconcile for 2 s, the CPU time and the allocations since the update, less the idle rate over that time, are the change's (N = %s). "+
		"Content builds per change are read from %s if the manager exposes it (target 1: content built once per change), else not reported. "+
		"Watches: one member alone on an API server of its own; %d hub namespaces, each with one object of each of %d of %d kinds (namespace k: kinds 3k to 3k+2, modulo %d) and a Propagation of those kinds to that member. "+
		"Its watches are read from that server (the sum of apiserver_longrunning_requests with verb WATCH, once unchanged for 2 s): the member engaged with no Propagation, then after the %d Propagations are created and each has a result "+
		"(watches started while engaged), then with a new manager started with them there (watches started at engagement); per member is each less the first (target %d: the kinds each namespace needs). "+
		"Status lag: %d members over 3 member servers of its own that log every write; one Propagation of 10 ConfigMaps (strategy All) created once all are engaged; the clock starts at the last write the manager "+
		"made to a member for it (the audit logs' time, user agent fleet-manager/%s, counted once the manager made no reconcile for 2 s) and stops at the first read (every %s) of the Propagation whose status "+
		"describes its generation, reads Ready and counts every member selected and applied; negative if a write came after that read, and such writes are counted. "+
		"Last member run to Ready: the same read, less the time of the first read (every %s) at which a member's successful reconciles (fleet_reconciles_total) had last grown: "+
		"how long the status took after the last member result, not the target's clock.",
		costObjects, costBytes>>10, idleWindow, joinInts(costMembers), contentBuildsMetric,
		watchNamespaces, watchKindsEach, len(watchKinds), len(watchKinds), watchNamespaces, watchNamespaces*watchKindsEach,
		lagMembers, propagation.ControllerName, lagPoll, lagPoll)
}

// benchPipeline measures issue 41's figures of the Propagation
// controller's pipeline: CPU and allocations per change, watches per
// member, and the lag of the hub status behind the last member write.
func (b *bench) benchPipeline(ctx context.Context) error {
	costMembers := []int{100, 1000}
	if b.quick {
		costMembers = []int{100}
	}
	t := b.res.table(pipelineTable, pipelineNote(costMembers))
	for _, n := range costMembers {
		b.progress("  cost per change, %d members", n)
		if err := b.pipelineCost(ctx, t, n); err != nil {
			return fmt.Errorf("cost per change, %d members: %w", n, err)
		}
	}
	b.progress("  watches per member")
	if err := b.pipelineWatches(ctx, t); err != nil {
		return fmt.Errorf("watches: %w", err)
	}
	b.progress("  status lag, %d members", lagMembers)
	if err := b.pipelineLag(ctx, t); err != nil {
		return fmt.Errorf("status lag: %w", err)
	}
	return nil
}

// pipelineCost measures the CPU and allocations of one change of a
// Propagation of n members, in a manager process of its own.
func (b *bench) pipelineCost(ctx context.Context, t *table, n int) error {
	cpu, allocated, allocs := fmt.Sprintf("N=%d, CPU per change, net of idle", n), fmt.Sprintf("N=%d, allocated per change, net of idle", n), fmt.Sprintf("N=%d, allocations per change, net of idle", n)
	builds, took := fmt.Sprintf("N=%d, content builds per change", n), fmt.Sprintf("N=%d, change to every member reconciled", n)
	var cpuTarget *target
	if n >= 1000 {
		cpuTarget = atMost(1, "")
	}
	fail := func(why string) {
		t.fail(cpu, "s", why, cpuTarget)
		t.fail(allocated, "MiB", why, nil)
		t.fail(allocs, "allocations", why, nil)
		t.fail(took, "ms", why, nil)
	}
	fleetNS, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	team := fleetNS + "-team"
	defer b.cleanUpPropagations(context.WithoutCancel(ctx), fleetNS, team)
	defer os.RemoveAll(stateDir(fleetNS))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m%04d", fleetNS, i)
	}
	if err := b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}); err != nil {
		return err
	}
	if err := parallel(ctx, costObjects, func(j int) error {
		cm := configMap(team, objectName(j), costBytes)
		cm.Labels = map[string]string{"app": "web"}
		return b.lab.hubClient.Create(ctx, cm)
	}); err != nil {
		return err
	}
	if _, err := b.lab.registerAll(ctx, fleetNS, names, b.lab.serverKubeconfig); err != nil {
		return err
	}
	f, err := b.startMeteredFleet(fleetNS, "")
	if err != nil {
		return err
	}
	defer f.c.kill()
	timeout := 5 * time.Minute
	if n > 200 {
		timeout = 10 * time.Minute
	}
	if err := f.awaitEngaged(ctx, n, timeout); err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	if err := b.lab.hubClient.Create(ctx, &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "web"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"app": "web"})}},
		},
	}); err != nil {
		return err
	}
	if err := b.awaitPropagationReady(ctx, team, n, timeout); err != nil {
		fail(err.Error())
		return f.stop()
	}
	idleFrom, err := f.awaitQuiet(ctx, 2*time.Second, 3*time.Minute)
	if err == nil {
		time.Sleep(idleWindow)
	}
	var idleTo meterReading
	if err == nil {
		idleTo, err = f.read(ctx)
	}
	if err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	idle := idleTo.At.Sub(idleFrom.At).Seconds()
	idleCPU, idleBytes, idleAllocs := (idleTo.CPUSeconds-idleFrom.CPUSeconds)/idle, float64(idleTo.AllocBytes-idleFrom.AllocBytes)/idle, float64(idleTo.Allocs-idleFrom.Allocs)/idle

	before, err := f.read(ctx)
	if err != nil {
		return err
	}
	changed := configMap(team, objectName(0), costBytes)
	changed.Labels = map[string]string{"app": "web"}
	sent := time.Now()
	if err := b.lab.hubClient.Update(ctx, changedVersion(ctx, b.lab.hubClient, changed)); err != nil {
		return err
	}
	reconciled, err := f.await(ctx, 2*time.Minute, func(r meterReading) bool {
		for _, name := range names {
			if r.Successes[name] <= before.Successes[name] {
				return false
			}
		}
		return true
	}, func(r meterReading) string {
		done := 0
		for _, name := range names {
			if r.Successes[name] > before.Successes[name] {
				done++
			}
		}
		return fmt.Sprintf("%d of %d members reconciled the change within 2 minutes", done, n)
	})
	var after meterReading
	if err == nil {
		after, err = f.awaitQuiet(ctx, 2*time.Second, 3*time.Minute)
	}
	if err != nil {
		if m, failed := errors.AsType[*measurementError](err); failed {
			fail(m.why)
			return f.stop()
		}
		return err
	}
	span := after.At.Sub(before.At).Seconds()
	t.add(cpu, "s", after.CPUSeconds-before.CPUSeconds-idleCPU*span, cpuTarget)
	t.add(allocated, "MiB", (float64(after.AllocBytes-before.AllocBytes)-idleBytes*span)/mib, nil)
	t.add(allocs, "allocations", float64(after.Allocs-before.Allocs)-idleAllocs*span, nil)
	t.addDuration(took, reconciled.At.Sub(sent), nil)
	if after.ContentBuilds != nil && before.ContentBuilds != nil {
		t.add(builds, "builds", *after.ContentBuilds-*before.ContentBuilds, atMost(1, ""))
	} else {
		b.progress("  the manager exposes no %s: content builds per change not reported", contentBuildsMetric)
	}
	return f.stop()
}

// changedVersion sets obj's resourceVersion to the hub's, so that an
// Update replaces it.
func changedVersion(ctx context.Context, c client.Client, obj *corev1.ConfigMap) *corev1.ConfigMap {
	current := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), current); err == nil {
		obj.ResourceVersion = current.ResourceVersion
	}
	return obj
}

// watchKind is one of the kinds the watches figure's namespaces copy.
type watchKind struct {
	apiVersion, kind string
	object           func(ns string) client.Object
}

var (
	watchLabels   = map[string]string{"app": "w"}
	watchSelector = &metav1.LabelSelector{MatchLabels: watchLabels}
	watchPod      = corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: watchLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.9"}}},
	}
	watchJobPod = corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: watchPod.Spec.Containers}}
)

// om names an object of the watches figure in ns.
func om(ns string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: "w"} }

// watchKinds are 20 namespaced kinds, each an object of which a bare API
// server (no controllers) takes.
var watchKinds = []watchKind{
	{"v1", "ConfigMap", func(ns string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: om(ns), Data: map[string]string{"k": "v"}}
	}},
	{"v1", "Secret", func(ns string) client.Object {
		return &corev1.Secret{ObjectMeta: om(ns), StringData: map[string]string{"k": "v"}}
	}},
	{"v1", "ServiceAccount", func(ns string) client.Object { return &corev1.ServiceAccount{ObjectMeta: om(ns)} }},
	{"v1", "Service", func(ns string) client.Object {
		return &corev1.Service{ObjectMeta: om(ns), Spec: corev1.ServiceSpec{Selector: watchLabels, Ports: []corev1.ServicePort{{Port: 80}}}}
	}},
	{"rbac.authorization.k8s.io/v1", "Role", func(ns string) client.Object {
		return &rbacv1.Role{ObjectMeta: om(ns), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	}},
	{"rbac.authorization.k8s.io/v1", "RoleBinding", func(ns string) client.Object {
		return &rbacv1.RoleBinding{ObjectMeta: om(ns), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "w"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "w", Namespace: ns}}}
	}},
	{"apps/v1", "Deployment", func(ns string) client.Object {
		return &appsv1.Deployment{ObjectMeta: om(ns), Spec: appsv1.DeploymentSpec{Selector: watchSelector, Template: watchPod}}
	}},
	{"apps/v1", "StatefulSet", func(ns string) client.Object {
		return &appsv1.StatefulSet{ObjectMeta: om(ns), Spec: appsv1.StatefulSetSpec{Selector: watchSelector, Template: watchPod}}
	}},
	{"apps/v1", "DaemonSet", func(ns string) client.Object {
		return &appsv1.DaemonSet{ObjectMeta: om(ns), Spec: appsv1.DaemonSetSpec{Selector: watchSelector, Template: watchPod}}
	}},
	{"apps/v1", "ReplicaSet", func(ns string) client.Object {
		return &appsv1.ReplicaSet{ObjectMeta: om(ns), Spec: appsv1.ReplicaSetSpec{Selector: watchSelector, Template: watchPod}}
	}},
	{"batch/v1", "CronJob", func(ns string) client.Object {
		return &batchv1.CronJob{ObjectMeta: om(ns), Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: watchJobPod}}}}
	}},
	{"policy/v1", "PodDisruptionBudget", func(ns string) client.Object {
		return &policyv1.PodDisruptionBudget{ObjectMeta: om(ns), Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: watchSelector}}
	}},
	{"v1", "ResourceQuota", func(ns string) client.Object {
		return &corev1.ResourceQuota{ObjectMeta: om(ns), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("100")}}}
	}},
	{"v1", "LimitRange", func(ns string) client.Object {
		return &corev1.LimitRange{ObjectMeta: om(ns), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}}}}
	}},
	{"v1", "PersistentVolumeClaim", func(ns string) client.Object {
		return &corev1.PersistentVolumeClaim{ObjectMeta: om(ns), Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	}},
	{"networking.k8s.io/v1", "NetworkPolicy", func(ns string) client.Object {
		return &networkingv1.NetworkPolicy{ObjectMeta: om(ns), Spec: networkingv1.NetworkPolicySpec{PodSelector: *watchSelector}}
	}},
	{"autoscaling/v2", "HorizontalPodAutoscaler", func(ns string) client.Object {
		return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: om(ns), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "w"}, MaxReplicas: 2,
		}}
	}},
	{"networking.k8s.io/v1", "Ingress", func(ns string) client.Object {
		return &networkingv1.Ingress{ObjectMeta: om(ns), Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "w", Port: networkingv1.ServiceBackendPort{Number: 80}},
		}}}
	}},
	{"coordination.k8s.io/v1", "Lease", func(ns string) client.Object { return &coordinationv1.Lease{ObjectMeta: om(ns)} }},
	{"v1", "PodTemplate", func(ns string) client.Object { return &corev1.PodTemplate{ObjectMeta: om(ns), Template: watchPod} }},
}

// namespaceKinds are the kinds namespace k copies.
func namespaceKinds(k int) []watchKind {
	kinds := make([]watchKind, watchKindsEach)
	for j := range kinds {
		kinds[j] = watchKinds[(watchKindsEach*k+j)%len(watchKinds)]
	}
	return kinds
}

// pipelineWatches counts the watches a member's API server serves the
// manager with watchNamespaces Propagations of watchKindsEach kinds each.
func (b *bench) pipelineWatches(ctx context.Context, t *table) error {
	engagedLater, atEngagement := "watches per member, Propagations created once it was engaged", "watches per member, Propagations there when it was engaged"
	wantWatches := atMost(float64(watchNamespaces*watchKindsEach), "")
	fail := func(why string) {
		t.fail(engagedLater, "watches", why, wantWatches)
		t.fail(atEngagement, "watches", why, wantWatches)
	}
	envs, err := controlplane.Start(1)
	if err != nil {
		return fmt.Errorf("starting the member's API server: %w", err)
	}
	defer func() {
		if err := controlplane.Stop(envs); err != nil {
			b.progress("stopping the member's API server: %v", err)
		}
	}()
	server := envs[0]
	kubeconfig, err := controlplane.AdminKubeconfig(server, "fleet-manager")
	if err != nil {
		return err
	}
	fleetNS, err := b.lab.newNamespace(ctx)
	if err != nil {
		return err
	}
	member := fleetNS + "-solo"
	namespaces := make([]string, watchNamespaces)
	for k := range namespaces {
		namespaces[k] = fmt.Sprintf("%s-team-%02d", fleetNS, k)
	}
	defer os.RemoveAll(stateDir(fleetNS))
	defer b.cleanUpWatches(context.WithoutCancel(ctx), fleetNS, namespaces)

	base, err := stableWatches(ctx, server)
	if err != nil {
		return err
	}
	f, err := startPropFleet(b.lab.hub.Config, fleetNS, true)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			b.stopPropFleet(f)
		}
	}()
	counter, err := newReconcileCounter()
	if err != nil {
		return err
	}
	if err := b.lab.register(ctx, fleetNS, member, kubeconfig); err != nil {
		return err
	}
	if err := await("the member engaged", 2*time.Minute, func() bool { return f.engaged() == 1 }); err != nil {
		fail(err.Error())
		return nil
	}
	engaged, err := stableWatches(ctx, server)
	if err != nil {
		return err
	}
	if err := parallel(ctx, watchNamespaces, func(k int) error {
		ns := namespaces[k]
		if err := b.lab.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		p := &fleetv1alpha1.Propagation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"},
			Spec:       fleetv1alpha1.PropagationSpec{Members: fleetv1alpha1.MemberSelector{Names: []string{member}}},
		}
		for _, kind := range namespaceKinds(k) {
			if err := b.lab.hubClient.Create(ctx, kind.object(ns)); err != nil {
				return fmt.Errorf("creating a %s: %w", kind.kind, err)
			}
			p.Spec.Resources = append(p.Spec.Resources, fleetv1alpha1.ResourceSelector{APIVersion: kind.apiVersion, Kind: kind.kind, Name: "w"})
		}
		return b.lab.hubClient.Create(ctx, p)
	}); err != nil {
		return err
	}
	before := counter.successes([]string{member})
	if err := b.awaitWatchResults(ctx, namespaces, counter, member, before[member]); err != nil {
		fail(err.Error())
		return nil
	}
	later, err := stableWatches(ctx, server)
	if err != nil {
		return err
	}
	stopped = true
	if err := f.stop(); err != nil {
		return fmt.Errorf("stopping the manager: %w", err)
	}
	if _, err := stableWatches(ctx, server); err != nil {
		return err
	}
	if f, err = startPropFleet(b.lab.hub.Config, fleetNS, true); err != nil {
		return err
	}
	stopped = false
	before = counter.successes([]string{member})
	if err := b.awaitWatchResults(ctx, namespaces, counter, member, before[member]); err != nil {
		t.add(engagedLater, "watches", float64(later-engaged), wantWatches)
		t.fail(atEngagement, "watches", err.Error(), wantWatches)
		return nil
	}
	restarted, err := stableWatches(ctx, server)
	if err != nil {
		return err
	}
	b.progress("  watches on the member's server: %d with no manager, %d engaged, %d with the Propagations, %d after a restart", base, engaged, later, restarted)
	t.add(engagedLater, "watches", float64(later-engaged), wantWatches)
	t.add(atEngagement, "watches", float64(restarted-engaged), wantWatches)
	return nil
}

// awaitWatchResults waits until the member was reconciled successfully
// once per namespace since it had been since times, and every
// Propagation's status has a result for it.
func (b *bench) awaitWatchResults(ctx context.Context, namespaces []string, counter *reconcileCounter, member string, since float64) error {
	if err := await("a reconcile per Propagation", 3*time.Minute, func() bool {
		return counter.count(member, "success") >= since+float64(len(namespaces))
	}); err != nil {
		return err
	}
	for _, ns := range namespaces {
		var p fleetv1alpha1.Propagation
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := b.lab.hubClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team"}, &p); err != nil {
				return false, nil
			}
			st := p.Status
			return st.ObservedGeneration == p.Generation && st.Selected == 1 && st.Applied+st.Failed == 1, nil
		}); err != nil {
			return fmt.Errorf("Propagation %s/team has no result for the member: %s", ns, describeStatus(&p.Status))
		}
	}
	return counter.awaitQuiet(ctx, []string{member}, 2*time.Second, 2*time.Minute)
}

// stableWatches returns the watches server serves, once unchanged for 2 s.
func stableWatches(ctx context.Context, server *envtest.Environment) (int, error) {
	c, err := rest.HTTPClientFor(server.Config)
	if err != nil {
		return 0, err
	}
	last, since := -1, time.Now()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := watchCount(ctx, c, server.Config.Host)
		if err != nil {
			return 0, err
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 2*time.Second {
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the watches on %s did not settle within a minute (%d)", server.Config.Host, n)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// watchCount sums apiserver_longrunning_requests{verb="WATCH"} of the
// API server at host: the watches it serves now.
func watchCount(ctx context.Context, c *http.Client, host string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading the metrics of %s: %s", host, resp.Status)
	}
	var n float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("reading the metrics of %s: %q: %w", host, line, err)
		}
		n, found = n+v, true
	}
	if !found {
		return 0, fmt.Errorf("the metrics of %s have no apiserver_longrunning_requests with verb WATCH", host)
	}
	return int(n), sc.Err()
}

// cleanUpWatches deletes the watches figure's Propagations (their
// finalizers released), revisions, objects and namespaces, and its fleet.
// Its member server goes with its copies.
func (b *bench) cleanUpWatches(ctx context.Context, fleetNS string, namespaces []string) {
	err := parallel(ctx, len(namespaces), func(k int) error {
		ns := namespaces[k]
		p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}}
		errs := []error{
			client.IgnoreNotFound(b.lab.hubClient.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))),
			client.IgnoreNotFound(b.lab.hubClient.Delete(ctx, p)),
			b.lab.hubClient.DeleteAllOf(ctx, &fleetv1alpha1.PropagationRevision{}, client.InNamespace(ns)),
		}
		for _, kind := range namespaceKinds(k) {
			errs = append(errs, client.IgnoreNotFound(b.lab.hubClient.Delete(ctx, kind.object(ns))))
		}
		return errors.Join(append(errs, controlplane.RemoveNamespace(ctx, b.lab.hub.Config, ns))...)
	})
	if err != nil {
		b.progress("cleaning up the watches figure of %s: %v", fleetNS, err)
	}
	b.cleanUp(ctx, fleetNS)
}

// pipelineLag measures how long after the last write to a member the hub
// status of a new Propagation of lagMembers members reads Ready.
func (b *bench) pipelineLag(ctx context.Context, t *table) error {
	lag, after := fmt.Sprintf("N=%d, last member write to hub status Ready", lagMembers), fmt.Sprintf("N=%d, member writes after the status read Ready", lagMembers)
	lastWrite := fmt.Sprintf("N=%d, creation to the last member write", lagMembers)
	lastRun := fmt.Sprintf("N=%d, last member run to hub status Ready (not the target's clock)", lagMembers)
	fail := func(why string) {
		t.fail(lag, "ms", why, atMost(1000, ""))
		t.fail(after, "writes", why, nil)
		t.fail(lastWrite, "ms", why, nil)
		t.fail(lastRun, "ms", why, nil)
	}
	servers, err := startAuditedServers(rolloutServers)
	if err != nil {
		return fmt.Errorf("starting audited member API servers: %w", err)
	}
	defer func() {
		if err := servers.stop(); err != nil {
			b.progress("stopping the audited member API servers: %v", err)
		}
	}()
	s, err := b.setUpRollout(ctx, servers, lagMembers)
	defer func() {
		if s != nil {
			b.cleanUpRollout(context.WithoutCancel(ctx), s)
		}
	}()
	if err != nil {
		return err
	}
	created := time.Now()
	if err := b.createRolloutPropagation(ctx, s, fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutAll}); err != nil {
		return err
	}
	// The last member run is when, at a read of the Propagation, a
	// member's successful reconciles were last seen more than at the read
	// before: its result is recorded as the run ends.
	runs, lastRunAt := s.counter.successes(s.names), created
	var readyAt time.Time
	deadline := created.Add(3 * time.Minute)
	for readyAt.IsZero() {
		if now := s.counter.successes(s.names); !maps.Equal(now, runs) {
			runs, lastRunAt = now, time.Now()
		}
		p, _, err := b.readRolloutPropagation(ctx, s)
		if err != nil {
			return err
		}
		now := time.Now()
		st := p.Status
		if st.ObservedGeneration == p.Generation && int(st.Selected) == lagMembers && int(st.Applied) == lagMembers &&
			meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady) {
			readyAt = now
			break
		}
		if now.After(deadline) {
			fail("the status did not read Ready within 3 minutes: " + describeRollout(p))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lagPoll):
		}
	}
	if err := s.counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		fail(err.Error())
		return nil
	}
	writes, err := servers.writes(created)
	if err != nil {
		return err
	}
	if len(writes) == 0 {
		fail("the audit logs hold no write of the manager")
		return nil
	}
	last, later := writes[0].Time, 0
	for _, w := range writes {
		if w.Time.After(last) {
			last = w.Time
		}
		if w.Time.After(readyAt) {
			later++
		}
	}
	t.addDuration(lag, readyAt.Sub(last), atMost(1000, ""))
	t.add(after, "writes", float64(later), nil)
	t.addDuration(lastWrite, last.Sub(created), nil)
	t.addDuration(lastRun, readyAt.Sub(lastRunAt), nil)
	return nil
}
