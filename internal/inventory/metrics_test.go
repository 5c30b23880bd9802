package inventory

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/certhub/certhub/test/fixture"
)

// A cluster's requests are counted by code class; when it leaves the
// replica (forgetCluster, after its connection's context ended) none of
// its series remain, and a request still in flight then does not bring
// them back. Another cluster's series stay.
func TestClusterThatLeavesLeavesNoSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	reg := prometheus.NewPedanticRegistry()
	m, err := newInventoryMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*http.Client{}
	cancels := map[string]context.CancelFunc{}
	for _, name := range []string{"east", "west"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[name] = cancel
		cfg := &rest.Config{Host: srv.URL}
		m.instrument(ctx, name, cfg)
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[name] = c
		m.reachable.WithLabelValues(name).Set(1)
		for _, path := range []string{"/ok", "/missing"} {
			resp, err := c.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	if v, _ := fixture.GaugeIn(t, reg, metricRequests, map[string]string{"cluster": "west", "code": "4xx"}); v != 1 {
		t.Errorf("west 4xx requests %v, want 1", v)
	}
	if got := fixture.SeriesOfCluster(t, reg, "west"); got != 3 {
		t.Fatalf("%d series of west, want 3 (reachable, 2xx, 4xx)", got)
	}
	cancels["west"]()
	m.forgetCluster("west")
	resp, err := clients["west"].Get(srv.URL + "/ok") // in flight as it left
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := fixture.SeriesOfCluster(t, reg, "west"); got != 0 {
		t.Errorf("%d series of west after it left, want 0", got)
	}
	if got := fixture.SeriesOfCluster(t, reg, "east"); got != 3 {
		t.Errorf("%d series of east, want 3", got)
	}
}
