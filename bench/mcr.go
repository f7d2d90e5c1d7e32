package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	kubeconfigprovider "sigs.k8s.io/multicluster-runtime/providers/kubeconfig"
)

// childMCR runs multicluster-runtime (MCR) as a controller author runs it
// with its kubeconfig provider, as the outside benchmark did: the provider
// reads the MCR-format registration Secrets of namespace on the hub, and a
// ConfigMap controller built with mcbuilder, 2 workers, reconciles every
// member's ConfigMaps. Its members' caches select the objects as the fleet
// child's do. It reports once every member settled (each of its objects
// reconciled), then its memory.
func childMCR(ctx context.Context, hubKubeconfig, namespace, watch string, members, objects int, readings memoryReadings, settle time.Duration) error {
	hub, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return err
	}
	provider := kubeconfigprovider.New(kubeconfigprovider.Options{
		Namespace: namespace,
		ClusterOptions: []cluster.Option{func(o *cluster.Options) {
			cacheOnly(&o.Cache, watch, true)
		}},
	})
	mgr, err := mcmanager.New(hub, provider, manager.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	if err := provider.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	var mu sync.Mutex
	reconciled := map[string]int{}
	err = mcbuilder.ControllerManagedBy(mgr).
		Named("mcr-bench").
		For(&corev1.ConfigMap{}, mcbuilder.WithEngageWithLocalCluster(false)).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: 2}).
		Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (reconcile.Result, error) {
			mu.Lock()
			reconciled[string(req.ClusterName)]++
			mu.Unlock()
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- mgr.Start(ctx) }()
	deadline := started.Add(settle)
	var n int
	err = awaitCtx(ctx, "members settled", func() bool {
		mu.Lock()
		n = 0
		for _, c := range reconciled {
			if c >= objects {
				n++
			}
		}
		mu.Unlock()
		return n >= members || time.Now().After(deadline)
	})
	if err == nil {
		report(childReport{Event: "settled", Members: n, SettledSeconds: time.Since(started).Seconds(), CPUSeconds: cpuSeconds()})
		err = readings.report(ctx)
		<-ctx.Done()
	}
	cancel()
	return errors.Join(err, <-done)
}

// registerMCR registers the members names under MCR's own Secret format,
// in hub namespace ns, which the MCR child's provider reads.
func (l *lab) registerMCR(ctx context.Context, ns string, names []string, kubeconfig func(i int) []byte) error {
	var errs []error
	for i, name := range names {
		errs = append(errs, l.hubClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{kubeconfigprovider.DefaultKubeconfigSecretLabel: "true"}},
			Data:       map[string][]byte{kubeconfigprovider.DefaultKubeconfigSecretKey: kubeconfig(i)},
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registering MCR Secrets: %w", err)
	}
	return nil
}
