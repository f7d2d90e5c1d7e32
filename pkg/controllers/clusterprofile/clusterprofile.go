package clusterprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ClusterManager is the cluster manager name of the profiles the
// controller publishes, in spec.clusterManager.name and the
// x-k8s.io/cluster-manager label. No fleet-manager reads such a profile
// back as a registration.
const ClusterManager = registry.PublishedClusterManager

// AccessProvider is the name of the access provider entry of a published
// profile: the member's server, TLS server name, CA and proxy, with no
// userinfo in a URL, and, as the exec plugin's cluster config,
// {"clusterName": <member>}. Never a credential: consumers bring their
// own plugin.
const AccessProvider = "fleet-manager"

// execExtension is the cluster extension client-go hands an exec plugin.
const execExtension = "client.authentication.k8s.io/exec"

// Published reports whether cp was published by the fleet of namespace
// fleetNamespace: a manager that reads ClusterProfiles skips its own.
func Published(cp *inventoryv1alpha1.ClusterProfile, fleetNamespace string) bool {
	return cp.Labels[inventoryv1alpha1.LabelClusterManagerKey] == ClusterManager && cp.Labels[fleetv1alpha1.FleetLabel] == fleetNamespace
}

// profiles publishes a ClusterProfile per member of its fleet.
type profiles struct {
	m         *fleet.Manager
	client    client.Client
	namespace string
	interval  time.Duration

	mu sync.Mutex
	// unread holds, per member, why its ClusterProperty objects could
	// not be read last time, so that each cause is logged once.
	unread map[string]string
	// cut holds, per member, how many of its ClusterProperty objects
	// were left out of its profile last time, so that it is logged once.
	cut map[string]int
}

// ControllerName is the controller's name in the --controllers table.
const ControllerName = "clusterprofile"

// DefaultWorkers is how many ClusterProfiles are written at once by
// default.
const DefaultWorkers = 1

// Options configure the ClusterProfile controller.
type Options struct {
	// Namespace is where the ClusterProfiles are published; it must
	// exist. Default: the fleet namespace.
	Namespace string
	// Workers is how many ClusterProfiles are written at once. Default:
	// DefaultWorkers.
	Workers int
	// Client writes ClusterProfiles. Default: the manager's client.
	Client client.Client
	// PropertiesInterval is how often each member's ClusterProperty
	// objects are read again. Default: DefaultPropertiesInterval.
	PropertiesInterval time.Duration
}

// DefaultPropertiesInterval is how often a member's ClusterProperty
// objects are read by default: KEP-4322 asks for at most one profile
// update per 30 s, and properties are meant to change rarely.
const DefaultPropertiesInterval = time.Minute

// Add adds the controller to m, configured by opts: it publishes a
// ClusterProfile per member. The ClusterProfile CRD must exist.
func Add(m *fleet.Manager, opts Options) error {
	if err := inventoryv1alpha1.AddToScheme(m.GetScheme()); err != nil {
		return err
	}
	if opts.Namespace == "" {
		opts.Namespace = m.Namespace()
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Client == nil {
		opts.Client = m.GetClient()
	}
	if opts.PropertiesInterval <= 0 {
		opts.PropertiesInterval = DefaultPropertiesInterval
	}
	namespace := opts.Namespace
	p := &profiles{m: m, client: opts.Client, namespace: namespace, interval: opts.PropertiesInterval, unread: map[string]string{}, cut: map[string]int{}}
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return builder.ControllerManagedBy(m.Manager).
		Named("fleet-clusterprofiles").
		WatchesRawSource(m.Registry().Source()).
		Watches(&fleetv1alpha1.MemberCluster{}, byName).
		Watches(&inventoryv1alpha1.ClusterProfile{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetNamespace() != namespace || !Published(o.(*inventoryv1alpha1.ClusterProfile), m.Namespace()) {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Complete(p)
}

// Reconcile keeps the profile of the cluster name req.Name.
func (p *profiles) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	select {
	case <-p.m.Registry().Synced():
	case <-ctx.Done():
		return reconcile.Result{}, nil
	}
	name := req.Name
	if !p.m.Owns(name) {
		return reconcile.Result{}, nil // its owner writes it
	}
	cp := &inventoryv1alpha1.ClusterProfile{}
	err := p.client.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: name}, cp)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	exists := err == nil
	if exists && !Published(cp, p.m.Namespace()) {
		return reconcile.Result{}, nil // another manager's, or another fleet's
	}
	c, registered := p.m.Registry().Get(name)
	if !registered {
		if exists {
			return reconcile.Result{}, client.IgnoreNotFound(p.client.Delete(ctx, cp, client.Preconditions{UID: &cp.UID}))
		}
		return reconcile.Result{}, nil
	}
	// A refused cluster keeps its profile until its name is no longer
	// registered, so that consumers of the inventory see it unhealthy, not
	// gone; but no access provider, since no kubeconfig of it is accepted.
	var providers []inventoryv1alpha1.AccessProvider
	if reg, _, accepted := c.Registration(); accepted {
		ap, err := accessProvider(name, reg.Kubeconfig)
		if err != nil {
			return reconcile.Result{}, nil // the pool refuses it too, and the refusal comes as the next event
		}
		providers = []inventoryv1alpha1.AccessProvider{ap}
	}

	want := cp.DeepCopy()
	want.Namespace, want.Name = p.namespace, name
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	setLabels(want, c.Labels)
	want.Labels[inventoryv1alpha1.LabelClusterManagerKey] = ClusterManager
	want.Labels[fleetv1alpha1.FleetLabel] = p.m.Namespace()
	want.Spec = inventoryv1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: inventoryv1alpha1.ClusterManager{Name: ClusterManager}}
	if !exists {
		if err := p.client.Create(ctx, want); err != nil {
			return reconcile.Result{}, client.IgnoreAlreadyExists(err)
		}
	} else if !equality.Semantic.DeepEqual(cp.Labels, want.Labels) || !equality.Semantic.DeepEqual(cp.Annotations, want.Annotations) || !equality.Semantic.DeepEqual(cp.Spec, want.Spec) {
		if err := p.client.Update(ctx, want); err != nil {
			return reconcile.Result{}, ignoreConflict(err)
		}
	}

	before := want.Status.DeepCopy()
	p.setStatus(ctx, c, providers, &want.Status)
	again := reconcile.Result{}
	if providers != nil {
		again.RequeueAfter = p.interval // ClusterProperty objects are read, not watched
	}
	if equality.Semantic.DeepEqual(before, &want.Status) {
		return again, nil
	}
	return again, ignoreConflict(p.client.Status().Update(ctx, want))
}

// PublishedLabelsAnnotation lists, comma-separated, the keys of the
// member's labels the controller last set on a profile, so that a label
// taken off the member is taken off its profile, and labels others set
// on the profile are left alone.
const PublishedLabelsAnnotation = "fleet.fleetkube.io/published-labels"

// setLabels makes cp's labels carry the member's labels, where KEP-4322
// puts what a consumer selects clusters by; labels the controller set
// before and the member no longer has are taken off. The registration
// formats' own marker labels and the fleet's labels are not the
// cluster's, and are not published.
func setLabels(cp *inventoryv1alpha1.ClusterProfile, member map[string]string) {
	for _, key := range strings.Split(cp.Annotations[PublishedLabelsAnnotation], ",") {
		if _, still := member[key]; key != "" && !still {
			delete(cp.Labels, key)
		}
	}
	var published []string
	for _, key := range slices.Sorted(maps.Keys(member)) {
		if registrationMarker(key) {
			continue
		}
		cp.Labels[key] = member[key]
		published = append(published, key)
	}
	if len(published) == 0 {
		delete(cp.Annotations, PublishedLabelsAnnotation)
		return
	}
	if cp.Annotations == nil {
		cp.Annotations = map[string]string{}
	}
	cp.Annotations[PublishedLabelsAnnotation] = strings.Join(published, ",")
}

// registrationMarker reports whether the label key marks a registration
// for a format, or belongs to the fleet or to the cluster manager label,
// rather than describing the cluster.
func registrationMarker(key string) bool {
	switch key {
	case registry.MulticlusterRuntimeLabel, registry.ArgoCDSecretTypeLabel, inventoryv1alpha1.LabelClusterManagerKey:
		return true
	}
	return strings.HasPrefix(key, "fleet.fleetkube.io/")
}

// setStatus sets status from the cluster c, its access providers and its
// MemberCluster.
func (p *profiles) setStatus(ctx context.Context, c *registry.Cluster, providers []inventoryv1alpha1.AccessProvider, status *inventoryv1alpha1.ClusterProfileStatus) {
	healthy := metav1.Condition{Type: inventoryv1alpha1.ClusterConditionControlPlaneHealthy, Status: metav1.ConditionUnknown, Reason: "NotProbed", Message: "fleet-manager has not probed the cluster yet"}
	switch {
	case c.Refusal != nil:
		// The refusal's message stays on the MemberCluster: it may name
		// what the registration holds, which inventory readers need not see.
		healthy.Reason = c.Refusal.Reason
		healthy.Message = "fleet-manager refused the cluster's registration, and does not probe it; its MemberCluster says why"
	case c.State == fleetv1alpha1.MemberStateReady:
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionTrue, "ProbeSucceeded", "fleet-manager's last probe succeeded"
	case c.State == fleetv1alpha1.MemberStateUnhealthy || c.State == fleetv1alpha1.MemberStateDisconnected:
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, string(c.State), fmt.Sprintf("fleet-manager's probes fail: the member is %s", c.State)
	}
	if status.Conditions == nil {
		status.Conditions = []metav1.Condition{}
	}
	meta.SetStatusCondition(&status.Conditions, healthy)

	mc := &fleetv1alpha1.MemberCluster{}
	if err := p.client.Get(ctx, types.NamespacedName{Name: c.Name}, mc); err == nil && mc.Status.ServerVersion != "" {
		status.Version.Kubernetes = mc.Status.ServerVersion
	}
	if len(providers) > 0 {
		if properties, read := p.clusterProperties(ctx, c.Name); read {
			status.Properties = keepObserved(status.Properties, properties)
		}
	}
	status.AccessProviders = providers
}

// ClusterPropertyGroupVersion is where KEP-2149's ClusterProperty objects
// live in a member: cluster-scoped, each a name and spec.value.
var ClusterPropertyGroupVersion = schema.GroupVersion{Group: "about.k8s.io", Version: "v1alpha1"}

// clusterProperties returns the member's ClusterProperty objects as
// properties, by their names and values unchanged, as KEP-4322 asks, and
// whether they were read: none when the member has no ClusterProperty
// API. When they cannot be read (the member is not running here, the
// read is forbidden or fails), read is false and the published
// properties are kept: a doubt removes nothing. A property whose value
// the ClusterProfile API would refuse (empty, over 1,024 bytes) is left
// out, so it cannot stop the rest from being published.
func (p *profiles) clusterProperties(ctx context.Context, name string) (_ []inventoryv1alpha1.Property, read bool) {
	cl, err := p.m.GetCluster(ctx, name)
	if err != nil {
		return nil, false
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ClusterPropertyGroupVersion.WithKind("ClusterPropertyList"))
	err = cl.GetAPIReader().List(ctx, list)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		p.readable(ctx, name, "")
		return []inventoryv1alpha1.Property{}, true
	case err != nil:
		p.readable(ctx, name, unreadReason(err))
		return nil, false
	}
	p.readable(ctx, name, "")
	properties := make([]inventoryv1alpha1.Property, 0, len(list.Items))
	for _, item := range list.Items {
		value, _, _ := unstructured.NestedString(item.Object, "spec", "value")
		if value == "" || len(value) > maxPropertyValue || len(item.GetName()) > maxPropertyName {
			continue
		}
		properties = append(properties, inventoryv1alpha1.Property{Name: item.GetName(), Value: value})
	}
	slices.SortFunc(properties, func(a, b inventoryv1alpha1.Property) int { return strings.Compare(a.Name, b.Name) })
	return p.withinBudget(ctx, name, properties), true
}

// propertiesBudget bounds the bytes of a profile's properties, so that a
// member with many ClusterProperty objects cannot make its profile's
// status too large to write, and with it its health and access provider.
const propertiesBudget = 256 << 10

// withinBudget returns the first properties, by name, that fit
// propertiesBudget, and logs once per change how many were left out.
func (p *profiles) withinBudget(ctx context.Context, name string, properties []inventoryv1alpha1.Property) []inventoryv1alpha1.Property {
	size, n := 0, 0
	for _, prop := range properties {
		size += len(prop.Name) + len(prop.Value) + propertyOverhead
		if size > propertiesBudget {
			break
		}
		n++
	}
	left := len(properties) - n
	p.mu.Lock()
	before := p.cut[name]
	if left == 0 {
		delete(p.cut, name)
	} else {
		p.cut[name] = left
	}
	p.mu.Unlock()
	if left != before && left > 0 {
		logf.FromContext(ctx).Info("The member's ClusterProperty objects exceed the profile's budget; the first by name are published", "member", name, "published", n, "leftOut", left, "budgetBytes", propertiesBudget)
	}
	return properties[:n]
}

// propertyOverhead is what a property costs in a profile beside its name
// and value: its keys and its last observed time.
const propertyOverhead = 64

// The ClusterProfile API's bounds on a property.
const (
	maxPropertyName  = 253
	maxPropertyValue = 1024
)

// unreadReason names the class of a failed read, never its message,
// which may hold what the member's API server chose to say.
func unreadReason(err error) string {
	if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
		return string(reason)
	}
	return "ReadFailed"
}

// readable logs once per change why a member's ClusterProperty objects
// could not be read ("" when they could).
func (p *profiles) readable(ctx context.Context, name, reason string) {
	p.mu.Lock()
	before := p.unread[name]
	if reason == "" {
		delete(p.unread, name)
	} else {
		p.unread[name] = reason
	}
	p.mu.Unlock()
	if reason != "" && reason != before {
		logf.FromContext(ctx).Info("Cannot read the member's ClusterProperty objects; its published properties are kept", "member", name, "reason", reason)
	}
}

// keepObserved returns want with each property's last observed time kept
// from have when its value is the same, so that an unchanged property
// causes no write.
func keepObserved(have, want []inventoryv1alpha1.Property) []inventoryv1alpha1.Property {
	now := metav1.Now()
	for i := range want {
		want[i].LastObservedTime = now
		for _, h := range have {
			if h.Name == want[i].Name && h.Value == want[i].Value {
				want[i].LastObservedTime = h.LastObservedTime
			}
		}
	}
	return want
}

// accessProvider returns the access provider entry of member name: the
// server, TLS server name, CA and proxy of its kubeconfig's current
// context, each URL without its userinfo, and its name as the exec
// plugin's cluster config. Nothing else of the kubeconfig is published.
func accessProvider(name string, kc []byte) (inventoryv1alpha1.AccessProvider, error) {
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return inventoryv1alpha1.AccessProvider{}, err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return inventoryv1alpha1.AccessProvider{}, fmt.Errorf("no current context")
	}
	cl, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return inventoryv1alpha1.AccessProvider{}, fmt.Errorf("no cluster")
	}
	server, err := kubeconfig.WithoutUserinfo(cl.Server)
	if err != nil {
		return inventoryv1alpha1.AccessProvider{}, fmt.Errorf("server: %w", err)
	}
	proxy, err := kubeconfig.WithoutUserinfo(cl.ProxyURL)
	if err != nil {
		return inventoryv1alpha1.AccessProvider{}, fmt.Errorf("proxy-url: %w", err)
	}
	ext, err := json.Marshal(map[string]string{"clusterName": name})
	if err != nil {
		return inventoryv1alpha1.AccessProvider{}, err
	}
	return inventoryv1alpha1.AccessProvider{Name: AccessProvider, Cluster: clientcmdv1.Cluster{
		Server:                   server,
		TLSServerName:            cl.TLSServerName,
		CertificateAuthorityData: cl.CertificateAuthorityData,
		ProxyURL:                 proxy,
		Extensions:               []clientcmdv1.NamedExtension{{Name: execExtension, Extension: runtime.RawExtension{Raw: ext}}},
	}}, nil
}

// ignoreConflict drops a write that lost to a newer version: its event
// brings the profile back.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
