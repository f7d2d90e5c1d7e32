package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// leaderElectionID names the Lease replicas elect a leader with.
const leaderElectionID = "fleet-manager"

// hubProbeTimeout bounds the check that the hub answers at startup.
const hubProbeTimeout = 30 * time.Second

type runFlags struct {
	hubKubeconfig    string
	namespace        string
	metricsAddr      string
	probeAddr        string
	leaderElect      bool
	memberQPS        float64
	memberBurst      int
	cacheSyncTimeout time.Duration
	zap              zap.Options
}

func runCommand(args []string, stderr io.Writer) error {
	var f runFlags
	fs := newFlagSet("run", stderr, &f.zap)
	fs.StringVar(&f.hubKubeconfig, "hub-kubeconfig", "", "Path to the hub's kubeconfig. Default: the in-cluster config, else $KUBECONFIG and the default loading rules.")
	fs.StringVar(&f.namespace, "namespace", fleet.DefaultNamespace, "Fleet namespace on the hub: where member kubeconfig Secrets and the leader election Lease live.")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", `Address the metrics endpoint binds to; "0" disables it.`)
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", `Address the /healthz and /readyz endpoints bind to; "0" disables them.`)
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader with a Lease, so that only one replica runs member caches and controllers.")
	fs.Float64Var(&f.memberQPS, "member-qps", 50, "Queries per second each member's client may make.")
	fs.IntVar(&f.memberBurst, "member-burst", 100, "Burst of queries each member's client may make.")
	fs.DurationVar(&f.cacheSyncTimeout, "cache-sync-timeout", 2*time.Minute, "How long a controller waits for a cluster's informers to sync.")
	if err := parse(fs, args); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(f.namespace); len(errs) > 0 {
		return usageErrorf(fs, "invalid value %q for flag -namespace: %s", f.namespace, errs[0])
	}
	if f.memberQPS <= 0 || f.memberBurst <= 0 {
		return usageErrorf(fs, "-member-qps and -member-burst must be positive")
	}
	if f.cacheSyncTimeout <= 0 {
		return usageErrorf(fs, "-cache-sync-timeout must be positive")
	}

	log := setupLogging(&f.zap).WithName("setup")
	cfg, err := hubConfig(f.hubKubeconfig)
	if err != nil {
		return fmt.Errorf("loading the hub kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := probeHub(ctx, cfg); err != nil {
		return err
	}

	mgr, err := fleet.New(cfg, fleet.Options{
		Options: manager.Options{
			Metrics:                       metricsserver.Options{BindAddress: f.metricsAddr},
			HealthProbeBindAddress:        f.probeAddr,
			LeaderElection:                f.leaderElect,
			LeaderElectionID:              leaderElectionID,
			LeaderElectionNamespace:       f.namespace,
			LeaderElectionReleaseOnCancel: true,
			Controller:                    config.Controller{CacheSyncTimeout: f.cacheSyncTimeout},
		},
		Namespace:   f.namespace,
		MemberQPS:   float32(f.memberQPS),
		MemberBurst: f.memberBurst,
	})
	if err != nil {
		return fmt.Errorf("creating the fleet manager: %w", err)
	}
	// Only the process itself is checked: a member being down must never
	// make this replica unready.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	log.Info("Starting fleet manager", "host", cfg.Host, "namespace", f.namespace, "leaderElection", f.leaderElect)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the fleet manager: %w", err)
	}
	log.Info("Fleet manager stopped")
	return nil
}

// hubConfig returns the hub's REST config: from path if set, else the
// in-cluster config, else $KUBECONFIG and the default loading rules. The
// hub's kubeconfig comes from the operator and is trusted, unlike a
// member's.
func hubConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case path != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		}
	}
	if err != nil {
		return nil, err
	}
	return rest.AddUserAgent(cfg, "fleet-manager"), nil
}

// probeHub fails fast, with a clear message, when the hub does not answer.
func probeHub(ctx context.Context, cfg *rest.Config) error {
	probe := rest.CopyConfig(cfg)
	probe.Timeout = hubProbeTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return fmt.Errorf("building a client for the hub at %s: %w", cfg.Host, err)
	}
	err = dc.RESTClient().Get().AbsPath("/version").Do(ctx).Error()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("the hub at %s is unreachable: %w", cfg.Host, err)
	}
	return nil
}
