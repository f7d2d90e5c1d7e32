package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	inventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// ClusterProfileFormat names the registrations read from ClusterProfiles
// of SIG-Multicluster's Cluster Inventory API.
const ClusterProfileFormat = "clusterprofile"

// ReasonAccessProviderInvalid refuses a ClusterProfile whose access
// provider cannot be turned into a kubeconfig.
const ReasonAccessProviderInvalid = "AccessProviderInvalid"

// AllNamespaces, as one of ClusterProfiles.Namespaces, reads the
// ClusterProfiles of every namespace.
const AllNamespaces = "*"

// PublishedClusterManager is the cluster manager of the ClusterProfiles
// fleet-manager publishes, in spec.clusterManager.name and the
// x-k8s.io/cluster-manager label. No fleet reads them, whichever fleet
// published them: two fleets reading each other's would register each
// other's members again and again, as <namespace>.<name>,
// <namespace>.<namespace>.<name>, and so on.
const PublishedClusterManager = "fleet-manager"

// execExtension is the cluster extension client-go hands an exec plugin
// as its cluster config, when the plugin asks for cluster information.
const execExtension = "client.authentication.k8s.io/exec"

// ClusterProfiles selects the ClusterProfiles that register clusters.
//
// Whoever writes a ClusterProfile's status chooses the server that the
// credentials of its cluster <namespace>.<name> are sent to: writing
// ClusterProfile status in a namespace read is as trusted as writing the
// fleet namespace's Secrets.
type ClusterProfiles struct {
	// Namespaces whose ClusterProfiles are read; AllNamespaces reads
	// every namespace. None by default: no ClusterProfile is read.
	Namespaces []string
	// Providers are the access providers of the provider file
	// (access.NewFromFile). A ClusterProfile registers a cluster only if
	// it lists one of them; the first the file names wins.
	Providers *access.Config
}

// addClusterProfiles reads the ClusterProfiles profiles selects into
// claims of r, with a cache of its own, on every replica, as
// NewWithSecrets does for Secrets. Each registers the cluster
// <namespace>.<name>, labelled with the profile's labels, whose kubeconfig
// is the profile's access provider with the provider file's exec plugin.
// With no namespace named, it reads none.
func addClusterProfiles(mgr manager.Manager, r *Registry, profiles ClusterProfiles, workers int) error {
	if len(profiles.Namespaces) == 0 {
		mgr.GetLogger().Info("Reading no ClusterProfiles: no namespace is named to read them from", "format", ClusterProfileFormat)
		r.markSynced(ClusterProfileFormat)
		return nil
	}
	var namespaces map[string]cache.Config
	if !slices.Contains(profiles.Namespaces, AllNamespaces) {
		namespaces = map[string]cache.Config{}
		for _, ns := range profiles.Namespaces {
			namespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the ClusterProfile cache: %w", err)
	}
	reader := &profileReader{registry: r, providers: profiles.Providers, profiles: c, recorder: mgr.GetEventRecorder("fleet-manager")}
	src := newRegistrationSource(c, &inventoryv1alpha1.ClusterProfile{}, "ClusterProfiles", func(client.Object) bool { return true })
	return addRegistrationSource(mgr, r, ClusterProfileFormat, reader, src, workers)
}

// profileReader turns ClusterProfiles into claims.
type profileReader struct {
	registry  *Registry
	providers *access.Config
	profiles  client.Reader
	recorder  events.EventRecorder
	locks     keyLocks
}

// Reconcile reads a ClusterProfile from the cache and records its claim,
// or withdraws it.
func (r *profileReader) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer r.locks.lock(req.NamespacedName)()
	log := logf.FromContext(ctx).WithValues("clusterProfile", req.NamespacedName)
	src := Source{Format: ClusterProfileFormat, NamespacedName: req.NamespacedName}
	cp := &inventoryv1alpha1.ClusterProfile{}
	if found, err := getOrWithdraw(ctx, r.profiles, req.NamespacedName, cp, r.registry, src); !found {
		return reconcile.Result{}, err
	}
	ap := accessProviderOf(cp, r.providers)
	if !cp.DeletionTimestamp.IsZero() || published(cp) || ap == nil {
		r.registry.withdraw(src)
		return reconcile.Result{}, nil
	}
	name := cp.Namespace + "." + cp.Name
	if err := checkName(name, false); err != nil {
		log.Info("Registration refused", "reason", ReasonInvalidClusterName)
		r.recorder.Eventf(cp, nil, corev1.EventTypeWarning, ReasonInvalidClusterName, "Register", "%s", err.Error())
		r.registry.withdraw(src)
		return reconcile.Result{}, nil
	}
	c := Claim{Source: src, Labels: maps.Clone(cp.Labels), Created: cp.CreationTimestamp.Time, Version: cp.ResourceVersion}
	var err error
	if c.kubeconfig, err = profileKubeconfig(cp, name, ap, r.providers); err != nil {
		c.Refusal = &kubeconfig.RefusedError{Reason: ReasonAccessProviderInvalid, Message: kubeconfig.Scrub(err)}
	}
	if r.registry.claim(name, c) {
		reportTaken(log, r.recorder, cp, name)
	}
	return reconcile.Result{}, nil
}

// published reports whether a fleet-manager published cp, whichever
// fleet it serves.
func published(cp *inventoryv1alpha1.ClusterProfile) bool {
	return cp.Labels[inventoryv1alpha1.LabelClusterManagerKey] == PublishedClusterManager || cp.Spec.ClusterManager.Name == PublishedClusterManager
}

// accessProviderOf returns the entry of cp for the first access provider
// of the provider file that cp lists, as the module's access package
// chooses it; nil when cp lists none, and so is not for this manager.
func accessProviderOf(cp *inventoryv1alpha1.ClusterProfile, providers *access.Config) *inventoryv1alpha1.AccessProvider {
	listed := map[string]*inventoryv1alpha1.AccessProvider{}
	for i, p := range cp.Status.CredentialProviders {
		listed[p.Name] = &cp.Status.CredentialProviders[i]
	}
	for i, p := range cp.Status.AccessProviders {
		listed[p.Name] = &cp.Status.AccessProviders[i]
	}
	for _, p := range providers.Providers {
		if ap, ok := listed[p.Name]; ok {
			return ap
		}
	}
	return nil
}

// keys lists the keys of every ClusterProfile in the cache.
func (r *profileReader) keys(ctx context.Context) ([]types.NamespacedName, error) {
	profiles := &inventoryv1alpha1.ClusterProfileList{}
	if err := r.profiles.List(ctx, profiles); err != nil {
		return nil, err
	}
	keys := make([]types.NamespacedName, len(profiles.Items))
	for i := range profiles.Items {
		keys[i] = client.ObjectKeyFromObject(&profiles.Items[i])
	}
	return keys, nil
}

// profileKubeconfig returns the kubeconfig of cluster name, registered by
// cp through its access provider entry ap: the entry's server, TLS server
// name, CA and proxy, and the provider file's exec plugin with the
// profile's extra arguments and environment as the module's access
// package adds them. The exec extension, which client-go hands the
// plugin, is the profile's with clusterName set to name: a profile cannot
// choose whose credentials its plugin fetches. The kubeconfig is then
// checked by the kubeconfig policy like any other.
func profileKubeconfig(cp *inventoryv1alpha1.ClusterProfile, name string, ap *inventoryv1alpha1.AccessProvider, providers *access.Config) ([]byte, error) {
	only := cp.DeepCopy()
	only.Status.AccessProviders, only.Status.CredentialProviders = []inventoryv1alpha1.AccessProvider{*ap}, nil
	rc, err := isolated(providers).BuildConfigFromCP(only)
	if err != nil {
		return nil, err
	}
	ext, err := execClusterConfig(rc.ExecProvider.Config, name)
	if err != nil {
		return nil, err
	}
	user := &clientcmdapi.AuthInfo{Exec: rc.ExecProvider.DeepCopy()}
	user.Exec.Config = nil
	// The access package adds the profile's variables in map order: sorted,
	// the kubeconfig is the same bytes on every read, and the pool, which
	// fingerprints them, does not rebuild the member.
	slices.SortStableFunc(user.Exec.Env, func(a, b clientcmdapi.ExecEnvVar) int { return strings.Compare(a.Name, b.Name) })
	kc := clientcmdapi.NewConfig()
	kc.Clusters["member"] = &clientcmdapi.Cluster{
		Server:                   ap.Cluster.Server,
		TLSServerName:            ap.Cluster.TLSServerName,
		CertificateAuthorityData: ap.Cluster.CertificateAuthorityData,
		ProxyURL:                 ap.Cluster.ProxyURL,
		Extensions:               map[string]runtime.Object{execExtension: &runtime.Unknown{Raw: ext, ContentType: runtime.ContentTypeJSON}},
	}
	kc.AuthInfos["member"] = user
	kc.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "member"}
	kc.CurrentContext = "member"
	return clientcmd.Write(*kc)
}

// isolated returns a copy of providers whose exec configs are copies:
// BuildConfigFromCP appends a profile's arguments and environment to the
// provider's own exec config, where every later profile would find them.
func isolated(providers *access.Config) *access.Config {
	out := &access.Config{Providers: slices.Clone(providers.Providers)}
	for i := range out.Providers {
		out.Providers[i].ExecConfig = out.Providers[i].ExecConfig.DeepCopy()
	}
	return out
}

// execClusterConfig returns the exec extension config, a JSON object, with
// clusterName set to name.
func execClusterConfig(config runtime.Object, name string) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if config != nil {
		raw, err := json.Marshal(config)
		if err != nil {
			return nil, fmt.Errorf("the exec extension: %w", err)
		}
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("the exec extension %s is not a JSON object", execExtension)
		}
	}
	fields["clusterName"], _ = json.Marshal(name)
	return json.Marshal(fields)
}
