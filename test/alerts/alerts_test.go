// Package alerts proves the alerts certhub ships (examples/prometheusrule.yaml)
// with Prometheus's own rule engine: promtool's rule unit tests
// (rules_test.yaml) show each alert quiet, firing with the labels and
// annotations an operator reads, and resolved, on series named and
// labelled as the hub exposes them.
package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/test/fixture"
)

// rules reads the PrometheusRule's groups, as Prometheus Operator hands
// them to Prometheus.
func rules(t *testing.T) (groups []any, alerts []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert string } `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil || pr.Kind != "PrometheusRule" {
		t.Fatalf("examples/prometheusrule.yaml is no PrometheusRule (kind %q): %v", pr.Kind, err)
	}
	var whole struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	return whole.Spec.Groups, alerts
}

// Every alert fires and resolves as rules_test.yaml says, evaluated by
// promtool (PROMTOOL: make test builds it, hack's pinned version).
func TestAlertsFireAndResolve(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Fatal("PROMTOOL is not set: run make test-unit (it builds promtool), or set PROMTOOL to a promtool binary")
	}
	groups, _ := rules(t)
	out, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "rules_test.yaml")
	cmd.Dir = dir
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, res)
	}
	t.Logf("promtool test rules:\n%s", res)
}

// Every alert shipped has a test that shows it firing and one that shows it
// quiet or resolved; a new alert without tests fails here.
func TestEveryAlertIsTested(t *testing.T) {
	_, alerts := rules(t)
	raw, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts read from examples/prometheusrule.yaml")
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: a test that fires it %v, one that finds it quiet %v; want both", a, fires[a], quiet[a])
		}
	}
}

// Every certhub_ series the alerts and their tests name is one the hub
// defines (a metric renamed in the code would otherwise leave an alert
// that never fires, and tests that still pass).
func TestAlertsNameTheHubsMetrics(t *testing.T) {
	name := regexp.MustCompile(`\b(certhub_[a-z0-9_]+)`)
	defined := fixture.HubMetricNames(t, filepath.Join("..", ".."))
	for _, f := range []string{filepath.Join("..", "..", "examples", "prometheusrule.yaml"), "rules_test.yaml"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllSubmatch(raw, -1) {
			if n := string(m[1]); !defined[n] {
				t.Errorf("%s names %s, which no metric of the hub is", f, n)
			}
		}
	}
}
