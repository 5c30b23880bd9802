package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Series are the samples of one /metrics scrape: metric name → the label
// sets it was seen with, each with its value.
type Series map[string][]MetricSample

// MetricSample is one series of a metric.
type MetricSample struct {
	Labels map[string]string
	Value  float64
}

// Sum adds up the samples of name whose labels include all of match.
func (s Series) Sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, x := range s[name] {
		ok := true
		for k, v := range match {
			ok = ok && x.Labels[k] == v
		}
		if ok {
			total += x.Value
		}
	}
	return total
}

// ByLabel returns, for the samples of name, label's value → the sample's value.
func (s Series) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s[name] {
		out[x.Labels[label]] += x.Value
	}
	return out
}

// ParseMetrics reads Prometheus text exposition.
func ParseMetrics(r io.Reader) (Series, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("failed to parse metrics: %w", err)
	}
	out := Series{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			v := m.GetGauge().GetValue()
			if c := m.GetCounter(); c != nil {
				v = c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount()) // a histogram counts its observations
			}
			out[name] = append(out[name], MetricSample{Labels: l, Value: v})
		}
	}
	return out, nil
}

// Metrics scrapes the replica's /metrics.
func (r *Replica) Metrics(ctx context.Context) (Series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to scrape %s: %w", r, err)
	}
	defer resp.Body.Close()
	return ParseMetrics(resp.Body)
}

// APIServerMetrics scrapes a kube-apiserver's /metrics with an admin config.
func APIServerMetrics(ctx context.Context, cfg *rest.Config) (Series, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to scrape %s/metrics: %w", cfg.Host, err)
	}
	return ParseMetrics(strings.NewReader(string(raw)))
}

// Watches is the number of watch requests the API server holds open for
// resource (e.g. "certificates"): its apiserver_longrunning_requests.
func (s Series) Watches(resource string) float64 {
	return s.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": resource})
}
