package mcprovider_test

// The envtest suite of multicluster-runtime's kubeconfig provider,
// ported from sigs.k8s.io/multicluster-runtime v0.24.1,
// providers/kubeconfig/provider_test.go (Copyright 2025 The Kubernetes
// Authors, Apache License 2.0), run against the fleet's provider. Its steps and Gomega assertions are MCR's; what had
// to change is marked "Adapted:".

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcluster "sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/mcprovider"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// The hub is MCR's 'local' cluster; the members its 'zoo', 'jungle' and
// 'island'.
var suite = &fleettest.Suite{MemberCount: 3}

func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }

// Adapted: the fleet reads multicluster-runtime's Secrets as the
// kubeconfig provider reads them by default (registry.MulticlusterRuntimeFormat:
// label sigs.k8s.io/multicluster-runtime-kubeconfig, key kubeconfig); MCR's
// test set a label and key of its own.
const kubeconfigSecretLabel = registry.MulticlusterRuntimeLabel
const kubeconfigSecretNamespace = "testing"
const kubeconfigSecretKey = registry.KubeconfigKey

// eventually is MCR's "10s" on a loaded two-core machine.
const eventually = "60s"

// startFleet starts a fleet reading multicluster-runtime's Secrets of
// namespace secrets, wrapped for multicluster-runtime, and returns the
// provider and the manager, not started.
func startFleet(t *testing.T, secrets string) (*mcprovider.Provider, mcmanager.Manager) {
	fleettest.CreateNamespace(t, suite.HubClient, secrets)
	f := suite.StartFleet(t, fleettest.FleetOptions{
		Deferred: true,
		Configure: func(o *fleet.Options) {
			o.SecretFormats = append(o.SecretFormats, registry.MulticlusterRuntimeFormat(secrets))
		},
	})
	provider := mcprovider.New(f.Manager, mcprovider.Options{})
	mgr, err := mcmanager.WithMultiCluster(f.Manager, provider)
	if err != nil {
		t.Fatal(err)
	}
	return provider, mgr
}

// start starts mgr until the test ends, and waits for it to stop then.
func start(t *testing.T, mgr mcmanager.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ignoreCanceled(mgr.Start(ctx)); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func TestProviderNamespace(t *testing.T) {
	t.Parallel()
	suite.Need(t)
	ctx := t.Context()
	localCli := suite.HubClient
	zooCli, jungleCli, islandCli := suite.MemberClients[0], suite.MemberClients[1], suite.MemberClients[2]
	zooCfg, jungleCfg, islandCfg := suite.Members[0].Config, suite.Members[1].Config, suite.Members[2].Config
	g := NewWithT(t)

	// Adapted: the fleet's manager, wrapped with mcmanager.WithMultiCluster,
	// replaces mcmanager.New and the provider's SetupWithManager; it also
	// creates the namespace.
	provider, mgr := startFleet(t, kubeconfigSecretNamespace)

	// Creating kubeconfig secrets in the local cluster
	g.Expect(createKubeconfigSecret(ctx, "zoo", zooCfg, localCli)).To(Succeed())
	g.Expect(createKubeconfigSecret(ctx, "jungle", jungleCfg, localCli)).To(Succeed())
	g.Expect(createKubeconfigSecret(ctx, "island", islandCfg, localCli)).To(Succeed())

	// Setting up the controller feeding the animals
	err := mcbuilder.ControllerManagedBy(mgr).
		Named("fleet-ns-configmap-controller").
		For(&corev1.ConfigMap{}).
		Complete(mcreconcile.Func(
			func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
				log := log.FromContext(ctx).WithValues("request", req.String())
				log.Info("Reconciling ConfigMap")

				cl, err := mgr.GetCluster(ctx, req.ClusterName)
				if err != nil {
					return reconcile.Result{}, fmt.Errorf("failed to get cluster: %w", err)
				}

				// Feed the animal.
				cm := &corev1.ConfigMap{}
				if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
					if apierrors.IsNotFound(err) {
						return reconcile.Result{}, nil
					}
					return reconcile.Result{}, fmt.Errorf("failed to get configmap: %w", err)
				}
				if cm.GetLabels()["type"] != "animal" {
					return reconcile.Result{}, nil
				}

				cm.Data = map[string]string{"stomach": "food"}
				if err := cl.GetClient().Update(ctx, cm); err != nil {
					return reconcile.Result{}, fmt.Errorf("failed to update configmap: %w", err)
				}

				return ctrl.Result{}, nil
			},
		))
	g.Expect(err).NotTo(HaveOccurred())

	// Adding an index to the provider clusters
	err = mgr.GetFieldIndexer().IndexField(ctx, &corev1.ConfigMap{}, "type", func(obj client.Object) []string {
		return []string{obj.GetLabels()["type"]}
	})
	g.Expect(err).NotTo(HaveOccurred())

	// Starting the provider, cluster, manager, and controller
	start(t, mgr)

	runtime.Must(client.IgnoreAlreadyExists(zooCli.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "zoo"}})))
	runtime.Must(client.IgnoreAlreadyExists(zooCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "zoo", Name: "elephant", Labels: map[string]string{"type": "animal"}}})))
	runtime.Must(client.IgnoreAlreadyExists(zooCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "zoo", Name: "lion", Labels: map[string]string{"type": "animal"}}})))
	runtime.Must(client.IgnoreAlreadyExists(zooCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "zoo", Name: "keeper", Labels: map[string]string{"type": "human"}}})))

	runtime.Must(client.IgnoreAlreadyExists(jungleCli.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jungle"}})))
	runtime.Must(client.IgnoreAlreadyExists(jungleCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jungle", Name: "monkey", Labels: map[string]string{"type": "animal"}}})))
	runtime.Must(client.IgnoreAlreadyExists(jungleCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jungle", Name: "tree", Labels: map[string]string{"type": "thing"}}})))
	runtime.Must(client.IgnoreAlreadyExists(jungleCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jungle", Name: "tarzan", Labels: map[string]string{"type": "human"}}})))

	runtime.Must(client.IgnoreAlreadyExists(islandCli.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "island"}})))
	runtime.Must(client.IgnoreAlreadyExists(islandCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "island", Name: "bird", Labels: map[string]string{"type": "animal"}}})))
	runtime.Must(client.IgnoreAlreadyExists(islandCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "island", Name: "stone", Labels: map[string]string{"type": "thing"}}})))
	runtime.Must(client.IgnoreAlreadyExists(islandCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "island", Name: "crusoe", Labels: map[string]string{"type": "human"}}})))

	// The Its run in order, as MCR's Ordered Describe runs them.
	t.Run("lists the clusters loaded from kubeconfig secrets", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(provider.ListClusters, eventually).Should(HaveLen(3))
	})

	t.Run("runs the reconciler for existing objects", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) string {
			lion := &corev1.ConfigMap{}
			err := zooCli.Get(ctx, client.ObjectKey{Namespace: "zoo", Name: "lion"}, lion)
			g.Expect(err).NotTo(HaveOccurred())
			return lion.Data["stomach"]
		}, eventually).Should(Equal("food"))
	})

	t.Run("runs the reconciler for new objects", func(t *testing.T) {
		g := NewWithT(t)
		// Creating a new configmap
		err := zooCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "zoo", Name: "tiger", Labels: map[string]string{"type": "animal"}}})
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) string {
			tiger := &corev1.ConfigMap{}
			err := zooCli.Get(ctx, client.ObjectKey{Namespace: "zoo", Name: "tiger"}, tiger)
			g.Expect(err).NotTo(HaveOccurred())
			return tiger.Data["stomach"]
		}, eventually).Should(Equal("food"))
	})

	t.Run("runs the reconciler for updated objects", func(t *testing.T) {
		g := NewWithT(t)
		updated := &corev1.ConfigMap{}
		// Emptying the elephant's stomach
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := zooCli.Get(ctx, client.ObjectKey{Namespace: "zoo", Name: "elephant"}, updated); err != nil {
				return err
			}
			updated.Data = map[string]string{}
			return zooCli.Update(ctx, updated)
		})
		g.Expect(err).NotTo(HaveOccurred())
		rv, err := strconv.ParseInt(updated.ResourceVersion, 10, 64)
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) int64 {
			elephant := &corev1.ConfigMap{}
			err := zooCli.Get(ctx, client.ObjectKey{Namespace: "zoo", Name: "elephant"}, elephant)
			g.Expect(err).NotTo(HaveOccurred())
			rv, err := strconv.ParseInt(elephant.ResourceVersion, 10, 64)
			g.Expect(err).NotTo(HaveOccurred())
			return rv
		}, eventually).Should(BeNumerically(">=", rv))

		g.Eventually(func(g Gomega) string {
			elephant := &corev1.ConfigMap{}
			err := zooCli.Get(ctx, client.ObjectKey{Namespace: "zoo", Name: "elephant"}, elephant)
			g.Expect(err).NotTo(HaveOccurred())
			return elephant.Data["stomach"]
		}, eventually).Should(Equal("food"))
	})

	t.Run("queries one cluster via a multi-cluster index", func(t *testing.T) {
		g := NewWithT(t)
		island, err := mgr.GetCluster(ctx, "island")
		g.Expect(err).NotTo(HaveOccurred())

		cms := &corev1.ConfigMapList{}
		err = island.GetCache().List(ctx, cms, client.MatchingFields{"type": "human"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cms.Items).To(HaveLen(1))
		g.Expect(cms.Items[0].Name).To(Equal("crusoe"))
		g.Expect(cms.Items[0].Namespace).To(Equal("island"))
	})

	t.Run("reconciles objects when the cluster is updated in kubeconfig secret", func(t *testing.T) {
		g := NewWithT(t)
		islandSecret := &corev1.Secret{}
		err := localCli.Get(ctx, client.ObjectKey{Name: "island", Namespace: kubeconfigSecretNamespace}, islandSecret)
		g.Expect(err).NotTo(HaveOccurred())

		kubeconfigData, err := createKubeConfig(jungleCfg)
		g.Expect(err).NotTo(HaveOccurred())

		islandSecret.Data = map[string][]byte{
			kubeconfigSecretKey: kubeconfigData,
		}
		err = localCli.Update(ctx, islandSecret)
		g.Expect(err).NotTo(HaveOccurred())

		err = jungleCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jungle", Name: "dog", Labels: map[string]string{"type": "animal"}}})
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) string {
			dog := &corev1.ConfigMap{}
			err := jungleCli.Get(ctx, client.ObjectKey{Namespace: "jungle", Name: "dog"}, dog)
			g.Expect(err).NotTo(HaveOccurred())
			return dog.Data["stomach"]
		}, eventually).Should(Equal("food"))

		// Added: island was engaged again, with the jungle's API server
		// (the harness's fleets let two names reach one cluster).
		g.Eventually(func(g Gomega) string {
			island, err := mgr.GetCluster(ctx, "island")
			g.Expect(err).NotTo(HaveOccurred())
			return island.GetConfig().Host
		}, eventually).Should(Equal(jungleCfg.Host))
		g.Eventually(provider.ListClusters, eventually).Should(ContainElement(mcluster.ClusterName("island")))
	})

	t.Run("reconciles objects when kubeconfig secret is updated without changing the cluster", func(t *testing.T) {
		g := NewWithT(t)
		jungleSecret := &corev1.Secret{}
		err := localCli.Get(ctx, client.ObjectKey{Name: "jungle", Namespace: kubeconfigSecretNamespace}, jungleSecret)
		g.Expect(err).NotTo(HaveOccurred())
		// Added: the cluster engaged before the change.
		before, err := mgr.GetCluster(ctx, "jungle")
		g.Expect(err).NotTo(HaveOccurred())

		jungleSecret.ObjectMeta.Annotations = map[string]string{
			"location": "amazon",
		}
		err = localCli.Update(ctx, jungleSecret)
		g.Expect(err).NotTo(HaveOccurred())

		err = jungleCli.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jungle", Name: "leopard", Labels: map[string]string{"type": "animal"}}})
		g.Expect(err).NotTo(HaveOccurred())

		g.Eventually(func(g Gomega) string {
			leopard := &corev1.ConfigMap{}
			err := jungleCli.Get(ctx, client.ObjectKey{Namespace: "jungle", Name: "leopard"}, leopard)
			g.Expect(err).NotTo(HaveOccurred())
			return leopard.Data["stomach"]
		}, eventually).Should(Equal("food"))

		// Added: no disruption, the same cluster still serves.
		after, err := mgr.GetCluster(ctx, "jungle")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(after).To(BeIdenticalTo(before))
	})

	t.Run("removes a cluster from the provider when the kubeconfig secret is deleted", func(t *testing.T) {
		g := NewWithT(t)
		err := localCli.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "island", Namespace: kubeconfigSecretNamespace}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(provider.ListClusters, eventually).Should(HaveLen(2))
		// Added: island is gone for multicluster-runtime's not-found
		// wrapper too, which asks errors.Is (Gomega's MatchError would
		// also take any error reading "cluster not found").
		g.Eventually(func() bool {
			_, err := mgr.GetCluster(ctx, "island")
			return errors.Is(err, mcluster.ErrClusterNotFound)
		}, eventually).Should(BeTrue())
	})

	t.Run("skips secrets that do not contain kubeconfig data", func(t *testing.T) {
		g := NewWithT(t)
		secretWithoutKubeconfig := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      "invalid-secret",
				Namespace: kubeconfigSecretNamespace,
				Labels: map[string]string{
					kubeconfigSecretLabel: "true",
				},
			},
			Data: map[string][]byte{
				"some-other-key": []byte("some-data"),
			},
		}
		err := localCli.Create(ctx, secretWithoutKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		// Added: evidence that the fleet read the Secret (it refuses it)
		// before the count is checked.
		waitRefused(t, mgr, "invalid-secret")

		// Verify the cluster count hasn't changed (secret was skipped)
		g.Eventually(provider.ListClusters, "2s").Should(HaveLen(2))
		g.Consistently(provider.ListClusters, "10s").Should(HaveLen(2))

		// Clean up
		err = localCli.Delete(ctx, secretWithoutKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("skips secrets with empty kubeconfig data", func(t *testing.T) {
		g := NewWithT(t)
		secretWithEmptyKubeconfig := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      "empty-secret",
				Namespace: kubeconfigSecretNamespace,
				Labels: map[string]string{
					kubeconfigSecretLabel: "true",
				},
			},
			Data: map[string][]byte{
				kubeconfigSecretKey: []byte(""),
			},
		}
		err := localCli.Create(ctx, secretWithEmptyKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		waitRefused(t, mgr, "empty-secret")

		// Verify the cluster count hasn't changed (secret was skipped)
		g.Eventually(provider.ListClusters, "2s").Should(HaveLen(2))
		g.Consistently(provider.ListClusters, "10s").Should(HaveLen(2))

		// Clean up
		err = localCli.Delete(ctx, secretWithEmptyKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
	})
}

// waitRefused waits until the fleet has refused cluster name's
// registration.
func waitRefused(t *testing.T, mgr mcmanager.Manager, name string) {
	t.Helper()
	fm := mgr.GetLocalManager().(*fleet.Manager)
	poll.Until(t, name+" refused", func() bool {
		c, ok := fm.Registry().Get(name)
		return ok && c.Refusal != nil
	})
}

// TestProviderRaceCondition is MCR's "Provider race condition".
// Adapted: MCR filled the provider's private map with mock clusters and
// removed them with its private removeCluster; here 20 members are
// registered and engaged, and one is removed by deleting its Secret.
// Each IndexField indexes a field of its own: a real cache refuses a
// second index of one name, which MCR's mock indexer accepted.
func TestProviderRaceCondition(t *testing.T) {
	t.Parallel()
	suite.Need(t)
	namespace := suite.Name("race")
	p, mgr := startFleet(t, namespace)

	// Pre-populate with some clusters to make the test meaningful
	numClusters := 20
	for i := 0; i < numClusters; i++ {
		clusterName := mcluster.ClusterName(fmt.Sprintf("cluster-%d", i))
		kubeconfigData, err := createKubeConfig(suite.Members[i%len(suite.Members)].Config)
		if err != nil {
			t.Fatal(err)
		}
		if err := suite.HubClient.Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: string(clusterName), Namespace: namespace, Labels: map[string]string{kubeconfigSecretLabel: "true"}},
			Data:       map[string][]byte{kubeconfigSecretKey: kubeconfigData},
		}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, mgr)
	NewWithT(t).Eventually(p.ListClusters, eventually).Should(HaveLen(numClusters))

	var wg sync.WaitGroup
	numGoroutines := 40
	wg.Add(numGoroutines)

	for i := 0; i < numGoroutines; i++ {
		go func(i int) {
			defer wg.Done()
			// Adapted: MCR's GinkgoRecover; a goroutine may not stop the test.
			g := NewGomega(func(message string, _ ...int) { t.Error(message) })

			// Mix of operations to stress the provider
			switch i % 4 {
			case 0:
				// Concurrently index a field. This will read the cluster list.
				err := p.IndexField(context.Background(), &corev1.ConfigMap{}, fmt.Sprintf("field-%d", i), func(rawObj client.Object) []string {
					return nil
				})
				g.Expect(err).NotTo(HaveOccurred())
			case 1:
				// Concurrently get a cluster.
				_, err := p.Get(context.Background(), "cluster-1")
				g.Expect(err).To(Or(BeNil(), MatchError(mcluster.ErrClusterNotFound)))
			case 2:
				// Concurrently list clusters.
				p.ListClusters()
			case 3:
				// Concurrently delete a cluster. This will modify the cluster map.
				clusterToRemove := mcluster.ClusterName(fmt.Sprintf("cluster-%d", i/4))
				err := suite.HubClient.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: string(clusterToRemove), Namespace: namespace}})
				g.Expect(err).NotTo(HaveOccurred())
			}
		}(i)
	}

	wg.Wait()
	// Added: the ten removed clusters leave, the others stay.
	NewWithT(t).Eventually(p.ListClusters, eventually).Should(HaveLen(numClusters - numGoroutines/4))
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func createKubeConfig(cfg *rest.Config) ([]byte, error) {
	name := "cluster"
	apiConfig := api.Config{
		Clusters: map[string]*api.Cluster{
			name: {
				Server:                   cfg.Host,
				CertificateAuthorityData: cfg.CAData,
			},
		},
		AuthInfos: map[string]*api.AuthInfo{
			name: {
				ClientCertificateData: cfg.CertData,
				ClientKeyData:         cfg.KeyData,
				Token:                 cfg.BearerToken,
			},
		},
		Contexts: map[string]*api.Context{
			name: {
				Cluster:  name,
				AuthInfo: name,
			},
		},
		CurrentContext: name,
	}
	kubeconfigData, err := clientcmd.Write(apiConfig)
	if err != nil {
		return nil, err
	}
	return kubeconfigData, nil
}

func createKubeconfigSecret(ctx context.Context, name string, cfg *rest.Config, cl client.Client) error {
	kubeconfigData, err := createKubeConfig(cfg)
	if err != nil {
		return err
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: kubeconfigSecretNamespace,
			Labels: map[string]string{
				kubeconfigSecretLabel: "true",
			},
		},
	}
	secret.Data = map[string][]byte{
		kubeconfigSecretKey: kubeconfigData,
	}
	return cl.Create(ctx, secret)
}
