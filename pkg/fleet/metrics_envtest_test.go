package fleet_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

func TestMetricsFollowMembers(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Setup: memberClusters, Configure: fleettest.QuickHealth})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "metered", "metered", fleet.Members, r)
	s := f.Register(t, "metered", suite.Kubeconfigs[1])
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "metered", "counted")
	r.WaitFor(t, fleettest.Request("metered", "metered", "counted"))

	want := []string{
		"fleet_member_ready", "fleet_member_state", "fleet_member_probes_total", "fleet_member_probe_duration_seconds",
		"fleet_member_engagements_total", "fleet_member_engage_duration_seconds",
		"fleet_reconciles_total", "fleet_reconcile_duration_seconds",
	}
	poll.Until(t, "every per-cluster series of metered", func() bool {
		series := fleettest.Series(t, "metered")
		for _, name := range want {
			if len(series[name]) == 0 {
				return false
			}
		}
		return series["fleet_member_ready"][0].GetGauge().GetValue() == 1
	})
	problems, err := testutil.GatherAndLint(crmetrics.Registry, want...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}

	if err := suite.HubClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "metered's series deleted", func() bool { return len(fleettest.Series(t, "metered")) == 0 })
}
