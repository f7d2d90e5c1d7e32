package membercluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ProbeTimeRefreshIntervals is how many probe intervals LastProbeTime may
// lag before it alone causes a status write (32 s by default): a write per
// probe would be a write per member every few seconds. A LastProbeTime
// older than that says the manager no longer probes the member.
const ProbeTimeRefreshIntervals = 8

// DefaultWorkers is how many MemberClusters are written at once: a
// fleet's registrations arrive together at start-up.
const DefaultWorkers = 8

// maxVersionBytes bounds the /version body read from a member.
const maxVersionBytes = 16 << 10

// memberClusters keeps one MemberCluster per registered cluster name of
// its fleet: it creates it from the registry, keeps its labels, spec and
// status current, and deletes it once the name is no longer registered.
// It acts on an absent registration only after the registry has synced,
// so a manager that starts, or becomes leader, deletes nothing that its
// registrations still claim.
type memberClusters struct {
	m           *fleet.Manager
	client      client.Client
	recorder    events.EventRecorder
	credentials *registry.Facts[registry.Credentials]
	owed        *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	drains      *registry.Facts[fleetv1alpha1.DrainStatus]
	// probeTimeRefresh is how stale LastProbeTime may grow.
	probeTimeRefresh time.Duration

	// mu guards versions: each connected member's server version, asked
	// once per connection.
	mu       sync.Mutex
	versions map[string]string
}

// Options configure the MemberCluster controller.
type Options struct {
	// Workers is how many MemberClusters are written at once. Default:
	// DefaultWorkers.
	Workers int
	// Client writes MemberClusters. Default: the manager's client.
	Client client.Client
	// Credentials, if set, are what the token renewal publishes of each
	// member's credential, shown as the status's credentials and its
	// CredentialsExpiring condition. Unset, the status shows neither.
	Credentials *registry.Facts[registry.Credentials]
	// OwedRemovals, if set, are the removals the Propagation controller
	// publishes as owed by each member, shown as the status's
	// owedRemovals and owedRemovalCount.
	OwedRemovals *registry.Facts[[]fleetv1alpha1.OwedRemoval]
	// Drains, if set, are where the Propagation controller publishes each
	// drained member's drain, shown as the status's drain and its Drained
	// condition.
	Drains *registry.Facts[fleetv1alpha1.DrainStatus]
}

// Add adds the MemberCluster controller to m, configured by opts. A hub
// without the MemberCluster CRD gets none: Add logs that and returns nil.
func Add(m *fleet.Manager, opts Options) error {
	if _, err := m.GetRESTMapper().RESTMapping(fleetv1alpha1.GroupVersion.WithKind("MemberCluster").GroupKind(), fleetv1alpha1.GroupVersion.Version); meta.IsNoMatchError(err) {
		m.GetLogger().Info("The hub has no MemberCluster CRD: member status is not written (install deploy/crd)")
		return nil
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Client == nil {
		opts.Client = m.GetClient()
	}
	mc := &memberClusters{
		m:        m,
		client:   opts.Client,
		recorder: m.GetEventRecorder("fleet-manager"),
		versions: map[string]string{},

		credentials: opts.Credentials,
		owed:        opts.OwedRemovals,
		drains:      opts.Drains,

		probeTimeRefresh: ProbeTimeRefreshIntervals * m.MemberHealth().Interval,
	}
	b := builder.ControllerManagedBy(m.Manager).
		Named("fleet-memberclusters").
		For(&fleetv1alpha1.MemberCluster{}).
		WatchesRawSource(m.Registry().Source())
	if opts.Credentials != nil {
		b = b.WatchesRawSource(opts.Credentials.Source())
	}
	if opts.OwedRemovals != nil {
		b = b.WatchesRawSource(opts.OwedRemovals.Source())
	}
	if opts.Drains != nil {
		b = b.WatchesRawSource(opts.Drains.Source())
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).Complete(mc)
}

func (mc *memberClusters) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, retErr error) {
	defer func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			retErr = nil // the manager is stopping: no failure, and the next one reconciles again
		}
	}()
	select {
	case <-mc.m.Registry().Synced():
	case <-ctx.Done():
		return reconcile.Result{}, nil
	}
	name := req.Name
	if !mc.m.Owns(name) {
		return reconcile.Result{}, nil // its owner writes it
	}
	c, registered := mc.m.Registry().Get(name)
	obj := &fleetv1alpha1.MemberCluster{}
	err := mc.client.Get(ctx, req.NamespacedName, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	exists := err == nil
	if exists && !mc.ours(obj, registered) {
		if registered {
			logf.FromContext(ctx).Info("A MemberCluster of another fleet has this cluster's name: leaving it alone", "cluster", name, "fleet", obj.Labels[fleetv1alpha1.FleetLabel])
		}
		return reconcile.Result{}, nil
	}
	if !registered {
		mc.forget(name)
		if !exists {
			return reconcile.Result{}, nil
		}
		if err := mc.client.Delete(ctx, obj, client.Preconditions{UID: &obj.UID}); err != nil {
			return ignoreStale(client.IgnoreNotFound(err))
		}
		mc.recorder.Eventf(obj, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonDeregistered, "Deregister", "the cluster's registration is gone")
		return reconcile.Result{}, nil
	}
	if !c.Accepted() || c.State != fleetv1alpha1.MemberStateReady {
		mc.forget(name) // a member that comes back may run another version
	}

	claim := c.Claims[0]
	want := obj.DeepCopy()
	want.Name = name
	want.Labels = maps.Clone(c.Labels)
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	want.Labels[fleetv1alpha1.FleetLabel] = mc.m.Namespace()
	want.Spec.SecretRef = fleetv1alpha1.SecretReference{
		Namespace: claim.Source.Namespace, Name: claim.Source.Name, Format: fleetv1alpha1.RegistrationFormat(claim.Source.Format),
	}
	if !exists {
		if err := mc.client.Create(ctx, want); err != nil {
			return ignoreStale(err)
		}
	} else if !equality.Semantic.DeepEqual(obj.Labels, want.Labels) || obj.Spec != want.Spec {
		if err := mc.client.Update(ctx, want); err != nil {
			return ignoreStale(err)
		}
	}

	before := want.Status.DeepCopy()
	wasExpiring := meta.IsStatusConditionTrue(before.Conditions, fleetv1alpha1.ConditionCredentialsExpiring)
	transitions := len(want.Status.RecentTransitions)
	mc.setStatus(ctx, c, &want.Status)
	mc.setDrain(want.Spec.Maintenance, c.Name, &want.Status)
	// The registry sends no event for a probe that succeeds like the one
	// before: LastProbeTime is refreshed on this schedule instead, unless
	// replicas share the fleet: then the owner's Lease says the status is
	// current, and it is written only when it changes.
	var refresh reconcile.Result
	if want.Status.Replica == "" {
		refresh.RequeueAfter = mc.probeTimeRefresh
	}
	if mc.statusUnchanged(before, &want.Status) {
		return refresh, nil
	}
	if err := mc.client.Status().Update(ctx, want); err != nil {
		return ignoreStale(err)
	}
	if len(want.Status.RecentTransitions) > transitions || !exists {
		mc.recordTransition(want, before.State)
	}
	if before.Replica != want.Status.Replica && before.Replica != "" && want.Status.Replica != "" {
		mc.recorder.Eventf(want, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonMoved, "Move", "replica %s owns the member (was %s)", want.Status.Replica, before.Replica)
	}
	if expiring := meta.FindStatusCondition(want.Status.Conditions, fleetv1alpha1.ConditionCredentialsExpiring); expiring != nil && expiring.Status == metav1.ConditionTrue && !wasExpiring {
		mc.recorder.Eventf(want, nil, corev1.EventTypeWarning, expiring.Reason, "CheckCredentials", expiring.Message)
	}
	return refresh, nil
}

// recordTransition makes the state transition a status write recorded an
// Event: one per transition, the first included.
func (mc *memberClusters) recordTransition(obj *fleetv1alpha1.MemberCluster, from fleetv1alpha1.MemberState) {
	last := obj.Status.RecentTransitions[len(obj.Status.RecentTransitions)-1]
	eventType := corev1.EventTypeNormal
	switch last.State {
	case fleetv1alpha1.MemberStateUnhealthy, fleetv1alpha1.MemberStateDisconnected:
		eventType = corev1.EventTypeWarning
	case fleetv1alpha1.MemberStatePending:
		if last.Reason != string(fleetv1alpha1.MemberStatePending) {
			eventType = corev1.EventTypeWarning // refused, or a name conflict
		}
	}
	note := transitionNotes[last.Reason]
	if last.Reason == registry.ReasonDuplicateCluster {
		note = "Pending: " + meta.FindStatusCondition(obj.Status.Conditions, fleetv1alpha1.ConditionReady).Message
	}
	if note == "" {
		note = fmt.Sprintf("%s (%s)", last.State, last.Reason)
	}
	if from != "" {
		note += fmt.Sprintf(" (was %s)", from)
	}
	mc.recorder.Eventf(obj, nil, eventType, last.Reason, "StateChanged", note)
}

// transitionNotes say, by a transition's reason, the state and what
// happened.
var transitionNotes = map[string]string{
	string(fleetv1alpha1.MemberStatePending):      "Pending: registered, the member waits to be started",
	string(fleetv1alpha1.MemberStateConnecting):   "Connecting: the member's cache is starting",
	string(fleetv1alpha1.MemberStateReady):        "Ready: the member's cache is synced and its probes pass",
	string(fleetv1alpha1.MemberStateUnhealthy):    "Unhealthy: the member's probes fail; its work is held",
	string(fleetv1alpha1.MemberStateDisconnected): "Disconnected: the member's probes failed for too long; its cluster is torn down until a probe succeeds",
	fleetv1alpha1.ReasonCredentialsRefused:        "Pending: the kubeconfig is refused (see the CredentialsAccepted condition)",
	registry.ReasonClusterNameConflict:            "Pending: another registration claims this name (see the Ready condition)",
}

// ignoreStale drops a write that lost to a newer version, or a create
// that finds the object there: the cache was behind, which is no failure,
// and the newer version's event brings the MemberCluster back.
func ignoreStale(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// ours reports whether obj belongs to this manager's fleet. A MemberCluster
// without a fleet label, written before there was one, is adopted when this
// fleet registers its name.
func (mc *memberClusters) ours(obj *fleetv1alpha1.MemberCluster, registered bool) bool {
	fleet, labelled := obj.Labels[fleetv1alpha1.FleetLabel]
	if !labelled {
		return registered
	}
	return fleet == mc.m.Namespace()
}

// setStatus fills status from c, its registration and member state, and
// from the engager.
// setDrain shows where the drain of member stands while its maintenance
// is Drain, as the Propagation controller publishes it.
func (mc *memberClusters) setDrain(maintenance fleetv1alpha1.MaintenanceMode, member string, status *fleetv1alpha1.MemberClusterStatus) {
	if maintenance != fleetv1alpha1.MaintenanceDrain || mc.drains == nil {
		status.Drain = nil
		meta.RemoveStatusCondition(&status.Conditions, fleetv1alpha1.ConditionDrained)
		return
	}
	drained := metav1.Condition{Type: fleetv1alpha1.ConditionDrained, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonDraining, ObservedGeneration: status.ObservedGeneration}
	d, ok := mc.drains.Get(member)
	switch {
	case !ok:
		d.Message = "waiting for the Propagation controller to report the member's copies"
	case d.Remaining == 0:
		drained.Status, drained.Reason, d.Message = metav1.ConditionTrue, fleetv1alpha1.ConditionDrained, "no Propagation's copies remain in the member"
	}
	drained.Message = d.Message
	status.Drain = &d
	meta.SetStatusCondition(&status.Conditions, drained)
}

func (mc *memberClusters) setStatus(ctx context.Context, c *registry.Cluster, status *fleetv1alpha1.MemberClusterStatus) {
	now := metav1.Now()
	status.Replica = mc.m.ReplicaName()
	refusal, probe := c.Refusal, c.Probe
	probed := probe != nil
	if c.ClusterID != "" {
		status.ClusterID = c.ClusterID
	}
	if c.ProbedVersion != "" {
		status.ObservedSecretVersion = c.ProbedVersion
	}
	duplicate := refusal != nil && refusal.Reason == registry.ReasonDuplicateCluster
	switch {
	case refusal != nil && (refusal.Reason == registry.ReasonClusterNameConflict || duplicate):
		status.SetState(fleetv1alpha1.MemberStatePending, refusal.Reason, now)
	case refusal != nil:
		status.SetState(fleetv1alpha1.MemberStatePending, fleetv1alpha1.ReasonCredentialsRefused, now)
	default:
		status.SetState(fleetv1alpha1.MemberState(c.State), string(c.State), now)
	}

	accepted := metav1.Condition{Type: fleetv1alpha1.ConditionCredentialsAccepted, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonAccepted, Message: "the kubeconfig meets the policy"}
	switch {
	case duplicate:
		// Its kubeconfig is not at fault: the Ready condition says why.
	case refusal != nil:
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, refusal.Reason, refusal.Message
	case probed && apierrors.IsUnauthorized(probe.Err):
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized, "the member refused the credentials (401)"
	case probed && apierrors.IsForbidden(probe.Err):
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonForbidden, "the credentials may not review themselves (403)"
	}
	meta.SetStatusCondition(&status.Conditions, accepted)

	healthy := metav1.Condition{Type: fleetv1alpha1.ConditionHealthy, Status: metav1.ConditionUnknown, Reason: fleetv1alpha1.ReasonNotProbed, Message: "not probed yet"}
	status.LastError = ""
	if probed {
		status.LastProbeTime = &metav1.Time{Time: probe.Time}
		status.ConsecutiveFailures = int32(probe.ConsecutiveFailures)
		if probe.Err == nil {
			status.LastProbeResult = fleetv1alpha1.ProbeResultSuccess
			healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonProbeSucceeded, "the last probe succeeded"
		} else {
			status.LastProbeResult = fleetv1alpha1.ProbeResultFailure
			status.LastError = truncate(member.SafeError(probe.Err), fleetv1alpha1.MaxLastErrorLength)
			healthy.Status, healthy.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonProbeFailed
			healthy.Message = fmt.Sprintf("%d probes in a row failed", probe.ConsecutiveFailures)
		}
	}
	meta.SetStatusCondition(&status.Conditions, healthy)

	ready := metav1.Condition{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: string(status.State), Message: "the member is " + string(status.State)}
	switch {
	case duplicate:
		ready.Reason, ready.Message = refusal.Reason, refusal.Message
	case status.State == fleetv1alpha1.MemberStateReady:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonEngaged, "the member is engaged and healthy"
	}
	meta.SetStatusCondition(&status.Conditions, ready)

	if mc.credentials != nil {
		creds := mc.credentialsOf(c)
		status.Credentials = credentialStatus(creds)
		meta.SetStatusCondition(&status.Conditions, expiringCondition(creds))
	} else {
		status.Credentials = nil
		meta.RemoveStatusCondition(&status.Conditions, fleetv1alpha1.ConditionCredentialsExpiring)
	}
	var owed []fleetv1alpha1.OwedRemoval
	if mc.owed != nil {
		owed, _ = mc.owed.Get(c.Name)
	}
	status.OwedRemovals, status.OwedRemovalCount = slices.Clone(owed[:min(len(owed), fleetv1alpha1.MaxOwedRemovals)]), int32(len(owed))

	status.ServerVersion = mc.serverVersion(ctx, c.Name, c.Accepted() && c.State == fleetv1alpha1.MemberStateReady)
	status.EngagedControllers, status.ControllerConditions = nil, mc.controllerConditions(c.Name, status.ControllerConditions, now)
	for _, c := range status.ControllerConditions {
		if c.Status == metav1.ConditionTrue {
			status.EngagedControllers = append(status.EngagedControllers, c.Name)
		}
	}
}

// credentialsOf returns what is published of the credential of c's
// accepted kubeconfig, nil before it is.
func (mc *memberClusters) credentialsOf(c *registry.Cluster) *registry.Credentials {
	_, generation, accepted := c.Registration()
	creds, published := mc.credentials.Get(c.Name)
	if !accepted || !published || creds.Generation != generation {
		return nil
	}
	return &creds
}

// credentialStatus describes creds, which may be nil, in the status.
func credentialStatus(creds *registry.Credentials) *fleetv1alpha1.CredentialStatus {
	if creds == nil {
		return nil
	}
	s := &fleetv1alpha1.CredentialStatus{
		Type:             fleetv1alpha1.CredentialType(creds.Type),
		Renewable:        creds.Renewable,
		LastRenewalError: truncate(creds.RenewalError, fleetv1alpha1.MaxLastErrorLength),
	}
	if !creds.Expiry.IsZero() {
		s.ExpirationTime = &metav1.Time{Time: creds.Expiry}
	}
	if !creds.LastRenewal.IsZero() {
		s.LastRenewalTime = &metav1.Time{Time: creds.LastRenewal}
	}
	return s
}

// expiringCondition is the CredentialsExpiring condition for creds, which
// may be nil.
func expiringCondition(creds *registry.Credentials) metav1.Condition {
	c := metav1.Condition{Type: fleetv1alpha1.ConditionCredentialsExpiring, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonNoExpiry, Message: "the credential has no expiry the manager can read"}
	switch {
	case creds == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, fleetv1alpha1.ReasonPending, "the credential has not been read yet"
	case creds.Expiry.IsZero():
	case creds.Expired:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonExpired, "the credential expired at "+creds.Expiry.UTC().Format(time.RFC3339)
	case creds.Expiring:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonExpiring, "the credential expires at "+creds.Expiry.UTC().Format(time.RFC3339)
		if creds.RenewalError != "" {
			c.Message += "; renewing it failed: " + creds.RenewalError
		} else if !creds.Renewable {
			c.Message += " and the manager cannot renew it: register the member again"
		}
	default:
		c.Reason, c.Message = fleetv1alpha1.ReasonValid, "the credential expires at "+creds.Expiry.UTC().Format(time.RFC3339)
		if creds.Renewable {
			c.Message += "; the manager renews it before"
		}
	}
	c.Message = truncate(c.Message, fleetv1alpha1.MaxLastErrorLength)
	return c
}

// controllerConditions says, per fleet controller, whether it works with
// the member, keeping the transition time of unchanged conditions.
func (mc *memberClusters) controllerConditions(name string, old []fleetv1alpha1.ControllerCondition, now metav1.Time) []fleetv1alpha1.ControllerCondition {
	var out []fleetv1alpha1.ControllerCondition
	for _, e := range mc.m.Engagements(name) {
		c := fleetv1alpha1.ControllerCondition{Name: e.Aware, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonEngaged, LastTransitionTime: now}
		if !e.Engaged {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonEngageFailed, "not engaged yet"
			if e.Err != nil {
				c.Message = truncate(member.SafeError(e.Err), fleetv1alpha1.MaxLastErrorLength)
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
// connection while the member is Ready. The answer is read up to
// maxVersionBytes and cut to the length the API allows.
func (mc *memberClusters) serverVersion(ctx context.Context, name string, ready bool) string {
	mc.mu.Lock()
	gitVersion, known := mc.versions[name]
	mc.mu.Unlock()
	if known || !ready {
		return gitVersion
	}
	cl, err := mc.m.GetCluster(ctx, name)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, mc.m.MemberHealth().Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cl.GetConfig().Host, "/")+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := cl.GetHTTPClient().Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	gitVersion = readGitVersion(resp.Body)
	mc.mu.Lock()
	mc.versions[name] = gitVersion
	mc.mu.Unlock()
	return gitVersion
}

// readGitVersion reads the gitVersion of a /version answer, at most
// maxVersionBytes of it, cut to the length the API allows; "" if it is not
// one.
func readGitVersion(body io.Reader) string {
	var info version.Info
	if json.NewDecoder(io.LimitReader(body, maxVersionBytes)).Decode(&info) != nil {
		return ""
	}
	return truncate(info.GitVersion, fleetv1alpha1.MaxServerVersionLength)
}

func (mc *memberClusters) forget(name string) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.versions, name)
}

// statusUnchanged reports whether after differs from before, the status
// last written, at most in a LastProbeTime that is still fresh, or, when
// replicas share the fleet, at most in LastProbeTime.
func (mc *memberClusters) statusUnchanged(before, after *fleetv1alpha1.MemberClusterStatus) bool {
	a := after.DeepCopy()
	if before.LastProbeTime != nil && a.LastProbeTime != nil && (a.Replica != "" || a.LastProbeTime.Sub(before.LastProbeTime.Time) < mc.probeTimeRefresh) {
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
