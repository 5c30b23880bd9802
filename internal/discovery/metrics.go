package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	// MetricExpiration is each discovered certificate's notAfter, soonest
	// Options.MaxSeries first; certhub's own are left out (certsync's
	// series and certhub_cluster_soonest_expiration_timestamp_seconds
	// report them).
	MetricExpiration = "certhub_discovered_certificate_expiration_timestamp_seconds"
	// MetricCertificates counts the discovered certificates by cluster and
	// managed (no series for a count of 0).
	MetricCertificates = "certhub_discovered_certificates"
	// MetricProblems counts the discovered certificates by cluster and problem.
	MetricProblems = "certhub_discovered_certificate_problems"
	// MetricDropped counts the certificates MetricExpiration leaves out.
	MetricDropped = "certhub_discovered_series_dropped"
	// MetricReads counts the Secrets read over every cluster, by result
	// (Listed: by the first full read's pages; Read, NotFound, Error: one
	// by one; Written: not read, the hub wrote that version).
	MetricReads = "certhub_discovery_secret_reads_total"
)

var (
	descExpiration = prometheus.NewDesc(MetricExpiration,
		"The notAfter of a TLS certificate found in a downstream Secret that certhub did not write, as a Unix time; managed is cert-manager or none.",
		[]string{"cluster", "namespace", "secret", "managed"}, nil)
	descCertificates = prometheus.NewDesc(MetricCertificates, "TLS certificates found in downstream Secrets, by who manages them.",
		[]string{"cluster", "managed"}, nil)
	descProblems = prometheus.NewDesc(MetricProblems,
		"Discovered certificates with a problem: Expired, ExpiredServed (an Ingress names it), WeakKey (RSA < 2048), SHA1Signature, Unparseable.",
		[]string{"cluster", "problem"}, nil)
	descDropped = prometheus.NewDesc(MetricDropped,
		"Discovered certificates left out of "+MetricExpiration+" by --discovery-max-series (the latest to expire).", nil, nil)
)

// metrics are discovery's counters and its collector of the records.
type metrics struct {
	d     *Discoverer
	reads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, d *Discoverer) (*metrics, error) {
	m := &metrics{d: d, reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReads,
		Help: "Secrets read by discovery (a changed kubernetes.io/tls Secret, or one an Ingress names), by result."}, []string{"result"})}
	for _, c := range []prometheus.Collector{m.reads, m} {
		if err := reg.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				return nil, errors.New("discovery: metrics already registered; give each Discoverer its own Registerer")
			}
			return nil, fmt.Errorf("failed to register discovery metrics: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descExpiration, descCertificates, descProblems, descDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the series are made from the
// records at scrape time.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	now := m.d.opts.clock.Now()
	type entry struct {
		cluster string
		Record
	}
	var entries []entry
	for name, st := range m.d.states() {
		records, _ := st.snapshot(now)
		counts, problems := map[Managed]int{}, map[Problem]int{}
		for _, r := range records {
			counts[r.Managed]++
			for _, p := range r.Problems {
				problems[p]++
			}
			if !r.NotAfter.IsZero() && r.Managed != ManagedByCerthub {
				entries = append(entries, entry{cluster: string(name), Record: r})
			}
		}
		for _, managed := range []Managed{ManagedByCerthub, ManagedByCertManager, ManagedByNone} {
			if counts[managed] > 0 {
				ch <- prometheus.MustNewConstMetric(descCertificates, prometheus.GaugeValue, float64(counts[managed]), string(name), string(managed))
			}
		}
		for p, n := range problems {
			ch <- prometheus.MustNewConstMetric(descProblems, prometheus.GaugeValue, float64(n), string(name), string(p))
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := a.NotAfter.Compare(b.NotAfter); c != 0 {
			return c
		}
		return strings.Compare(a.cluster+"/"+a.Namespace+"/"+a.Secret, b.cluster+"/"+b.Namespace+"/"+b.Secret)
	})
	dropped := 0
	if len(entries) > m.d.opts.MaxSeries {
		dropped = len(entries) - m.d.opts.MaxSeries
		entries = entries[:m.d.opts.MaxSeries]
	}
	for _, e := range entries {
		ch <- prometheus.MustNewConstMetric(descExpiration, prometheus.GaugeValue, float64(e.NotAfter.Unix()), e.cluster, e.Namespace, e.Secret, string(e.Managed))
	}
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.GaugeValue, float64(dropped))
}
