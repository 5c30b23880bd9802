package acme

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the certhub_acme_* series.
type metrics struct {
	orders   *prometheus.CounterVec
	requests *prometheus.HistogramVec
	budget   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "certhub_acme_orders_total",
			Help: "ACME orders by ClusterIssuer and result: created (the CA accepted a new order), valid, errored."}, []string{"issuer", "result"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "certhub_acme_request_duration_seconds",
			Help:    "Requests to ACME servers by ClusterIssuer, method and HTTP status code (0: no answer).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"issuer", "method", "code"}),
		budget: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_acme_budget_remaining",
			Help: "Tokens left in a ClusterIssuer's shared budget after this replica's last draw: limit is orders or domain:<registered domain>."}, []string{"issuer", "limit"}),
	}
	for _, c := range []prometheus.Collector{m.orders, m.requests, m.budget} {
		if err := reg.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				continue // a second Service in one process (tests): the first one's series count for both
			}
			return nil, err
		}
	}
	return m, nil
}

// count adds one order with result for issuer.
func (s *Service) count(issuer, result string) {
	s.metrics.orders.WithLabelValues(issuer, result).Inc()
}

// instrument times every request to the CA.
func (m *metrics) instrument(issuer string, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		res, err := rt.RoundTrip(req)
		code := 0
		if res != nil {
			code = res.StatusCode
		}
		m.requests.WithLabelValues(issuer, req.Method, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
		return res, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
