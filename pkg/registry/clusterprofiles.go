package registry

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
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

// execExtension is the cluster extension client-go hands an exec plugin
// as its cluster config, when the plugin asks for cluster information.
const execExtension = "client.authentication.k8s.io/exec"

// ClusterProfiles selects the ClusterProfiles that register clusters.
type ClusterProfiles struct {
	// Namespaces whose ClusterProfiles are read; none: every namespace.
	Namespaces []string
	// Providers are the access providers of the provider file
	// (access.NewFromFile). A ClusterProfile registers a cluster only if
	// it lists one of them; the first the file names wins.
	Providers *access.Config
	// Skip, if set, reports the ClusterProfiles not to read, such as those
	// this manager publishes itself.
	Skip func(*inventoryv1alpha1.ClusterProfile) bool
}

// addClusterProfiles reads the ClusterProfiles profiles selects into
// claims of r, with a cache of its own, on every replica, as
// NewWithSecrets does for Secrets. Each registers the cluster
// <namespace>.<name>, labelled with the profile's labels, whose kubeconfig
// is the profile's access provider with the provider file's exec plugin.
func addClusterProfiles(mgr manager.Manager, r *Registry, profiles ClusterProfiles, workers int) error {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: namespaces(profiles.Namespaces),
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the ClusterProfile cache: %w", err)
	}
	reader := &profileReader{registry: r, opts: profiles, profiles: c, recorder: mgr.GetEventRecorder("fleet-manager")}
	src := newRegistrationSource(c, &inventoryv1alpha1.ClusterProfile{}, "ClusterProfiles", func(client.Object) bool { return true })
	return addRegistrationSource(mgr, r, ClusterProfileFormat, reader, src, workers)
}

// profileReader turns ClusterProfiles into claims.
type profileReader struct {
	registry *Registry
	opts     ClusterProfiles
	profiles client.Reader
	recorder events.EventRecorder
	locks    keyLocks
}

// Reconcile reads a ClusterProfile from the cache and records its claim,
// or withdraws it.
func (r *profileReader) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer r.locks.lock(req.NamespacedName)()
	src := Source{Format: ClusterProfileFormat, NamespacedName: req.NamespacedName}
	cp := &inventoryv1alpha1.ClusterProfile{}
	if found, err := getOrWithdraw(ctx, r.profiles, req.NamespacedName, cp, r.registry, src); !found {
		return reconcile.Result{}, err
	}
	if !cp.DeletionTimestamp.IsZero() || (r.opts.Skip != nil && r.opts.Skip(cp)) || !r.offered(cp) {
		r.registry.withdraw(src)
		return reconcile.Result{}, nil
	}
	log := logf.FromContext(ctx).WithValues("clusterProfile", req.NamespacedName)
	name := cp.Namespace + "." + cp.Name
	if err := checkName(name, false); err != nil {
		log.Info("Registration refused", "reason", ReasonInvalidClusterName)
		r.recorder.Eventf(cp, nil, corev1.EventTypeWarning, ReasonInvalidClusterName, "Register", "%s", err.Error())
		r.registry.withdraw(src)
		return reconcile.Result{}, nil
	}
	c := Claim{Source: src, Labels: maps.Clone(cp.Labels)}
	var err error
	if c.kubeconfig, err = profileKubeconfig(cp, r.opts.Providers); err != nil {
		c.Refusal = &kubeconfig.RefusedError{Reason: ReasonAccessProviderInvalid, Message: kubeconfig.Scrub(err)}
	}
	if r.registry.claim(name, c) {
		reportTaken(log, r.recorder, cp, name)
	}
	return reconcile.Result{}, nil
}

// offered reports whether cp lists an access provider of the provider
// file: a profile that lists none is not for this manager.
func (r *profileReader) offered(cp *inventoryv1alpha1.ClusterProfile) bool {
	listed := map[string]bool{}
	for _, p := range cp.Status.AccessProviders {
		listed[p.Name] = true
	}
	for _, p := range cp.Status.CredentialProviders {
		listed[p.Name] = true
	}
	return slices.ContainsFunc(r.opts.Providers.Providers, func(p access.Provider) bool { return listed[p.Name] })
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

// profileKubeconfig returns the kubeconfig of cp's access provider as the
// module's access.Config builds it: the provider's server, CA and proxy,
// and the provider file's exec plugin, with the profile's extensions as
// the KEP passes them. It is then checked by the kubeconfig policy like
// any other.
func profileKubeconfig(cp *inventoryv1alpha1.ClusterProfile, providers *access.Config) ([]byte, error) {
	rc, err := providers.BuildConfigFromCP(cp)
	if err != nil {
		return nil, err
	}
	return kubeconfigOf(rc)
}

// kubeconfigOf writes the kubeconfig of rc, a rest.Config with a server,
// a CA, perhaps a proxy, and an exec plugin.
func kubeconfigOf(rc *rest.Config) ([]byte, error) {
	cl := &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	if rc.Proxy != nil {
		proxy, err := rc.Proxy(&http.Request{})
		if err != nil {
			return nil, fmt.Errorf("proxy-url: %w", err)
		}
		if proxy != nil {
			cl.ProxyURL = proxy.String()
		}
	}
	user := &clientcmdapi.AuthInfo{}
	if rc.ExecProvider != nil {
		user.Exec = rc.ExecProvider.DeepCopy()
		if cfg := user.Exec.Config; cfg != nil {
			cl.Extensions = map[string]runtime.Object{execExtension: cfg}
			user.Exec.Config = nil
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["member"] = cl
	kc.AuthInfos["member"] = user
	kc.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "member"}
	kc.CurrentContext = "member"
	return clientcmd.Write(*kc)
}
