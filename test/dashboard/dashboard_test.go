package dashboard

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	sdk "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/certhub/certhub/test/fixture"
)

// histogramSuffix is what a histogram's series add to its name.
var histogramSuffix = regexp.MustCompile(`_(count|sum|bucket)$`)

var shipped = filepath.Join("..", "..", "examples", "grafana-dashboard.json")

// examples/grafana-dashboard.json is the build's output: edit dashboard.go
// and run make dashboard.
func TestShippedDashboardIsBuilt(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what test/dashboard builds; run make dashboard", shipped)
	}
}

// The shipped JSON reads back into Grafana's dashboard types, panels and
// Prometheus queries included, and every certhub_ series a query names is
// one the hub exposes.
func TestDashboardQueriesTheHubsMetrics(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	raw, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	d := &sdk.Dashboard{} //nolint:staticcheck // the classic model on purpose (Build)
	if err := json.Unmarshal(raw, d); err != nil {
		t.Fatalf("Grafana's dashboard types refuse %s: %v", shipped, err)
	}
	defined := fixture.HubMetricNames(t, filepath.Join("..", ".."))
	name := regexp.MustCompile(`\b(certhub_[a-z0-9_]+)`)
	queries := 0
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		for _, target := range p.Panel.Targets {
			q, ok := target.(*prometheus.Dataquery)
			if !ok {
				t.Errorf("panel %q: a query that is not Prometheus's (%T)", deref(p.Panel.Title), target)
				continue
			}
			queries++
			for _, m := range name.FindAllStringSubmatch(q.Expr, -1) {
				if base := histogramSuffix.ReplaceAllString(m[1], ""); !defined[m[1]] && !defined[base] {
					t.Errorf("panel %q queries %s, which no metric of the hub is", deref(p.Panel.Title), m[1])
				}
			}
		}
	}
	if queries < 15 {
		t.Errorf("%d Prometheus queries read back, want every panel's", queries)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
