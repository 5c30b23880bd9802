package writegate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/hubreport"
)

const (
	// ReportPrefix names a cluster's report: ReportPrefix + the cluster
	// name, sanitized.
	ReportPrefix = "certhub-migration-"
	// ReportKey holds the report's JSON.
	ReportKey = "report.json"
	// plainReport stands for a cluster in mode issue that the hub writes
	// in, or in mode external, with nothing to report: its report is
	// deleted.
	plainReport = "-"
)

// Report is what the hub does in one cluster, as the replica that owns it
// publishes it (ConfigMap ReportPrefix+cluster in the hub namespace). A
// cluster in mode issue that the hub writes in has none.
type Report struct {
	Cluster string `json:"cluster"`
	Mode    Mode   `json:"mode"`
	// InvalidMode is the label's value when it is no mode (read as observe).
	InvalidMode string `json:"invalidMode,omitempty"`
	// Writes: the hub writes in the cluster now.
	Writes bool `json:"writes"`
	// Conflict: cert-manager was seen active at the last look; Message says how.
	Conflict bool   `json:"conflict,omitempty"`
	Message  string `json:"message,omitempty"`
	// Since is when the last look's answer began to hold.
	Since *time.Time `json:"since,omitempty"`
	// Counts of the plan's Certificates by action (all of them).
	Counts map[Action]int `json:"counts,omitempty"`
	// Plan is what the hub would do with each Certificate while it does
	// not write here, sorted by namespace and name; at most MaxPlanRows.
	Plan []Verdict `json:"plan,omitempty"`
	// Truncated counts the rows left out of Plan.
	Truncated int `json:"truncated,omitempty"`
	// By is the replica that wrote the report.
	By string `json:"by,omitempty"`
}

// ReportName is the ConfigMap that holds cluster's report.
func ReportName(cluster string) string { return ReportPrefix + sanitize.DNS1123(cluster) }

// reportOf builds cluster's report from the gate's state.
func (g *Gate) reportOf(name multicluster.ClusterName) Report {
	mode, valid := ModeOf(g.opts.Labels(name))
	r := Report{Cluster: string(name), Mode: mode, Writes: g.Writes(name)}
	if stamp, ok := g.opts.Fence.Owns(name); ok {
		r.By = strings.SplitN(stamp, "/", 2)[0]
	}
	if !valid {
		r.InvalidMode = g.opts.Labels(name)[hubapi.ModeLabel]
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(name)
	if !st.since.IsZero() {
		since := st.since.UTC()
		r.Since = &since
	}
	r.Conflict, r.Message = st.conflict, st.message
	if r.Writes || mode == Off || mode == External {
		st.plan = nil // written now: the Certificates' own status says it
	}
	if len(st.plan) == 0 {
		return r
	}
	r.Counts = map[Action]int{}
	for _, v := range st.plan {
		r.Counts[v.Action]++
		r.Plan = append(r.Plan, v)
	}
	slices.SortFunc(r.Plan, func(a, b Verdict) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	if len(r.Plan) > MaxPlanRows {
		r.Truncated = len(r.Plan) - MaxPlanRows
		r.Plan = r.Plan[:MaxPlanRows]
	}
	return r
}

// report writes cluster's report when it changed.
func (g *Gate) report(ctx context.Context, name multicluster.ClusterName) error {
	r := g.reportOf(name)
	g.metrics.setPlan(name, r.Counts)
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if (r.Writes && r.Mode == Issue || r.Mode == External) && len(r.Plan) == 0 {
		raw = []byte(plainReport) // the common case has no report: one object per migrating cluster, not per cluster
	}
	g.mu.Lock()
	same := g.stateLocked(name).reported == string(raw)
	g.mu.Unlock()
	if same {
		return nil
	}
	key := client.ObjectKey{Namespace: g.opts.Namespace, Name: ReportName(string(name))}
	if string(raw) == plainReport {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		err = client.IgnoreNotFound(g.opts.Hub.Delete(ctx, cm))
	} else {
		err = hubreport.Put(ctx, g.opts.Hub, key, hubapi.MigrationReportLabel, map[string]string{ReportKey: string(raw)}, nil)
	}
	if err != nil {
		return fmt.Errorf("failed to write the migration report of %s: %w", name, err)
	}
	g.mu.Lock()
	g.stateLocked(name).reported = string(raw)
	g.mu.Unlock()
	return nil
}

// ReadReports returns every cluster's report in namespace, by cluster.
func ReadReports(ctx context.Context, c client.Reader, namespace string) (map[string]Report, error) {
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{hubapi.MigrationReportLabel: "true"}); err != nil {
		return nil, fmt.Errorf("failed to list migration reports in %s: %w", namespace, err)
	}
	out := make(map[string]Report, len(list.Items))
	for _, cm := range list.Items {
		var r Report
		if err := json.Unmarshal([]byte(cm.Data[ReportKey]), &r); err != nil || r.Cluster == "" {
			continue // not one of ours
		}
		out[r.Cluster] = r
	}
	return out, nil
}
