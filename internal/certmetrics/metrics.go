package certmetrics

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
)

// Metric names mirror cert-manager's certmanager_certificate_* so dashboards
// and alerts port over by swapping the prefix and adding the cluster label.
const (
	metricExpiration  = "certhub_certificate_expiration_timestamp_seconds"
	metricNotBefore   = "certhub_certificate_not_before_timestamp_seconds"
	metricNotAfter    = "certhub_certificate_not_after_timestamp_seconds"
	metricRenewal     = "certhub_certificate_renewal_timestamp_seconds"
	metricReady       = "certhub_certificate_ready_status"
	metricInfo        = "certhub_certificate_info"
	metricIssuance    = "certhub_certificate_issuance_duration_seconds"
	metricIssuances   = "certhub_certificate_issuances_total"
	metricLoops       = "certhub_certificate_issuance_loops_total"
	metricBudgetWaits = "certhub_certificate_budget_waits_total"
	metricViolations  = "certhub_certificate_policy_violations"
	metricCerts       = "certhub_certificates"
	metricSoonest     = "certhub_cluster_soonest_expiration_timestamp_seconds"
)

// Which Certificates have their own series (Options.Mode, --certificate-metrics).
const (
	// All: every Certificate (cert-manager's set: expiration, not_before,
	// not_after, renewal, ready, info).
	All = "all"
	// Problems: only Certificates that need a look — not Ready, past their
	// renewal time, or expiring within ProblemWindow — with expiration,
	// renewal, ready and info. The default: a fleet's alerts need no more,
	// and a healthy cluster costs no series per Certificate.
	Problems = "problems"
	// None: no per-Certificate series; the per-cluster counts and soonest
	// expiry stay.
	None = "none"
	// DefaultMode is Problems.
	DefaultMode = Problems
)

// Modes are the values of Options.Mode.
var Modes = []string{All, Problems, None}

// ProblemWindow is how soon an expiry makes a Certificate a problem (with
// series at Problems), as the shipped alert
// CerthubCertificateExpiringWithoutRenewal looks 7 days ahead.
const ProblemWindow = 7 * 24 * time.Hour

var certLabels = []string{"cluster", "namespace", "name"}

// Metrics holds the certhub_certificate_* metrics certsync reports. The per-Certificate series are not
// kept as gauges: a replica serving a few thousand Certificates would hold
// labelled series for each and scan every vector to delete one. certTable
// keeps one small record per Certificate and makes the series when
// Prometheus scrapes. Everything labelled with a cluster is deleted when
// the cluster leaves the replica (forgetCluster); the issuance histogram
// carries no cluster label (its buckets would cost 16 series per cluster).
type Metrics struct {
	certs                         *certTable
	issuance                      *prometheus.HistogramVec
	issuances, loops, budgetWaits *prometheus.CounterVec
}

// Options configure Metrics.
type Options struct {
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Mode says which Certificates have series of their own (All,
	// Problems, None). Defaults to DefaultMode.
	Mode string
	// Clock decides what is overdue or soon expiring at scrape time.
	// Defaults to the real clock.
	Clock clock.PassiveClock
}

// New registers the metrics with opts.Registerer.
func New(opts Options) (*Metrics, error) {
	if opts.Mode == "" {
		opts.Mode = DefaultMode
	}
	if !slices.Contains(Modes, opts.Mode) {
		return nil, fmt.Errorf("certmetrics: Mode %q: want one of %v", opts.Mode, Modes)
	}
	if opts.Registerer == nil {
		return nil, errors.New("certmetrics: Registerer is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	reg := opts.Registerer
	m := &Metrics{
		certs: newCertTable(opts.Mode, opts.Clock),
		issuance: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricIssuance,
			Help:    "Time from deciding to issue to the Secret written, by result (success or failed), over every cluster this replica serves.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"result"}),
		issuances: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricIssuances,
			Help: "Issuances finished, by cluster and result (success or failed)."}, []string{"cluster", "result"}),
		loops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLoops,
			Help: "Times the loop guard paused a Certificate that was issued again and again for one spec (reason IssuanceLoopDetected)."}, []string{"cluster"}),
		budgetWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricBudgetWaits,
			Help: "Issuances held back by the hub's issuance budget (--issuance-rate), counted when a Certificate starts waiting (Issuing=True, reason RateLimited)."}, []string{"cluster"}),
	}
	for _, c := range []prometheus.Collector{m.certs, m.issuance, m.issuances, m.loops, m.budgetWaits} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if errors.As(err, &are) {
				return nil, errors.New("certmetrics: metrics already registered; give each reconciler in a process its own Registerer")
			}
			return nil, err
		}
	}
	return m, nil
}

// Observe records the Certificate's status as written.
func (m *Metrics) Observe(cluster multicluster.ClusterName, crt *cmapi.Certificate) {
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
		case cmapi.CertificateConditionType(reasons.PolicyViolationCondition):
			rec.violation = c.Status == cmmeta.ConditionTrue
		}
	}
	m.certs.set(cluster, types.NamespacedName{Namespace: crt.Namespace, Name: crt.Name}, rec)
}

// Forget drops a Certificate's series (deleted).
func (m *Metrics) Forget(cluster multicluster.ClusterName, namespace, name string) {
	m.certs.remove(cluster, types.NamespacedName{Namespace: namespace, Name: name})
}

// ForgetCluster drops every series of a cluster this replica stopped
// serving, so only the owner reports a cluster and a replica keeps nothing
// of the clusters it once served.
func (m *Metrics) ForgetCluster(cluster multicluster.ClusterName) {
	m.certs.removeCluster(cluster)
	l := prometheus.Labels{"cluster": string(cluster)}
	m.issuances.DeletePartialMatch(l)
	m.loops.DeletePartialMatch(l)
	m.budgetWaits.DeletePartialMatch(l)
}

// certRecord is what the metrics say of one Certificate; a zero time is unset.
type certRecord struct {
	issuerName, issuerKind, issuerGroup string
	notBefore, notAfter, renewal        int64
	ready                               cmmeta.ConditionStatus
	violation                           bool
}

// problem reports whether r needs a look at now: not Ready, past its
// renewal time, or expiring within ProblemWindow.
func (r certRecord) problem(now int64) bool {
	return r.ready != cmmeta.ConditionTrue || (r.renewal != 0 && r.renewal < now) || (r.notAfter != 0 && r.notAfter < now+int64(ProblemWindow/time.Second))
}

// certTable is a prometheus.Collector of the per-Certificate series
// (cert-manager's certmanager_certificate_* with a cluster label, for the
// Certificates mode selects) and of each cluster's counts.
type certTable struct {
	mode      string
	clock     clock.PassiveClock
	mu        sync.RWMutex
	byCluster map[multicluster.ClusterName]map[types.NamespacedName]certRecord

	expiration, notBefore, notAfter, renewal, ready, info, violations, certs, soonest *prometheus.Desc
}

func newCertTable(mode string, clk clock.PassiveClock) *certTable {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &certTable{
		mode: mode, clock: clk,
		byCluster:  map[multicluster.ClusterName]map[types.NamespacedName]certRecord{},
		expiration: d(metricExpiration, "The date after which the certificate expires (notAfter), as a Unix timestamp.", certLabels...),
		notBefore:  d(metricNotBefore, "The certificate's notBefore, as a Unix timestamp (--certificate-metrics=all).", certLabels...),
		notAfter:   d(metricNotAfter, "The certificate's notAfter, as a Unix timestamp (--certificate-metrics=all).", certLabels...),
		renewal:    d(metricRenewal, "When certhub will renew the certificate, as a Unix timestamp.", certLabels...),
		ready:      d(metricReady, "1 for the Certificate's current Ready condition value (one series per Certificate).", append(append([]string{}, certLabels...), "condition")...),
		info: d(metricInfo, "1 per Certificate with series, labelled with its issuer (join on cluster, namespace, name).",
			append(append([]string{}, certLabels...), "issuer_name", "issuer_kind", "issuer_group")...),
		violations: d(metricViolations, "Issued certificates the issuance policies no longer allow (condition PolicyViolation=True; not revoked); no series while none.", "cluster"),
		certs:      d(metricCerts, "Certificates of the cluster by Ready condition value; no series for a value no Certificate has.", "cluster", "ready"),
		soonest:    d(metricSoonest, "The soonest notAfter of the cluster's Certificates, as a Unix timestamp.", "cluster"),
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
	for _, d := range []*prometheus.Desc{t.expiration, t.notBefore, t.notAfter, t.renewal, t.ready, t.info, t.violations, t.certs, t.soonest} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: per cluster its counts by
// readiness, soonest expiry and violations (when any); per Certificate the
// series mode selects.
func (t *certTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	now := t.clock.Now().Unix()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for cluster, certs := range t.byCluster {
		var ready [3]int // True, False, Unknown
		violations := 0
		var soonest int64
		for key, r := range certs {
			switch r.ready {
			case cmmeta.ConditionTrue:
				ready[0]++
			case cmmeta.ConditionFalse:
				ready[1]++
			default:
				ready[2]++
			}
			if r.violation {
				violations++
			}
			if r.notAfter != 0 && (soonest == 0 || r.notAfter < soonest) {
				soonest = r.notAfter
			}
			if t.mode == None || (t.mode != All && !r.problem(now)) {
				continue
			}
			l := []string{string(cluster), key.Namespace, key.Name}
			if r.notAfter != 0 {
				gauge(t.expiration, float64(r.notAfter), l...)
			}
			if r.renewal != 0 {
				gauge(t.renewal, float64(r.renewal), l...)
			}
			gauge(t.ready, 1, append(l, string(r.ready))...)
			gauge(t.info, 1, append(l, r.issuerName, r.issuerKind, r.issuerGroup)...)
			if t.mode == All {
				if r.notAfter != 0 {
					gauge(t.notAfter, float64(r.notAfter), l...)
				}
				if r.notBefore != 0 {
					gauge(t.notBefore, float64(r.notBefore), l...)
				}
			}
		}
		for i, v := range []cmmeta.ConditionStatus{cmmeta.ConditionTrue, cmmeta.ConditionFalse, cmmeta.ConditionUnknown} {
			if ready[i] > 0 {
				gauge(t.certs, float64(ready[i]), string(cluster), string(v))
			}
		}
		if soonest != 0 {
			gauge(t.soonest, float64(soonest), string(cluster))
		}
		if violations > 0 {
			gauge(t.violations, float64(violations), string(cluster))
		}
	}
}

// LoopDetected counts a trip of the loop guard.
func (m *Metrics) LoopDetected(cluster multicluster.ClusterName) {
	m.loops.WithLabelValues(string(cluster)).Inc()
}

// BudgetWait counts an issuance starting to wait for the issuance budget.
func (m *Metrics) BudgetWait(cluster multicluster.ClusterName) {
	m.budgetWaits.WithLabelValues(string(cluster)).Inc()
}

// Issued records an issuance that finished with result ("success" or
// "failed"), decided at since.
func (m *Metrics) Issued(cluster multicluster.ClusterName, result string, since time.Time) {
	m.issuance.WithLabelValues(result).Observe(time.Since(since).Seconds())
	m.issuances.WithLabelValues(string(cluster), result).Inc()
}

// Violations is the number of a cluster's Certificates with
// PolicyViolation=True, as certhub_certificate_policy_violations reports it.
func (m *Metrics) Violations(cluster multicluster.ClusterName) int {
	m.certs.mu.RLock()
	defer m.certs.mu.RUnlock()
	n := 0
	for _, r := range m.certs.byCluster[cluster] {
		if r.violation {
			n++
		}
	}
	return n
}
