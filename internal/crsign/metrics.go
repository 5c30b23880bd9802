package crsign

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// signMetrics is certhub_certificaterequests_total{cluster,result}.
type signMetrics struct{ results *prometheus.CounterVec }

func newMetrics(reg prometheus.Registerer) (*signMetrics, error) {
	m := &signMetrics{results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "certhub_certificaterequests_total",
		Help: "Downstream CertificateRequests the hub decided as their issuer (issuerRef.group certhub.io), by result: Issued, Failed, Denied."},
		[]string{"cluster", "result"})}
	if err := reg.Register(m.results); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *signMetrics) result(name multicluster.ClusterName, result string) {
	m.results.WithLabelValues(string(name), result).Inc()
}
