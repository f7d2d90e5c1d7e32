package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var prometheusComponent = filepath.Join(root, "deploy", "components", "prometheus")

// ruleFile is Prometheus's rule file, a PrometheusRule's spec.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert  string `json:"alert,omitempty"`
	Record string `json:"record,omitempty"`
	Expr   string `json:"expr"`
}

// TestAlerts runs promtool's rule tests, testdata/alerts_test.yaml, on the
// PrometheusRule's rules, and requires a test of every alert.
func TestAlerts(t *testing.T) {
	spec := alertRules(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rules.yaml"), spec)
	tests := readFile(t, filepath.Join("testdata", "alerts_test.yaml"))
	writeFile(t, filepath.Join(dir, "alerts_test.yaml"), tests)
	promtool(t, dir, "test", "rules", "alerts_test.yaml")

	var rules ruleFile
	if err := json.Unmarshal(spec, &rules); err != nil {
		t.Fatal(err)
	}
	var tested struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &tested); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, test := range tested.Tests {
		for _, a := range test.AlertRuleTest {
			names = append(names, a.Alertname)
		}
	}
	for _, r := range rules.rules() {
		if r.Alert != "" && !slices.Contains(names, r.Alert) {
			t.Errorf("alert %s has no test in testdata/alerts_test.yaml", r.Alert)
		}
	}
}

// TestDashboard checks the dashboard's queries with promtool, as recording
// rules, with Grafana's variables replaced.
func TestDashboard(t *testing.T) {
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$cluster", ".*")
	group := ruleGroup{Name: "dashboard"}
	for i, expr := range dashboardQueries(t) {
		group.Rules = append(group.Rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafana.Replace(expr)})
	}
	data, err := json.Marshal(ruleFile{Groups: []ruleGroup{group}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dashboard.yaml"), data)
	promtool(t, dir, "check", "rules", "dashboard.yaml")
}

// TestSeriesExported requires every fleet_ series the alerts and the
// dashboard query to be one the manager exports: a metric's name in its
// source (Name: "fleet_..."), or a histogram's _bucket, _sum or _count.
func TestSeriesExported(t *testing.T) {
	exported := map[string]bool{}
	for _, dir := range []string{"pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			for _, m := range regexp.MustCompile(`Name:\s+"(fleet_\w+)"`).FindAllSubmatch(readFile(t, path), -1) {
				for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
					exported[string(m[1])+suffix] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(exported) == 0 {
		t.Fatal("no fleet_ metric found in pkg/ and internal/")
	}
	var rules ruleFile
	if err := json.Unmarshal(alertRules(t), &rules); err != nil {
		t.Fatal(err)
	}
	queries := dashboardQueries(t)
	for _, r := range rules.rules() {
		queries = append(queries, r.Expr)
	}
	for _, q := range queries {
		for _, name := range regexp.MustCompile(`\bfleet_\w+`).FindAllString(q, -1) {
			if !exported[name] {
				t.Errorf("%s is not a series the manager exports: %s", name, q)
			}
		}
	}
}

func (f ruleFile) rules() []rule {
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// alertRules is the PrometheusRule's spec, as JSON.
func alertRules(t *testing.T) []byte {
	t.Helper()
	var rule struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(prometheusComponent, "prometheusrule.yaml")), &rule); err != nil {
		t.Fatal(err)
	}
	return rule.Spec
}

// dashboardQueries are the dashboard's PromQL queries, its panels' and its
// variables'.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	type panel struct {
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dashboard struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readFile(t, filepath.Join(prometheusComponent, "fleet-manager-dashboard.json")), &dashboard); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			queries = append(queries, target.Expr)
		}
	}
	for _, v := range dashboard.Templating.List {
		if v.Type == "query" {
			// label_values(metric, label) is Grafana's, not PromQL: its metric.
			queries = append(queries, regexp.MustCompile(`^label_values\((.*), *\w+\)$`).ReplaceAllString(v.Definition, "$1"))
		}
	}
	if len(queries) == 0 {
		t.Fatal("the dashboard has no query")
	}
	return queries
}

// promtool runs bin/promtool (make promtool) in dir, and fails the test
// with its output if it fails.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(root, "bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: make promtool builds it", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
