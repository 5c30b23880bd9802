package inventory

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Metric names.
const (
	metricReachable = "certhub_cluster_reachable"
	metricInvalid   = "certhub_cluster_secret_invalid"
	metricRequests  = "certhub_downstream_requests_total"
)

type inventoryMetrics struct {
	reachable *prometheus.GaugeVec
	invalid   *prometheus.GaugeVec
	requests  *prometheus.CounterVec
}

func newInventoryMetrics(reg prometheus.Registerer) (*inventoryMetrics, error) {
	m := &inventoryMetrics{
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricReachable,
			Help: "1 when the hub reached the cluster with its registered credentials, 0 when it could not (see the Events on the cluster Secret)."}, []string{"cluster"}),
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricInvalid,
			Help: "1 for each cluster Secret that cannot be parsed or duplicates another's name, by Secret and reason."}, []string{"secret", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRequests,
			Help: "Requests from this replica to downstream API servers, by cluster and HTTP code (\"error\" when no response)."}, []string{"cluster", "code"}),
	}
	for _, c := range []prometheus.Collector{m.reachable, m.invalid, m.requests} {
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

// instrument counts every downstream response of cfg's clients by code.
func (m *inventoryMetrics) instrument(cluster string, cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			code := "error"
			if err == nil {
				code = strconv.Itoa(resp.StatusCode)
			}
			m.requests.WithLabelValues(cluster, code).Inc()
			return resp, err
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
