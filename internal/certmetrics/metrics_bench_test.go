package certmetrics

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// A scrape of certsync's series for a replica owning 1,000 and 3,000
// clusters of 2 healthy Certificates and one not Ready each, per
// --certificate-metrics mode: samples (lines of the text exposition, a
// histogram's buckets included) and exposition bytes per owned cluster
// (ReportMetric), time and allocations per scrape (-benchmem).
func BenchmarkCertificateSeries(b *testing.B) {
	now := time.Now()
	for _, clusters := range []int{1000, 3000} {
		for _, mode := range []string{All, Problems, None} {
			b.Run(fmt.Sprintf("clusters=%d/mode=%s", clusters, mode), func(b *testing.B) {
				reg := prometheus.NewRegistry()
				m, err := New(Options{Registerer: reg, Mode: mode})
				if err != nil {
					b.Fatal(err)
				}
				for i := range clusters {
					cluster := multicluster.ClusterName(fmt.Sprintf("cluster-%05d", i))
					for j, ready := range []cmmeta.ConditionStatus{cmmeta.ConditionTrue, cmmeta.ConditionTrue, cmmeta.ConditionFalse} {
						crt := testCertificate()
						crt.Namespace, crt.Name = "apps", fmt.Sprintf("web-%d", j)
						if ready == cmmeta.ConditionTrue {
							crt.Status.NotBefore, crt.Status.NotAfter = &metav1.Time{Time: now}, &metav1.Time{Time: now.Add(90 * 24 * time.Hour)}
							crt.Status.RenewalTime = &metav1.Time{Time: now.Add(60 * 24 * time.Hour)}
						}
						crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: ready}}
						m.Observe(cluster, crt)
					}
					m.Issued(cluster, "success", now)
				}
				var samples, size int
				b.ReportAllocs()
				for b.Loop() {
					mfs, err := reg.Gather()
					if err != nil {
						b.Fatal(err)
					}
					var buf bytes.Buffer
					enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
					samples = 0
					for _, mf := range mfs {
						for _, mm := range mf.GetMetric() {
							samples++
							if h := mm.GetHistogram(); h != nil { // buckets, +Inf, sum and count, as exposed
								samples += len(h.GetBucket()) + 2
							}
						}
						if err := enc.Encode(mf); err != nil {
							b.Fatal(err)
						}
					}
					size = buf.Len()
				}
				b.ReportMetric(float64(samples)/float64(clusters), "samples/cluster")
				b.ReportMetric(float64(size)/float64(clusters), "bytes/cluster")
			})
		}
	}
}
