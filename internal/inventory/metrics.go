package inventory

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Metric names.
const (
	metricReachable = "certhub_cluster_reachable"
	metricInvalid   = "certhub_cluster_secret_invalid"
	metricRequests  = "certhub_downstream_requests_total"
	metricConnected = "certhub_engaged_clusters"
	metricWatches   = "certhub_cluster_watches"
)

type inventoryMetrics struct {
	reachable *prometheus.GaugeVec
	invalid   *prometheus.GaugeVec
	requests  *prometheus.CounterVec
	connected prometheus.Gauge
	watches   *prometheus.GaugeVec
}

func newInventoryMetrics(reg prometheus.Registerer) (*inventoryMetrics, error) {
	m := &inventoryMetrics{
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricReachable,
			Help: "1 when the hub reached the cluster with its registered credentials, 0 when it could not (see the Events on the cluster Secret)."}, []string{"cluster"}),
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricInvalid,
			Help: "1 for each cluster Secret that cannot be parsed or duplicates another's name, by Secret and reason."}, []string{"secret", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRequests,
			Help: "Requests from this replica to downstream API servers, by cluster and HTTP code class (2xx, 3xx, 4xx, 5xx; \"error\" when no response)."}, []string{"cluster", "code"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricConnected,
			Help: "Downstream clusters this replica is connected to and caches: those it owns or keeps warm as a standby."}),
		watches: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricWatches,
			Help: "Watch requests this replica holds open against each downstream cluster."}, []string{"cluster"}),
	}
	for _, c := range []prometheus.Collector{m.reachable, m.invalid, m.requests, m.connected, m.watches} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if errors.As(err, &are) {
				return nil, errors.New("inventory: metrics already registered; give each Provider in a process its own Registerer")
			}
			return nil, err
		}
	}
	return m, nil
}

// instrument counts every downstream response of cfg's clients by code
// class, while ctx (the connection's) lasts: a request still in flight when
// the cluster left the replica does not bring its series back.
func (m *inventoryMetrics) instrument(ctx context.Context, cluster string, cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if ctx.Err() != nil {
				return resp, err
			}
			code := "error"
			if err == nil {
				code = codeClass(resp.StatusCode)
			}
			m.requests.WithLabelValues(cluster, code).Inc()
			if err == nil && resp.StatusCode == http.StatusOK && req.URL.Query().Get("watch") == "true" {
				g := m.watches.WithLabelValues(cluster)
				g.Inc()
				resp.Body = &watchBody{ReadCloser: resp.Body, done: g.Dec}
			}
			return resp, err
		})
	})
}

// codeClass is an HTTP status code's class ("2xx", …): a handful of series
// per cluster, whatever codes the API server answers.
func codeClass(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}

// forgetCluster deletes every series of a cluster this replica no longer
// connects to (its owner reports it).
func (m *inventoryMetrics) forgetCluster(cluster string) {
	l := prometheus.Labels{"cluster": cluster}
	m.reachable.DeletePartialMatch(l)
	m.requests.DeletePartialMatch(l)
	m.watches.DeletePartialMatch(l)
}

// watchBody counts an open watch until its body is closed.
type watchBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *watchBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
