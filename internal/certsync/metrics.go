package certsync

import (
	"context"
	"errors"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/secretcache"
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

// syncMetrics holds certsync's metrics. The per-Certificate series are not
// kept as gauges: a replica serving a few thousand Certificates would hold
// seven labelled series each (~6 KiB; 21 MB in P6' at 1,000 clusters) and
// scan every vector to delete one. certTable keeps one small record per
// Certificate and makes the series when Prometheus scrapes.
type syncMetrics struct {
	certs              *certTable
	issuance           *prometheus.HistogramVec
	loops, budgetWaits *prometheus.CounterVec
}

func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	m := &syncMetrics{
		certs: newCertTable(),
		issuance: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricIssuance,
			Help:    "Time from deciding to issue to the Secret written, by result (success or failed).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"cluster", "result"}),
		loops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLoops,
			Help: "Times the loop guard paused a Certificate that was issued again and again for one spec (reason IssuanceLoopDetected)."}, []string{"cluster"}),
		budgetWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricBudgetWaits,
			Help: "Issuances held back by the hub's issuance budget (--issuance-rate), counted when a Certificate starts waiting (Issuing=True, reason RateLimited)."}, []string{"cluster"}),
	}
	for _, c := range []prometheus.Collector{m.certs, m.issuance, m.loops, m.budgetWaits} {
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

// observe records the Certificate's status as written.
func (m *syncMetrics) observe(cluster multicluster.ClusterName, crt *cmapi.Certificate) {
	ref := crt.Spec.IssuerRef
	rec := certRecord{issuerName: ref.Name, issuerKind: certspec.IssuerKind(ref), issuerGroup: ref.Group, ready: cmmeta.ConditionUnknown}
	st := crt.Status
	if st.NotAfter != nil {
		rec.notAfter = st.NotAfter.Unix()
	}
	if st.NotBefore != nil {
		rec.notBefore = st.NotBefore.Unix()
	}
	if st.RenewalTime != nil {
		rec.renewal = st.RenewalTime.Unix()
	}
	for _, c := range st.Conditions {
		switch c.Type {
		case cmapi.CertificateConditionReady:
			rec.ready = c.Status
		case ConditionPolicyViolation:
			rec.violation = c.Status == cmmeta.ConditionTrue
		}
	}
	m.certs.set(cluster, types.NamespacedName{Namespace: crt.Namespace, Name: crt.Name}, rec)
}

// forget drops a Certificate's series (deleted).
func (m *syncMetrics) forget(cluster multicluster.ClusterName, namespace, name string) {
	m.certs.remove(cluster, types.NamespacedName{Namespace: namespace, Name: name})
}

// forgetCluster drops every series of a cluster this replica stopped serving,
// so only the owner reports a cluster's Certificates.
func (m *syncMetrics) forgetCluster(cluster multicluster.ClusterName) {
	m.certs.removeCluster(cluster)
}

// certRecord is what the metrics say of one Certificate; a zero time is unset.
type certRecord struct {
	issuerName, issuerKind, issuerGroup string
	notBefore, notAfter, renewal        int64
	ready                               cmmeta.ConditionStatus
	violation                           bool
}

// certTable is a prometheus.Collector of the per-Certificate series
// (cert-manager's certmanager_certificate_* with a cluster label) and of
// each cluster's policy violation count.
type certTable struct {
	mu        sync.RWMutex
	byCluster map[multicluster.ClusterName]map[types.NamespacedName]certRecord

	expiration, notBefore, notAfter, renewal, ready, violations *prometheus.Desc
}

func newCertTable() *certTable {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	withCondition := append(append([]string{}, certLabels...), "condition")
	return &certTable{
		byCluster:  map[multicluster.ClusterName]map[types.NamespacedName]certRecord{},
		expiration: d(metricExpiration, "The date after which the certificate expires (notAfter), as a Unix timestamp.", certLabels...),
		notBefore:  d(metricNotBefore, "The certificate's notBefore, as a Unix timestamp.", certLabels...),
		notAfter:   d(metricNotAfter, "The certificate's notAfter, as a Unix timestamp.", certLabels...),
		renewal:    d(metricRenewal, "When certhub will renew the certificate, as a Unix timestamp.", certLabels...),
		ready:      d(metricReady, "The Ready condition of the Certificate: 1 for the current condition value, 0 for the others.", withCondition...),
		violations: d(metricViolations, "Issued certificates the issuance policies no longer allow (condition PolicyViolation=True; not revoked).", "cluster"),
	}
}

func (t *certTable) set(cluster multicluster.ClusterName, key types.NamespacedName, r certRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.byCluster[cluster]
	if c == nil {
		c = map[types.NamespacedName]certRecord{}
		t.byCluster[cluster] = c
	}
	c[key] = r
}

func (t *certTable) remove(cluster multicluster.ClusterName, key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byCluster[cluster], key)
}

func (t *certTable) removeCluster(cluster multicluster.ClusterName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byCluster, cluster)
}

// Describe implements prometheus.Collector.
func (t *certTable) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{t.expiration, t.notBefore, t.notAfter, t.renewal, t.ready, t.violations} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the series of every recorded
// Certificate, and a violation count for every cluster with Certificates.
func (t *certTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for cluster, certs := range t.byCluster {
		violations := 0
		for key, r := range certs {
			l := []string{string(cluster), key.Namespace, key.Name, r.issuerName, r.issuerKind, r.issuerGroup}
			if r.notAfter != 0 {
				gauge(t.expiration, float64(r.notAfter), l...)
				gauge(t.notAfter, float64(r.notAfter), l...)
			}
			if r.notBefore != 0 {
				gauge(t.notBefore, float64(r.notBefore), l...)
			}
			if r.renewal != 0 {
				gauge(t.renewal, float64(r.renewal), l...)
			}
			for _, v := range []cmmeta.ConditionStatus{cmmeta.ConditionTrue, cmmeta.ConditionFalse, cmmeta.ConditionUnknown} {
				value := 0.0
				if v == r.ready {
					value = 1
				}
				gauge(t.ready, value, append(l, string(v))...)
			}
			if r.violation {
				violations++
			}
		}
		gauge(t.violations, float64(violations), string(cluster))
	}
}

// loopDetected counts a trip of the loop guard.
func (m *syncMetrics) loopDetected(cluster multicluster.ClusterName) {
	m.loops.WithLabelValues(string(cluster)).Inc()
}

func (m *syncMetrics) issued(cluster multicluster.ClusterName, result string, since time.Time) {
	m.issuance.WithLabelValues(string(cluster), result).Observe(time.Since(since).Seconds())
}

// metricsJanitor is engaged with every owned cluster and forgets its series
// and its Secrets when the engagement ends.
type metricsJanitor struct {
	m       *syncMetrics
	secrets *secretcache.Store
}

func (j metricsJanitor) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	context.AfterFunc(ctx, func() {
		j.m.forgetCluster(name)
		j.secrets.Drop(name)
	})
	return nil
}

// Start blocks until ctx is done; the janitor has no loop of its own.
func (j metricsJanitor) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
