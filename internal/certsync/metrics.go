package certsync

import (
	"context"
	"errors"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Metric names mirror cert-manager's certmanager_certificate_* so dashboards
// and alerts port over by swapping the prefix and adding the cluster label.
const (
	metricExpiration  = "certhub_certificate_expiration_timestamp_seconds"
	metricNotBefore   = "certhub_certificate_not_before_timestamp_seconds"
	metricNotAfter    = "certhub_certificate_not_after_timestamp_seconds"
	metricRenewal     = "certhub_certificate_renewal_timestamp_seconds"
	metricReady       = "certhub_certificate_ready_status"
	metricIssuance    = "certhub_certificate_issuance_duration_seconds"
	metricLoops       = "certhub_certificate_issuance_loops_total"
	metricBudgetWaits = "certhub_certificate_budget_waits_total"
	metricViolations  = "certhub_certificate_policy_violations"
)

var certLabels = []string{"cluster", "namespace", "name", "issuer_name", "issuer_kind", "issuer_group"}

type syncMetrics struct {
	expiration, notBefore, notAfter, renewal *prometheus.GaugeVec
	ready                                    *prometheus.GaugeVec
	issuance                                 *prometheus.HistogramVec
	loops, budgetWaits                       *prometheus.CounterVec
	violations                               *prometheus.GaugeVec

	mu        sync.Mutex                                   // guards violating
	violating map[multicluster.ClusterName]map[string]bool // "<ns>/<name>" with PolicyViolation=True
}

func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	g := func(name, help string, extra ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append(append([]string{}, certLabels...), extra...))
	}
	m := &syncMetrics{
		expiration: g(metricExpiration, "The date after which the certificate expires (notAfter), as a Unix timestamp."),
		notBefore:  g(metricNotBefore, "The certificate's notBefore, as a Unix timestamp."),
		notAfter:   g(metricNotAfter, "The certificate's notAfter, as a Unix timestamp."),
		renewal:    g(metricRenewal, "When certhub will renew the certificate, as a Unix timestamp."),
		ready:      g(metricReady, "The Ready condition of the Certificate: 1 for the current condition value, 0 for the others.", "condition"),
		issuance: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricIssuance,
			Help:    "Time from deciding to issue to the Secret written, by result (success or failed).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"cluster", "result"}),
		loops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLoops,
			Help: "Times the loop guard paused a Certificate that was issued again and again for one spec (reason IssuanceLoopDetected)."}, []string{"cluster"}),
		budgetWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricBudgetWaits,
			Help: "Issuances held back by the hub's issuance budget (--issuance-rate), counted when a Certificate starts waiting (Issuing=True, reason RateLimited)."}, []string{"cluster"}),
		violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricViolations,
			Help: "Issued certificates the issuance policies no longer allow (condition PolicyViolation=True; not revoked)."}, []string{"cluster"}),
		violating: map[multicluster.ClusterName]map[string]bool{},
	}
	for _, c := range []prometheus.Collector{m.expiration, m.notBefore, m.notAfter, m.renewal, m.ready, m.issuance, m.loops, m.budgetWaits, m.violations} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if errors.As(err, &are) {
				return nil, errors.New("certsync: metrics already registered; give each reconciler in a process its own Registerer")
			}
			return nil, err
		}
	}
	return m, nil
}

func labelsFor(cluster multicluster.ClusterName, crt *cmapi.Certificate) prometheus.Labels {
	ref := crt.Spec.IssuerRef
	return prometheus.Labels{"cluster": string(cluster), "namespace": crt.Namespace, "name": crt.Name,
		"issuer_name": ref.Name, "issuer_kind": issuerKind(ref), "issuer_group": ref.Group}
}

// observe records the Certificate's status as written.
func (m *syncMetrics) observe(cluster multicluster.ClusterName, crt *cmapi.Certificate) {
	m.forget(cluster, crt.Namespace, crt.Name) // issuer labels may have changed
	l := labelsFor(cluster, crt)
	st := crt.Status
	if st.NotAfter != nil {
		m.expiration.With(l).Set(float64(st.NotAfter.Unix()))
		m.notAfter.With(l).Set(float64(st.NotAfter.Unix()))
	}
	if st.NotBefore != nil {
		m.notBefore.With(l).Set(float64(st.NotBefore.Unix()))
	}
	if st.RenewalTime != nil {
		m.renewal.With(l).Set(float64(st.RenewalTime.Unix()))
	}
	current := cmmeta.ConditionUnknown
	violation := false
	for _, c := range st.Conditions {
		switch c.Type {
		case cmapi.CertificateConditionReady:
			current = c.Status
		case ConditionPolicyViolation:
			violation = c.Status == cmmeta.ConditionTrue
		}
	}
	m.setViolation(cluster, crt.Namespace+"/"+crt.Name, violation)
	for _, v := range []cmmeta.ConditionStatus{cmmeta.ConditionTrue, cmmeta.ConditionFalse, cmmeta.ConditionUnknown} {
		rl := prometheus.Labels{"condition": string(v)}
		for k, val := range l {
			rl[k] = val
		}
		if v == current {
			m.ready.With(rl).Set(1)
		} else {
			m.ready.With(rl).Set(0)
		}
	}
}

// setViolation records whether one Certificate violates the policies and
// sets its cluster's count.
func (m *syncMetrics) setViolation(cluster multicluster.ClusterName, key string, violation bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.violating[cluster]
	if set == nil {
		set = map[string]bool{}
		m.violating[cluster] = set
	}
	if violation {
		set[key] = true
	} else {
		delete(set, key)
	}
	m.violations.WithLabelValues(string(cluster)).Set(float64(len(set)))
}

// forget drops a Certificate's series (deleted, or its cluster disengaged).
func (m *syncMetrics) forget(cluster multicluster.ClusterName, namespace, name string) {
	match := prometheus.Labels{"cluster": string(cluster), "namespace": namespace, "name": name}
	for _, v := range []*prometheus.GaugeVec{m.expiration, m.notBefore, m.notAfter, m.renewal, m.ready} {
		v.DeletePartialMatch(match)
	}
}

// forgetCluster drops every series of a cluster this replica stopped serving,
// so only the owner reports a cluster's Certificates.
func (m *syncMetrics) forgetCluster(cluster multicluster.ClusterName) {
	match := prometheus.Labels{"cluster": string(cluster)}
	for _, v := range []*prometheus.GaugeVec{m.expiration, m.notBefore, m.notAfter, m.renewal, m.ready, m.violations} {
		v.DeletePartialMatch(match)
	}
	m.mu.Lock()
	delete(m.violating, cluster)
	m.mu.Unlock()
}

// loopDetected counts a trip of the loop guard.
func (m *syncMetrics) loopDetected(cluster multicluster.ClusterName) {
	m.loops.WithLabelValues(string(cluster)).Inc()
}

func (m *syncMetrics) issued(cluster multicluster.ClusterName, result string, since time.Time) {
	m.issuance.WithLabelValues(string(cluster), result).Observe(time.Since(since).Seconds())
}

// metricsJanitor is engaged with every owned cluster and forgets its series
// when the engagement ends.
type metricsJanitor struct{ m *syncMetrics }

func (j metricsJanitor) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	go func() {
		<-ctx.Done()
		j.m.forgetCluster(name)
	}()
	return nil
}

// Start blocks until ctx is done; the janitor has no loop of its own.
func (j metricsJanitor) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
