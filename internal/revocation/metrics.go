package revocation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Metric names.
const (
	// MetricPending is each CertificateRevocation's certificates still to
	// revoke (renewing, or refused by the CA), from its status.
	MetricPending = "certhub_revocation_pending_certificates"
	// MetricRevocations counts revocations done by this replica, by
	// issuer kind (CA, ACME) and result (Revoked, Failed).
	MetricRevocations = "certhub_revocations_total"
)

var descPending = prometheus.NewDesc(MetricPending,
	"Certificates a CertificateRevocation still has to revoke (renewing, or refused by the CA); 0 once Complete.", []string{"revocation", "phase"}, nil)

type metrics struct {
	hub         client.Reader
	revocations *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, hub client.Reader) (*metrics, error) {
	m := &metrics{hub: hub, revocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRevocations,
		Help: "Certificates revoked by this replica (their CA's CRL, or the ACME CA), by issuer kind and result."}, []string{"issuer_kind", "result"})}
	for _, c := range []prometheus.Collector{m.revocations, m} {
		if err := reg.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				return nil, errors.New("revocation: metrics already registered; give each Controller its own Registerer")
			}
			return nil, fmt.Errorf("failed to register revocation metrics: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { ch <- descPending }

// Collect implements prometheus.Collector: one series per revocation,
// from the hub's cache.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	revs := &hubapi.CertificateRevocationList{}
	if err := m.hub.List(ctx, revs); err != nil {
		return
	}
	for _, r := range revs.Items {
		phase := string(r.Status.Phase)
		if phase == "" {
			phase = string(hubapi.RevocationInProgress)
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(r.Status.Pending), r.Name, phase)
	}
}
