package certsync

import (
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// The per-Certificate series are made at scrape time from one record per
// Certificate: what was observed last is reported, a forgotten Certificate
// or cluster is not, and each cluster's violations are counted.
func TestCertificateSeriesFollowWhatWasObserved(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newSyncMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int64) *metav1.Time { v := metav1.NewTime(time.Unix(s, 0)); return &v }
	certificate := func(name string) *cmapi.Certificate {
		c := testCertificate()
		c.Namespace, c.Name = "apps", name
		return c
	}
	web := certificate("web")
	web.Status = cmapi.CertificateStatus{NotBefore: at(100), NotAfter: at(1000), RenewalTime: at(700),
		Conditions: []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue}}}
	bad := certificate("bad")
	bad.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse},
		{Type: ConditionPolicyViolation, Status: cmmeta.ConditionTrue}}
	m.observe("east", web)
	m.observe("east", bad)
	m.observe("west", web)

	want := `
# HELP certhub_certificate_expiration_timestamp_seconds The date after which the certificate expires (notAfter), as a Unix timestamp.
# TYPE certhub_certificate_expiration_timestamp_seconds gauge
certhub_certificate_expiration_timestamp_seconds{cluster="east",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 1000
certhub_certificate_expiration_timestamp_seconds{cluster="west",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 1000
# HELP certhub_certificate_ready_status The Ready condition of the Certificate: 1 for the current condition value, 0 for the others.
# TYPE certhub_certificate_ready_status gauge
certhub_certificate_ready_status{cluster="east",condition="False",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="bad",namespace="apps"} 1
certhub_certificate_ready_status{cluster="east",condition="False",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 0
certhub_certificate_ready_status{cluster="east",condition="True",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="bad",namespace="apps"} 0
certhub_certificate_ready_status{cluster="east",condition="True",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 1
certhub_certificate_ready_status{cluster="east",condition="Unknown",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="bad",namespace="apps"} 0
certhub_certificate_ready_status{cluster="east",condition="Unknown",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 0
certhub_certificate_ready_status{cluster="west",condition="False",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 0
certhub_certificate_ready_status{cluster="west",condition="True",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 1
certhub_certificate_ready_status{cluster="west",condition="Unknown",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="web",namespace="apps"} 0
# HELP certhub_certificate_policy_violations Issued certificates the issuance policies no longer allow (condition PolicyViolation=True; not revoked).
# TYPE certhub_certificate_policy_violations gauge
certhub_certificate_policy_violations{cluster="east"} 1
certhub_certificate_policy_violations{cluster="west"} 0
`
	names := []string{metricExpiration, metricReady, metricViolations}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.certs, metricRenewal); n != 2 {
		t.Errorf("renewal series: %d, want 2 (bad has no renewal time)", n)
	}

	// Re-observed with another issuer: one set of series, the new labels.
	web.Spec.IssuerRef.Name = "other"
	m.observe("west", web)
	if n := testutil.CollectAndCount(m.certs, metricExpiration); n != 2 {
		t.Errorf("expiration series after an issuer change: %d, want 2", n)
	}
	m.forget("east", "apps", "bad")
	if got := m.violations("east"); got != 0 {
		t.Errorf("east violations after forgetting bad: %d", got)
	}
	m.forgetCluster("west")
	if n := testutil.CollectAndCount(m.certs, metricReady); n != 3 {
		t.Errorf("ready series after forgetting west and bad: %d, want 3 (east's web)", n)
	}
}

// violations is the number of a cluster's Certificates with
// PolicyViolation=True, as certhub_certificate_policy_violations reports it.
func (m *syncMetrics) violations(cluster multicluster.ClusterName) int {
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
