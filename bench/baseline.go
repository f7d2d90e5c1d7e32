package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

const baselineTable = "Baseline: ClusterPropagation and Propagation"

// The baseline's shape: 20 cluster-scoped objects in one
// ClusterPropagation (a CRD of a cluster-scoped kind, a Namespace, and
// baselineRoles ClusterRoles each with its ClusterRoleBinding), and 30
// objects of that Namespace in one Propagation.
const (
	baselineRoles           = 9
	baselineConfigMaps      = 12
	baselineServiceAccounts = 6
	baselineNSRoles         = 6 // each with its RoleBinding
	baselineClusterObjects  = 2 + 2*baselineRoles
	baselineNSObjects       = baselineConfigMaps + baselineServiceAccounts + 2*baselineNSRoles
	// baselineServers is how many member API servers of its own the
	// scenario starts, each logging every write request.
	baselineServers = 3
	// baselineLabel, on the hub objects and the registration Secrets,
	// holds the run's prefix: the ClusterPropagation and the Propagation
	// select only those, so that one left behind by a failed run selects
	// no member of another scenario's fleet.
	baselineLabel = "bench.fleetkube.io/baseline"
	// serverLabel, on each registration Secret (so on its MemberCluster),
	// is the index of the member's API server; the override copies it
	// into a label of each ConfigMap copy, memberServerLabel.
	serverLabel       = "bench.fleetkube.io/server"
	memberServerLabel = "bench.fleetkube.io/member-server"
	// statusPoll is how often the scenario reads both statuses: well under
	// the controller's StatusInterval, the least time between two status
	// writes of one Propagation.
	statusPoll = 100 * time.Millisecond
)

// Members of the baseline: full and quick runs, and the rollout's p99
// target, about 1.5 times the first runs at 100 members (10–15 s).
var (
	fullBaselineMembers  = 100
	quickBaselineMembers = 20
	baselineP99Target    = atMost(20000, "")
)

// baselineNote explains how the baseline figures are made.
func baselineNote(n int, quick bool) string {
	note := fmt.Sprintf("A baseline of %d cluster-scoped objects (a CRD of a cluster-scoped kind, a Namespace, %d ClusterRoles and %d ClusterRoleBindings) in one ClusterPropagation, "+
		"and %d objects of that Namespace (%d ConfigMaps, %d ServiceAccounts, %d Roles, %d RoleBindings) in one Propagation of it, to %d members: "+
		"names over %d member API servers of the scenario's own, which log every write request (audit policy at Metadata level), each run's objects named with a prefix of its own. "+
		"Every kind is available once applied, except the CRD, once Established; no Deployment (envtest runs no controllers). "+
		"One override rule, a merge patch, sets a label of every ConfigMap copy to ${MEMBER_LABEL:%s}, the member's server, so that overrides are on the measured path: "+
		"members that share a server write the same copies, so a value of the member's own (${MEMBER_NAME}) would make them overwrite one another for good, each applying its own; "+
		"a value per server is substituted by each member and agrees among those of one server. "+
		"Rollout: once every member is Ready and engaged by the controller, the ClusterPropagation and the Propagation are created at once (the clock starts); "+
		"both statuses are read every %s (the controller writes each at most every %s): a member is available in one once the status describes its generation, "+
		"counts every member selected, and no longer lists it (status.members lists every selected member that is not applied and available); "+
		"its time is from the clock's start until it is, without a break, in both; it ends when both are Ready with every member available. "+
		"The p99 target, %g s, is about 1.5 times the first runs at 100 members (10–15 s; 2 cores shared with other test suites). "+
		"The ClusterPropagation does not adopt: in a member where the Propagation created the Namespace first (no copy, stamped with the fleet's identity), "+
		"it fails AlreadyExists for good, and this figure fails naming it (see README.md, Baseline). "+
		"Writes: the audit logs' write requests to the member servers with user agent fleet-manager/propagation; the last one's time, from the clock's start, "+
		"sets apart the time spent applying from the time until the statuses say so. "+
		"Restart: once the fleet made no reconcile for 2 s, the manager is stopped and a new one started (in the bench's process, with the same journal, as in the Propagation table); "+
		"once each member was reconciled twice by it (once per Propagation), the fleet quiet for 2 s and both Ready, the writes since the new start are counted (target 0).",
		baselineClusterObjects, baselineRoles, baselineRoles, baselineNSObjects, baselineConfigMaps, baselineServiceAccounts, baselineNSRoles, baselineNSRoles,
		n, baselineServers, serverLabel, statusPoll, propagation.StatusInterval, baselineP99Target.limit/1000)
	if quick {
		note += fmt.Sprintf(" Quick mode runs %d members, not %d.", quickBaselineMembers, fullBaselineMembers)
	}
	return note
}

// auditedServers are member API servers of a scenario's own, each of
// which logs every write request.
type auditedServers struct {
	envs        []*envtest.Environment
	clients     []client.Client
	kubeconfigs [][]byte
	dir         string
	logs        []string // the audit log of each server
}

func startAuditedServers(n int) (*auditedServers, error) {
	return startAuditedServersBy(n, n)
}

// startAuditedServersBy starts n audited member servers, at most batch at
// once: a loaded machine fails to start many together.
func startAuditedServersBy(n, batch int) (*auditedServers, error) {
	dir, err := os.MkdirTemp("", "fleet-bench-audit-")
	if err != nil {
		return nil, err
	}
	s := &auditedServers{dir: dir}
	for first := 0; first < n; first += batch {
		sub := filepath.Join(dir, strconv.Itoa(first))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return nil, errors.Join(err, s.stop())
		}
		envs, err := controlplane.StartAudited(min(batch, n-first), sub)
		if err != nil {
			return nil, errors.Join(err, s.stop())
		}
		for i := range envs {
			s.logs = append(s.logs, controlplane.AuditLog(sub, i))
		}
		s.envs = append(s.envs, envs...)
	}
	for _, env := range s.envs {
		kc, err := controlplane.AdminKubeconfig(env, "fleet-manager")
		if err != nil {
			return nil, errors.Join(err, s.stop())
		}
		c, err := client.New(env.Config, client.Options{})
		if err != nil {
			return nil, errors.Join(err, s.stop())
		}
		s.kubeconfigs, s.clients = append(s.kubeconfigs, kc), append(s.clients, c)
	}
	return s, nil
}

func (s *auditedServers) stop() error {
	return errors.Join(controlplane.Stop(s.envs), os.RemoveAll(s.dir))
}

// writes returns the write requests the Propagation controller made to
// the servers since then.
func (s *auditedServers) writes(since time.Time) ([]controlplane.Write, error) {
	var all []controlplane.Write
	for _, log := range s.logs {
		w, err := controlplane.Writes(log, "fleet-manager/"+propagation.ControllerName, since)
		if err != nil {
			return nil, err
		}
		all = append(all, w...)
	}
	return all, nil
}

// baselineSetup is one run's baseline: its fleet, the hub Namespace of
// the namespaced objects (which the ClusterPropagation copies too), and
// the names.
type baselineSetup struct {
	fleetNS   string
	prefix    string // the run's prefix: the fleet namespace
	namespace string // the baseline's Namespace
	group     string // the CRD's group
	crd       string // the CRD's name
	names     []string
	// hub is a client of the hub whose scheme has CRDs.
	hub client.Client
}

// newBaselineHubClient returns a client of the hub whose scheme has
// CRDs, which the lab's has not.
func (b *bench) newBaselineHubClient() (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fleetv1alpha1.AddToScheme(scheme), apiextensionsv1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return client.New(b.lab.hub.Config, client.Options{Scheme: scheme})
}

// benchBaseline runs the baseline scenario: the rollout of a
// ClusterPropagation and a Propagation to every member until each is
// available in both, then a restart of the manager with nothing changed.
func (b *bench) benchBaseline(ctx context.Context) error {
	n := fullBaselineMembers
	if b.quick {
		n = quickBaselineMembers
	}
	t := b.res.table(baselineTable, baselineNote(n, b.quick))
	servers, err := startAuditedServers(baselineServers)
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
	hub, err := b.newBaselineHubClient()
	if err != nil {
		return err
	}
	s := &baselineSetup{fleetNS: fleetNS, prefix: fleetNS, namespace: fleetNS + "-base", group: fleetNS + ".bench.fleetkube.io", hub: hub}
	s.crd = "gadgets." + s.group
	for i := range n {
		s.names = append(s.names, fmt.Sprintf("%s-m%03d", fleetNS, i))
	}
	defer os.RemoveAll(stateDir(fleetNS))
	defer b.cleanUpBaseline(context.WithoutCancel(ctx), s)
	if err := b.createBaselineObjects(ctx, s); err != nil {
		return fmt.Errorf("creating the baseline's hub objects: %w", err)
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
	if err := parallel(ctx, n, func(i int) error {
		return s.hub.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: s.names[i], Labels: map[string]string{
				registry.KubeconfigLabel: "true", baselineLabel: s.prefix, serverLabel: strconv.Itoa(i % baselineServers),
			}},
			Data: map[string][]byte{registry.KubeconfigKey: servers.kubeconfigs[i%baselineServers]},
		})
	}); err != nil {
		return err
	}
	if err := await("every member Ready and engaged", 3*time.Minute, func() bool { return f.engaged() == n && allReady(f, s.names) }); err != nil {
		return err
	}

	// The rollout.
	fig := func(name, unit string, tg *target) baselineFigure {
		return baselineFigure{name: fmt.Sprintf("N=%d, %s", n, name), unit: unit, target: tg}
	}
	p50, p99, every := fig("member available in both, p50", "ms", nil), fig("member available in both, p99", "ms", baselineP99Target), fig("every member available in both (both Ready)", "ms", nil)
	rolloutWrites, lastWrite := fig("rollout: writes to the member servers", "writes", nil), fig("rollout: last write to a member server", "ms", nil)
	restartReconciled := fig("restart: start to every member reconciled", "ms", nil)
	restartWrites := fig(fmt.Sprintf("restart, %d + %d objects unchanged: writes", baselineClusterObjects, baselineNSObjects), "writes", atMost(0, ""))
	// fail records why the figures from fs on could not be measured.
	fail := func(why string, fs ...baselineFigure) error {
		for _, f := range fs {
			t.fail(f.name, f.unit, why, f.target)
		}
		return nil
	}
	started := time.Now()
	if err := b.createBaselinePropagations(ctx, s); err != nil {
		return err
	}
	times, err := b.awaitBaselineAvailable(ctx, s, started, 5*time.Minute)
	if m, failed := errors.AsType[*measurementError](err); failed {
		return fail(m.why, p50, p99, every, rolloutWrites, lastWrite, restartReconciled, restartWrites)
	} else if err != nil {
		return err
	}
	t.addDuration(p50.name, percentile(times, 50), p50.target)
	t.addDuration(p99.name, percentile(times, 99), p99.target)
	t.addDuration(every.name, slices.Max(times), every.target)
	if err := b.baselineCopiesHold(ctx, servers, s); err != nil {
		return fail(err.Error(), rolloutWrites, lastWrite, restartReconciled, restartWrites)
	}
	if err := counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		return fail(err.Error(), rolloutWrites, lastWrite, restartReconciled, restartWrites)
	}
	writes, err := servers.writes(started)
	if err != nil {
		return err
	}
	t.add(rolloutWrites.name, rolloutWrites.unit, float64(len(writes)), nil)
	if len(writes) == 0 {
		fail("no write was logged", lastWrite)
	} else {
		last := slices.MaxFunc(writes, func(a, b controlplane.Write) int { return a.Time.Compare(b.Time) })
		t.addDuration(lastWrite.name, last.Time.Sub(started), nil)
	}

	// A restart with nothing changed.
	stopped = true
	if err := f.stop(); err != nil {
		return fmt.Errorf("stopping the fleet manager: %w", err)
	}
	before := counter.successes(s.names)
	restarted := time.Now()
	if f, err = startPropFleet(b.lab.hub.Config, fleetNS, true); err != nil {
		return err
	}
	stopped = false
	reconciled := func(context.Context) (bool, error) {
		for name, count := range counter.successes(s.names) {
			if count < before[name]+2 {
				return false, nil
			}
		}
		return true, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, reconciled); err != nil {
		return fail(fmt.Sprintf("not every member was reconciled twice by the new manager: %v", err), restartReconciled, restartWrites)
	}
	t.addDuration(restartReconciled.name, time.Since(restarted), nil)
	if err := counter.awaitQuiet(ctx, s.names, 2*time.Second, 2*time.Minute); err != nil {
		return fail(err.Error(), restartWrites)
	}
	if _, err := b.awaitBaselineAvailable(ctx, s, restarted, time.Minute); err != nil {
		return fail(err.Error(), restartWrites)
	}
	if writes, err = servers.writes(restarted); err != nil {
		return err
	}
	for i, w := range writes {
		if i == 5 {
			b.progress("  ... and %d more", len(writes)-i)
			break
		}
		b.progress("  restart write: %s", w)
	}
	t.add(restartWrites.name, restartWrites.unit, float64(len(writes)), restartWrites.target)
	return nil
}

// baselineFigure is a figure of the baseline table, for its failure.
type baselineFigure struct {
	name, unit string
	target     *target
}

// allReady reports whether every member of names is Ready.
func allReady(f *propFleet, names []string) bool {
	for _, name := range names {
		if state, ok := f.mgr.MemberState(name); !ok || state != fleetv1alpha1.MemberStateReady {
			return false
		}
	}
	return true
}

func (b *bench) stopPropFleet(f *propFleet) {
	if err := f.stop(); err != nil {
		b.progress("stopping fleet: %v", err)
	}
}

// createBaselineObjects creates the hub objects of s: the CRD, the
// Namespace, the ClusterRoles and their bindings, and the Namespace's
// ConfigMaps, ServiceAccounts, Roles and RoleBindings, all labelled with
// the run's prefix.
func (b *bench) createBaselineObjects(ctx context.Context, s *baselineSetup) error {
	labels := map[string]string{baselineLabel: s.prefix}
	om := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}
	}
	objs := []client.Object{
		&apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: om("", s.crd),
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: s.group,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
				Scope: apiextensionsv1.ClusterScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
				}},
			},
		},
		&corev1.Namespace{ObjectMeta: om("", s.namespace)},
	}
	for i := range baselineRoles {
		name := fmt.Sprintf("%s-reader-%d", s.prefix, i)
		objs = append(objs,
			&rbacv1.ClusterRole{ObjectMeta: om("", name), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}},
			&rbacv1.ClusterRoleBinding{
				ObjectMeta: om("", name),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: fmt.Sprintf("readers-%d", i)}},
			})
	}
	for i := range baselineConfigMaps {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: om(s.namespace, fmt.Sprintf("settings-%02d", i)), Data: map[string]string{"mode": "production", "index": strconv.Itoa(i)}})
	}
	for i := range baselineServiceAccounts {
		objs = append(objs, &corev1.ServiceAccount{ObjectMeta: om(s.namespace, fmt.Sprintf("app-%d", i))})
	}
	for i := range baselineNSRoles {
		name := fmt.Sprintf("app-%d", i)
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: om(s.namespace, name), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get"}}}},
			&rbacv1.RoleBinding{
				ObjectMeta: om(s.namespace, name),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: fmt.Sprintf("app-%d", i%baselineServiceAccounts), Namespace: s.namespace}},
			})
	}
	// The CRD and the Namespace first: the Namespace's objects need it.
	for _, obj := range objs[:2] {
		if err := s.hub.Create(ctx, obj); err != nil {
			return err
		}
	}
	rest := objs[2:]
	return parallel(ctx, len(rest), func(i int) error { return s.hub.Create(ctx, rest[i]) })
}

// baselinePropagations are the ClusterPropagation of s, named with its
// prefix, and its Propagation, named baseline.
func baselinePropagations(s *baselineSetup) (*fleetv1alpha1.ClusterPropagation, *fleetv1alpha1.Propagation) {
	byLabel := fleetv1alpha1.SetAsLabelSelector(map[string]string{baselineLabel: s.prefix})
	rbac := rbacv1.SchemeGroupVersion.String()
	members := fleetv1alpha1.MemberSelector{Selector: byLabel}
	cp := &fleetv1alpha1.ClusterPropagation{
		ObjectMeta: metav1.ObjectMeta{Name: s.prefix + "-baseline"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{
				{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: s.crd},
				{APIVersion: "v1", Kind: "Namespace", Name: s.namespace},
				{APIVersion: rbac, Kind: "ClusterRole", Selector: byLabel},
				{APIVersion: rbac, Kind: "ClusterRoleBinding", Selector: byLabel},
			},
			Members: members,
			// No adopt, the default: in a member where the Propagation
			// created the Namespace first (stamped with the fleet's
			// identity, but no copy), the ClusterPropagation fails
			// AlreadyExists for good, and the rollout's figures fail
			// naming it. Created together, the ClusterPropagation has
			// won so far. See README.md, Baseline.
			Adopt: false,
		},
	}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: "baseline"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{
				{APIVersion: "v1", Kind: "ConfigMap", Selector: byLabel},
				{APIVersion: "v1", Kind: "ServiceAccount", Selector: byLabel},
				{APIVersion: rbac, Kind: "Role", Selector: byLabel},
				{APIVersion: rbac, Kind: "RoleBinding", Selector: byLabel},
			},
			Members: members,
			// Members that share a server write the same copies: the
			// override's value must agree among them, or they overwrite
			// one another for good. The member's server does; its name
			// would not.
			Overrides: []fleetv1alpha1.Override{{
				Name:       "member-server",
				Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"},
				MergePatch: &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{"metadata":{"labels":{%q:"${MEMBER_LABEL:%s}"}}}`, memberServerLabel, serverLabel)},
			}},
		},
	}
	return cp, p
}

// createBaselinePropagations creates the ClusterPropagation and the
// Propagation of s.
func (b *bench) createBaselinePropagations(ctx context.Context, s *baselineSetup) error {
	cp, p := baselinePropagations(s)
	return errors.Join(s.hub.Create(ctx, cp), s.hub.Create(ctx, p))
}

// baselineAvailability follows, in one status, since when each member
// has been available, without a break.
type baselineAvailability map[string]time.Time

// observe updates a from st, the status of a Propagation of generation
// gen read at now, selecting names. A member is available once the status
// describes gen, counts every member selected, and does not list it.
func (a baselineAvailability) observe(st *fleetv1alpha1.PropagationStatus, gen int64, names []string, now time.Time) {
	current := st.ObservedGeneration == gen && int(st.Selected) == len(names)
	for _, name := range names {
		listed := slices.ContainsFunc(st.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool { return m.Name == name })
		switch {
		case !current || listed:
			delete(a, name)
		case a[name].IsZero():
			a[name] = now
		}
	}
}

// done reports whether st says Ready, with every member available.
func baselineDone(st *fleetv1alpha1.PropagationStatus, gen int64, n int) bool {
	return st.ObservedGeneration == gen && int(st.Available) == n && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.PropagationReady)
}

// awaitBaselineAvailable reads both statuses of s every statusPoll until
// both are Ready with every member available, and returns, per member,
// the time from since until it was available in both, without a break.
func (b *bench) awaitBaselineAvailable(ctx context.Context, s *baselineSetup, since time.Time, timeout time.Duration) ([]time.Duration, error) {
	cp, p := baselinePropagations(s)
	inCluster, inNamespace := baselineAvailability{}, baselineAvailability{}
	deadline := since.Add(timeout)
	for {
		cpErr := s.hub.Get(ctx, client.ObjectKeyFromObject(cp), cp)
		pErr := s.hub.Get(ctx, client.ObjectKeyFromObject(p), p)
		now := time.Now()
		if err := errors.Join(cpErr, pErr); err != nil {
			return nil, err
		}
		inCluster.observe(&cp.Status, cp.Generation, s.names, now)
		inNamespace.observe(&p.Status, p.Generation, s.names, now)
		if baselineDone(&cp.Status, cp.Generation, len(s.names)) && baselineDone(&p.Status, p.Generation, len(s.names)) &&
			len(inCluster) == len(s.names) && len(inNamespace) == len(s.names) {
			times := make([]time.Duration, 0, len(s.names))
			for _, name := range s.names {
				at := inCluster[name]
				if inNamespace[name].After(at) {
					at = inNamespace[name]
				}
				times = append(times, at.Sub(since))
			}
			return times, nil
		}
		if now.After(deadline) {
			return nil, &measurementError{fmt.Sprintf("not Ready in every member within %s: ClusterPropagation %s, Propagation %s",
				timeout, describeStatus(&cp.Status), describeStatus(&p.Status))}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(statusPoll):
		}
	}
}

// describeStatus sums up a status for a failure's reason.
func describeStatus(st *fleetv1alpha1.PropagationStatus) string {
	s := fmt.Sprintf("%d selected, %d applied, %d available, %d failed", st.Selected, st.Applied, st.Available, st.Failed)
	if c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.PropagationReady); c != nil {
		s += fmt.Sprintf(", Ready %s %s: %s", c.Status, c.Reason, c.Message)
	}
	return s
}

// baselineCopiesHold checks that every server holds the copies, the
// ConfigMaps with the override's label naming the server.
func (b *bench) baselineCopiesHold(ctx context.Context, servers *auditedServers, s *baselineSetup) error {
	for i, c := range servers.clients {
		cms := &corev1.ConfigMapList{}
		if err := c.List(ctx, cms, client.InNamespace(s.namespace), client.MatchingLabels{baselineLabel: s.prefix}); err != nil {
			return fmt.Errorf("listing the copies in member server %d: %w", i, err)
		}
		if len(cms.Items) != baselineConfigMaps {
			return fmt.Errorf("member server %d holds %d ConfigMap copies, not %d", i, len(cms.Items), baselineConfigMaps)
		}
		for _, cm := range cms.Items {
			if got := cm.Labels[memberServerLabel]; got != strconv.Itoa(i) {
				return fmt.Errorf("the copy of ConfigMap %s in member server %d has %s=%q, not %d", cm.Name, i, memberServerLabel, got, i)
			}
		}
		roles := &rbacv1.ClusterRoleList{}
		if err := c.List(ctx, roles, client.MatchingLabels{baselineLabel: s.prefix}); err != nil {
			return fmt.Errorf("listing the copies in member server %d: %w", i, err)
		}
		if len(roles.Items) != baselineRoles {
			return fmt.Errorf("member server %d holds %d ClusterRole copies, not %d", i, len(roles.Items), baselineRoles)
		}
	}
	return nil
}

// cleanUpBaseline deletes, once the manager has stopped, the
// ClusterPropagation and the Propagation of s (their finalizers released:
// no manager is left to), the hub objects and the fleet. The member
// servers, the scenario's own, go with their copies.
func (b *bench) cleanUpBaseline(ctx context.Context, s *baselineSetup) {
	cp, p := baselinePropagations(s)
	var err error
	for _, obj := range []client.Object{cp, p} {
		err = errors.Join(err, client.IgnoreNotFound(s.hub.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))),
			client.IgnoreNotFound(s.hub.Delete(ctx, obj)))
	}
	byLabel := client.MatchingLabels{baselineLabel: s.prefix}
	inNamespace := []client.DeleteAllOfOption{client.InNamespace(s.namespace), byLabel}
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		err = errors.Join(err, s.hub.DeleteAllOf(ctx, obj, inNamespace...))
	}
	for _, obj := range []client.Object{&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}} {
		err = errors.Join(err, s.hub.DeleteAllOf(ctx, obj, byLabel))
	}
	err = errors.Join(err,
		client.IgnoreNotFound(s.hub.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: s.crd}})),
		controlplane.RemoveNamespace(ctx, b.lab.hub.Config, s.namespace))
	if err != nil {
		b.progress("cleaning up the baseline of %s: %v", s.fleetNS, err)
	}
	b.cleanUp(ctx, s.fleetNS)
}
