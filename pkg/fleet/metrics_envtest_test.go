package fleet_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
)

// seriesOf returns the fleet_ series served at /metrics that carry
// cluster=name, by metric name.
func seriesOf(t *testing.T, name string) map[string][]*dto.Metric {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "cluster" && l.GetValue() == name }) {
				out[f.GetName()] = append(out[f.GetName()], m)
			}
		}
	}
	return out
}

func TestMetricsFollowMembers(t *testing.T) {
	f := startFleetWith(t, quickHealth)
	r := &recorder{}
	watchConfigMaps(t, f, "metered", "metered", fleet.Members, r)
	s := f.register(t, "metered", kubeconfigs[1])
	createConfigMap(t, memberClients[1], "metered", "counted")
	r.waitFor(t, request("metered", "metered", "counted"))

	want := []string{
		"fleet_member_ready", "fleet_member_state", "fleet_member_probes_total", "fleet_member_probe_duration_seconds",
		"fleet_member_engagements_total", "fleet_member_engage_duration_seconds",
		"fleet_reconciles_total", "fleet_reconcile_duration_seconds",
	}
	poll.Until(t, "every per-cluster series of metered", func() bool {
		series := seriesOf(t, "metered")
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

	if err := hubClient.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "metered's series deleted", func() bool { return len(seriesOf(t, "metered")) == 0 })
}
