package fleet_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

func TestHubClientLimits(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		"unset":    {wantQPS: fleet.DefaultHubQPS, wantBurst: fleet.DefaultHubBurst},
		"the user": {qps: 7, burst: 9, wantQPS: 7, wantBurst: 9},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			suite.Need(t)
			cfg := rest.CopyConfig(suite.Hub.Config)
			cfg.QPS, cfg.Burst = tc.qps, tc.burst
			mgr, err := fleet.New(cfg, fleet.Options{Options: manager.Options{
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got := mgr.GetConfig(); got.QPS != tc.wantQPS || got.Burst != tc.wantBurst {
				t.Errorf("hub client limits = %g/%d, want %g/%d", got.QPS, got.Burst, tc.wantQPS, tc.wantBurst)
			}
			if cfg.QPS != tc.qps {
				t.Errorf("New changed the caller's config")
			}
		})
	}
}
