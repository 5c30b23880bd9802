package rotation

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Progress reports: each replica is connected only to the clusters it owns
// (internal/shard), so each observes those and publishes what it saw; every
// replica steps with the union of the fresh reports.
//
//	replica A: its clusters ─▶ ConfigMap certhub-rotation-report-A {issuer: {at, clusters}}
//	replica B: its clusters ─▶ ConfigMap certhub-rotation-report-B
//	stepper (any replica): own view ∪ fresh reports ─▶ moved / missing / published
//
// A cluster no fresh report covers counts as not published and, in a wave
// rolled so far, as missing ("unreachable"): a rotation never advances on
// what nobody saw.
const (
	// ReportPrefix names a replica's report: ReportPrefix + identity.
	ReportPrefix = "certhub-rotation-report-"
)

// progress is what one replica saw of one cluster's part in a rotation.
type progress struct {
	// Published: the cluster's bundles hold the new CA.
	Published bool `json:"published"`
	// Moved of Total Certificates of the issuer are Ready and signed by the new CA.
	Moved int `json:"moved"`
	Total int `json:"total"`
	// Stuck are not moved and cannot for reasons of their own (their
	// Ready=False reason: stuckReasons); StuckNames name some of them.
	Stuck      int      `json:"stuck,omitempty"`
	StuckNames []string `json:"stuckNames,omitempty"`
	// OnNext Secrets hold a certificate signed by the new CA, Ready or not
	// (what an abort must bring back).
	OnNext int `json:"onNext,omitempty"`
}

// report is one replica's view of one rotation, as its ConfigMap holds it.
type report struct {
	At       time.Time           `json:"at"`
	Clusters map[string]progress `json:"clusters"`
}

func (r *Rotator) reportName() string { return ReportPrefix + sanitize.DNS1123(r.opts.Identity) }

// heartbeat is how often an unchanged report is written again; a report
// older than three heartbeats is not used.
func (r *Rotator) heartbeat() time.Duration { return 5 * r.opts.Tick }

// publish writes this replica's view of issuer's rotation, when it changed
// or a heartbeat has passed. A failed write is retried at the next tick.
func (r *Rotator) publish(ctx context.Context, issuer string, view map[multicluster.ClusterName]progress) {
	now := time.Now()
	rep := report{At: now, Clusters: map[string]progress{}}
	for name, p := range view {
		rep.Clusters[string(name)] = p
	}
	r.mu.Lock()
	last, ok := r.reported[issuer]
	r.mu.Unlock()
	if ok && maps.EqualFunc(last.Clusters, rep.Clusters, func(a, b progress) bool { return reflect.DeepEqual(a, b) }) && now.Sub(last.At) < r.heartbeat() {
		return
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		return
	}
	if err := r.writeReport(ctx, func(d map[string]string) { d[issuer] = string(raw) }); err != nil {
		r.log.Error(err, "failed to publish CA rotation progress; retrying", "issuer", issuer)
		return
	}
	r.mu.Lock()
	r.reported[issuer] = rep
	r.mu.Unlock()
}

// forget drops the reports of rotations no longer running.
func (r *Rotator) forget(ctx context.Context, active map[string]bool) {
	r.mu.Lock()
	var gone []string
	for issuer := range r.reported {
		if !active[issuer] {
			gone = append(gone, issuer)
		}
	}
	r.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	if err := r.writeReport(ctx, func(d map[string]string) {
		for _, issuer := range gone {
			delete(d, issuer)
		}
	}); err != nil {
		return
	}
	r.mu.Lock()
	for _, issuer := range gone {
		delete(r.reported, issuer)
	}
	r.mu.Unlock()
}

func (r *Rotator) writeReport(ctx context.Context, change func(map[string]string)) error {
	cm := &corev1.ConfigMap{}
	err := r.opts.Hub.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: r.reportName()}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: r.reportName(),
			Labels: map[string]string{hubapi.RotationReportLabel: "true"}}, Data: map[string]string{}}
		change(cm.Data)
		return r.opts.Hub.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	change(cm.Data)
	return r.opts.Hub.Update(ctx, cm)
}

// merge completes this replica's view with the fresh reports of the others.
func (r *Rotator) merge(ctx context.Context, issuer string, view map[multicluster.ClusterName]progress) map[multicluster.ClusterName]progress {
	out := make(map[multicluster.ClusterName]progress, len(view))
	maps.Copy(out, view)
	list := &corev1.ConfigMapList{}
	if err := r.opts.Hub.List(ctx, list, client.InNamespace(r.opts.Namespace), client.MatchingLabels{hubapi.RotationReportLabel: "true"}); err != nil {
		r.log.Error(err, "failed to read CA rotation progress reports", "issuer", issuer)
		return out
	}
	at := map[multicluster.ClusterName]time.Time{}
	now := time.Now()
	for _, cm := range list.Items {
		if cm.Name == r.reportName() {
			continue
		}
		var rep report
		if json.Unmarshal([]byte(cm.Data[issuer]), &rep) != nil || now.Sub(rep.At) > 3*r.heartbeat() {
			continue
		}
		for name, p := range rep.Clusters {
			n := multicluster.ClusterName(name)
			if _, mine := view[n]; mine || !rep.At.After(at[n]) {
				continue
			}
			out[n], at[n] = p, rep.At
		}
	}
	return out
}
