package drpair

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	metricReady        = "certhub_standby_ready"
	metricCertificates = "certhub_standby_certificates"
	metricWrites       = "certhub_standby_mirror_writes_total"
)

type metrics struct {
	ready        *prometheus.GaugeVec
	certificates *prometheus.GaugeVec
	writes       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricReady,
			Help: "1 when the standby cluster holds a ready certificate for every selected Certificate of its primary (same names, valid, not expiring first), else 0; exported by the standby's owner."},
			[]string{"standby", "primary"}),
		certificates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricCertificates,
			Help: "Selected Certificates of the primary, by whether the standby holds a ready certificate for them (state ready or not_ready)."},
			[]string{"standby", "primary", "state"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricWrites,
			Help: "Certificates the hub created, updated or deleted in standby clusters from their primaries' (op create, update or delete)."},
			[]string{"cluster", "op"}),
	}
	for _, c := range []prometheus.Collector{m.ready, m.certificates, m.writes} {
		if err := reg.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				return nil, errors.New("standby: metrics already registered; give each Pairs its own Registerer")
			}
			return nil, fmt.Errorf("failed to register the standby metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) set(st *Status) {
	ready := 0.0
	if st.Ready {
		ready = 1
	}
	m.ready.WithLabelValues(st.Standby, st.Primary).Set(ready)
	m.certificates.WithLabelValues(st.Standby, st.Primary, "ready").Set(float64(st.ReadyCertificates))
	m.certificates.WithLabelValues(st.Standby, st.Primary, "not_ready").Set(float64(st.Selected - st.ReadyCertificates))
}

func (m *metrics) forget(standby, primary string) {
	m.ready.DeleteLabelValues(standby, primary)
	m.certificates.DeleteLabelValues(standby, primary, "ready")
	m.certificates.DeleteLabelValues(standby, primary, "not_ready")
}
