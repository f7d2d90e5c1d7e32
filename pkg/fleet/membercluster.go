package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/cluster"
)

// probeTimeRefresh is how stale LastProbeTime may grow before it alone
// causes a status write: every probe would be a write per member every
// few seconds.
const probeTimeRefresh = 30 * time.Second

// memberClusters keeps one MemberCluster per registered cluster name: it
// creates it from the registration, keeps its labels, spec and status
// current, and deletes it when the last Secret claiming the name goes.
type memberClusters struct {
	m        *Manager
	client   client.Client
	recorder events.EventRecorder

	// queue is the controller's, once it started.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]

	// mu guards probes: the last probe of each member, as the pool
	// reported it, and versions: each connected member's server version.
	mu       sync.Mutex
	probes   map[string]probeRecord
	versions map[string]string
}

type probeRecord struct {
	result cluster.ProbeResult
	state  cluster.State
}

func addMemberClusters(m *Manager) (*memberClusters, error) {
	mc := &memberClusters{
		m:        m,
		client:   m.GetClient(),
		recorder: m.GetEventRecorder("fleet-manager"),
		probes:   map[string]probeRecord{},
		versions: map[string]string{},
	}
	return mc, builder.ControllerManagedBy(m.Manager).
		Named("fleet-memberclusters").
		For(&fleetv1alpha1.MemberCluster{}).
		WatchesRawSource(mc).
		Complete(mc)
}

// Start is the controller's source of member changes: it keeps the queue
// and enqueues every known cluster once.
func (mc *memberClusters) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	mc.queue.Store(&q)
	for _, name := range mc.m.provider.names() {
		q.Add(reconcile.Request{NamespacedName: nameKey(name)})
	}
	return nil
}

func (mc *memberClusters) String() string { return "member changes" }

// notify asks for the MemberCluster of name to be brought up to date.
func (mc *memberClusters) notify(name string) {
	if q := mc.queue.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: nameKey(name)})
	}
}

// observeProbe records a probe and notifies on anything a status shows.
// A member that is not Ready may come back as another server version.
func (mc *memberClusters) observeProbe(name string, result cluster.ProbeResult, state cluster.State) {
	mc.mu.Lock()
	if state != cluster.StateReady {
		delete(mc.versions, name)
	}
	old := mc.probes[name]
	mc.probes[name] = probeRecord{result: result, state: state}
	changed := old.state != state || old.result.ConsecutiveFailures != result.ConsecutiveFailures ||
		result.Time.Sub(old.result.Time) >= probeTimeRefresh
	mc.mu.Unlock()
	if changed {
		mc.notify(name)
	}
}

func (mc *memberClusters) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name
	claims := mc.m.provider.claimsOn(name)
	obj := &fleetv1alpha1.MemberCluster{}
	err := mc.client.Get(ctx, req.NamespacedName, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	exists := err == nil
	if len(claims) == 0 {
		mc.forget(name)
		if exists {
			return reconcile.Result{}, client.IgnoreNotFound(mc.client.Delete(ctx, obj))
		}
		return reconcile.Result{}, nil
	}

	secret := claims[0].secret
	want := obj.DeepCopy()
	want.Name = name
	want.Labels = maps.Clone(secret.Labels)
	want.Spec.SecretRef = fleetv1alpha1.SecretReference{
		Namespace: secret.Namespace, Name: secret.Name, Format: fleetv1alpha1.RegistrationFormat(claims[0].ref.format),
	}
	if !exists {
		if err := mc.client.Create(ctx, want); err != nil {
			return reconcile.Result{}, err
		}
	} else if !equality.Semantic.DeepEqual(obj.Labels, want.Labels) || obj.Spec != want.Spec {
		if err := mc.client.Update(ctx, want); err != nil {
			return reconcile.Result{}, err
		}
	}

	before := want.Status.DeepCopy()
	from := want.Status.State
	mc.setStatus(ctx, name, &want.Status, len(claims) > 1)
	if want.Status.State != from && from != "" {
		eventType := corev1.EventTypeNormal
		if want.Status.State != fleetv1alpha1.MemberStateReady {
			eventType = corev1.EventTypeWarning
		}
		mc.recorder.Eventf(want, nil, eventType, string(want.Status.State), "StateChanged", "member is %s, was %s", want.Status.State, from)
	}
	if statusUnchanged(before, &want.Status) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, mc.client.Status().Update(ctx, want)
}

// setStatus fills status from the registration, the pool, the probes and
// the engager. conflict says two Secrets claim the name.
func (mc *memberClusters) setStatus(ctx context.Context, name string, status *fleetv1alpha1.MemberClusterStatus, conflict bool) {
	now := metav1.Now()
	refusal := mc.m.provider.refusal(name)
	state, registered := mc.m.pool.State(name)
	mc.mu.Lock()
	probe, probed := mc.probes[name]
	mc.mu.Unlock()

	switch {
	case conflict:
		status.SetState(fleetv1alpha1.MemberStatePending, "ClusterNameConflict", now)
	case !registered:
		status.SetState(fleetv1alpha1.MemberStatePending, fleetv1alpha1.ReasonCredentialsRefused, now)
	default:
		status.SetState(fleetv1alpha1.MemberState(state), string(state), now)
	}

	accepted := metav1.Condition{Type: fleetv1alpha1.ConditionCredentialsAccepted, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonAccepted, Message: "the kubeconfig meets the policy"}
	switch {
	case refusal != nil:
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, refusal.Reason, refusal.Message
	case probed && apierrors.IsUnauthorized(probe.result.Err):
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized, "the member refused the credentials (401)"
	case probed && apierrors.IsForbidden(probe.result.Err):
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonForbidden, "the credentials may not review themselves (403)"
	}
	meta.SetStatusCondition(&status.Conditions, accepted)

	healthy := metav1.Condition{Type: fleetv1alpha1.ConditionHealthy, Status: metav1.ConditionUnknown, Reason: fleetv1alpha1.ReasonNotProbed, Message: "not probed yet"}
	status.LastError = ""
	if probed {
		status.LastProbeTime = &metav1.Time{Time: probe.result.Time}
		status.ConsecutiveFailures = int32(probe.result.ConsecutiveFailures)
		if probe.result.Err == nil {
			status.LastProbeResult = fleetv1alpha1.ProbeResultSuccess
			healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "the last probe succeeded"
		} else {
			status.LastProbeResult = fleetv1alpha1.ProbeResultFailure
			status.LastError = truncate(cluster.SafeError(probe.result.Err), fleetv1alpha1.MaxLastErrorLength)
			healthy.Status, healthy.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonProbeFailed
			healthy.Message = fmt.Sprintf("%d probes in a row failed", probe.result.ConsecutiveFailures)
		}
	}
	meta.SetStatusCondition(&status.Conditions, healthy)

	ready := metav1.Condition{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: string(status.State), Message: "the member is " + string(status.State)}
	if status.State == fleetv1alpha1.MemberStateReady {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "the member is engaged and healthy"
	}
	meta.SetStatusCondition(&status.Conditions, ready)

	status.ServerVersion = mc.serverVersion(ctx, name, state == cluster.StateReady)
	status.EngagedControllers, status.ControllerConditions = nil, mc.controllerConditions(name, status.ControllerConditions, now)
	for _, c := range status.ControllerConditions {
		if c.Status == metav1.ConditionTrue {
			status.EngagedControllers = append(status.EngagedControllers, c.Name)
		}
	}
}

// controllerConditions says, per fleet controller, whether it works with
// the member, keeping the transition time of unchanged conditions.
func (mc *memberClusters) controllerConditions(name string, old []fleetv1alpha1.ControllerCondition, now metav1.Time) []fleetv1alpha1.ControllerCondition {
	var out []fleetv1alpha1.ControllerCondition
	for _, e := range mc.m.engager.Engagements(name) {
		c := fleetv1alpha1.ControllerCondition{Name: e.Aware, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonEngaged, LastTransitionTime: now}
		if !e.Engaged {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonEngageFailed, "not engaged yet"
			if e.Err != nil {
				c.Message = truncate(cluster.SafeError(e.Err), fleetv1alpha1.MaxLastErrorLength)
				if meta.IsNoMatchError(e.Err) {
					c.Reason = fleetv1alpha1.ReasonKindNotFound
				}
			}
		}
		for _, o := range old {
			if o.Name == c.Name && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		out = append(out, c)
	}
	return out
}

// serverVersion returns the member's Kubernetes version, asked once per
// connection while the member is Ready.
func (mc *memberClusters) serverVersion(ctx context.Context, name string, ready bool) string {
	mc.mu.Lock()
	gitVersion, known := mc.versions[name]
	mc.mu.Unlock()
	if known || !ready {
		return gitVersion
	}
	cl, err := mc.m.pool.Get(name)
	if err != nil {
		return ""
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, mc.m.pool.HealthOptions().Timeout)
	defer cancel()
	raw, err := dc.RESTClient().Get().AbsPath("/version").DoRaw(ctx)
	var info version.Info
	if err != nil || json.Unmarshal(raw, &info) != nil {
		return ""
	}
	mc.mu.Lock()
	mc.versions[name] = info.GitVersion
	mc.mu.Unlock()
	return info.GitVersion
}

func (mc *memberClusters) forget(name string) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.probes, name)
	delete(mc.versions, name)
}

// statusUnchanged reports whether after differs from before at most in a
// LastProbeTime that is still fresh.
func statusUnchanged(before, after *fleetv1alpha1.MemberClusterStatus) bool {
	a := after.DeepCopy()
	if before.LastProbeTime != nil && a.LastProbeTime != nil && a.LastProbeTime.Sub(before.LastProbeTime.Time) < probeTimeRefresh {
		a.LastProbeTime = before.LastProbeTime
	}
	return equality.Semantic.DeepEqual(before, a)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func nameKey(name string) (key client.ObjectKey) {
	key.Name = name
	return key
}
