package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hubreport"
)

const (
	// ReportPrefix names a cluster's report: ReportPrefix + the cluster
	// name, sanitized.
	ReportPrefix = "certhub-discovered-"
	// ReportKey holds the report's JSON.
	ReportKey = "report.json"
	// maxReportBytes keeps a report well inside an object's 1 MiB.
	maxReportBytes = 900 << 10
)

// Report is what discovery found in one cluster, as the replica that owns
// the cluster publishes it (ConfigMap ReportPrefix+cluster in the hub
// namespace, label hubapi.DiscoveryReportLabel).
type Report struct {
	Cluster string `json:"cluster"`
	// Synced: the cluster's watch has listed every Secret once.
	Synced bool `json:"synced"`
	// Total counts the certificates found, Counts them by who manages them
	// and Problems by flag.
	Total    int             `json:"total"`
	Counts   map[Managed]int `json:"counts,omitempty"`
	Problems map[Problem]int `json:"problems,omitempty"`
	// Certificates are sorted by notAfter, soonest first (unparseable
	// ones first of all); at most Options.MaxReportEntries.
	Certificates []Record `json:"certificates,omitempty"`
	// Truncated counts the certificates left out of Certificates.
	Truncated int `json:"truncated,omitempty"`
	// By is the replica that wrote the report.
	By string `json:"by,omitempty"`
}

// ReportName is the ConfigMap that holds cluster's report.
func ReportName(cluster string) string { return ReportPrefix + sanitize.DNS1123(cluster) }

// SortByExpiry orders records soonest notAfter first (no notAfter first of
// all), then by namespace and Secret.
func SortByExpiry(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		if c := a.NotAfter.Compare(b.NotAfter); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Secret, b.Namespace+"/"+b.Secret)
	})
}

// reportOf builds the report of records (at now).
func reportOf(cluster string, records []Record, synced bool, limit int) Report {
	r := Report{Cluster: cluster, Synced: synced, Total: len(records)}
	SortByExpiry(records)
	for _, rec := range records {
		if r.Counts == nil {
			r.Counts = map[Managed]int{}
		}
		r.Counts[rec.Managed]++
		for _, p := range rec.Problems {
			if r.Problems == nil {
				r.Problems = map[Problem]int{}
			}
			r.Problems[p]++
		}
	}
	if len(records) > limit {
		r.Truncated = len(records) - limit
		records = records[:limit]
	}
	r.Certificates = records
	return r
}

// encode marshals r, dropping entries until it fits maxReportBytes.
func (r Report) encode() ([]byte, error) {
	for {
		raw, err := json.Marshal(r)
		if err != nil || len(raw) <= maxReportBytes || len(r.Certificates) == 0 {
			return raw, err
		}
		keep := len(r.Certificates) / 2
		r.Truncated += len(r.Certificates) - keep
		r.Certificates = r.Certificates[:keep]
	}
}

// report writes cluster's report when this replica owns the cluster and
// the report changed.
func (d *Discoverer) report(ctx context.Context, name multicluster.ClusterName, st *clusterState) error {
	by := ""
	if d.opts.Fence != nil {
		stamp, ok := d.opts.Fence.Owns(name)
		if !ok {
			return nil
		}
		by = strings.SplitN(stamp, "/", 2)[0]
	}
	records, synced := st.snapshot(d.opts.clock.Now())
	r := reportOf(string(name), records, synced, d.opts.MaxReportEntries)
	r.By = by
	raw, err := r.encode()
	if err != nil {
		return fmt.Errorf("failed to encode the discovery report of %s: %w", name, err)
	}
	sum := sha256.Sum256(raw)
	st.mu.Lock()
	same := st.reported == sum
	st.mu.Unlock()
	if same {
		return nil
	}
	if err := hubreport.Put(ctx, d.opts.Hub, client.ObjectKey{Namespace: d.opts.Namespace, Name: ReportName(string(name))}, hubapi.DiscoveryReportLabel,
		map[string]string{ReportKey: string(raw)}, nil); err != nil {
		return fmt.Errorf("failed to write the discovery report of %s: %w", name, err)
	}
	st.mu.Lock()
	st.reported = sum
	st.mu.Unlock()
	return nil
}

// ReadReports returns every cluster's report in namespace, by cluster,
// with each record's time-bound problems recomputed at now (a report is
// as old as its last change).
func ReadReports(ctx context.Context, c client.Reader, namespace string, now time.Time) (map[string]Report, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{hubapi.DiscoveryReportLabel: "true"}); err != nil {
		return nil, fmt.Errorf("failed to list discovery reports in %s: %w", namespace, err)
	}
	out := make(map[string]Report, len(list.Items))
	for _, cm := range list.Items {
		var r Report
		if err := json.Unmarshal([]byte(cm.Data[ReportKey]), &r); err != nil || r.Cluster == "" {
			continue // not one of ours
		}
		for i, rec := range r.Certificates {
			rec.static = slices.DeleteFunc(slices.Clone(rec.Problems), func(p Problem) bool { return p == ProblemExpired || p == ProblemExpiredServed })
			r.Certificates[i] = rec.at(now)
		}
		out[r.Cluster] = r
	}
	return out, nil
}
