package writegate

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// gateMetrics are the certhub_cluster_mode, certhub_cluster_conflict and
// certhub_migration_plan_certificates series of the clusters this replica owns.
type gateMetrics struct {
	mode     *prometheus.GaugeVec
	conflict *prometheus.GaugeVec
	plan     *prometheus.GaugeVec
}

func newGateMetrics(reg prometheus.Registerer) (*gateMetrics, error) {
	m := &gateMetrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_cluster_mode",
			Help: "1 for the cluster's mode (certhub.io/mode: issue, observe, off, force-issue, external), for the clusters this replica owns."}, []string{"cluster", "mode"}),
		conflict: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_cluster_conflict",
			Help: "1 while cert-manager is seen active in the cluster (the hub writes nothing there unless its mode is force-issue); no series otherwise."}, []string{"cluster"}),
		plan: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "certhub_migration_plan_certificates",
			Help: "Certificates of a cluster the hub does not write in, by what it would do (Keep, Adopt, Reissue, Issue, Refuse)."}, []string{"cluster", "action"}),
	}
	for _, c := range []prometheus.Collector{m.mode, m.conflict, m.plan} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *gateMetrics) setMode(name multicluster.ClusterName, mode Mode) {
	for _, other := range []Mode{Issue, Observe, Off, ForceIssue, External} {
		if other != mode {
			m.mode.DeleteLabelValues(string(name), string(other))
		}
	}
	m.mode.WithLabelValues(string(name), string(mode)).Set(1)
}

// setConflict keeps a series only while there is a conflict: a healthy
// cluster costs none.
func (m *gateMetrics) setConflict(name multicluster.ClusterName, on bool) {
	if !on {
		m.conflict.DeleteLabelValues(string(name))
		return
	}
	m.conflict.WithLabelValues(string(name)).Set(1)
}

func (m *gateMetrics) setPlan(name multicluster.ClusterName, counts map[Action]int) {
	for _, a := range []Action{ActionKeep, ActionAdopt, ActionReissue, ActionIssue, ActionRefuse} {
		if n, ok := counts[a]; ok {
			m.plan.WithLabelValues(string(name), string(a)).Set(float64(n))
		} else {
			m.plan.DeleteLabelValues(string(name), string(a))
		}
	}
}

func (m *gateMetrics) forget(name multicluster.ClusterName) {
	l := prometheus.Labels{"cluster": string(name)}
	m.mode.DeletePartialMatch(l)
	m.conflict.DeletePartialMatch(l)
	m.plan.DeletePartialMatch(l)
}
