package certmetrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// The series are made at scrape time from one record per Certificate, for
// the Certificates --certificate-metrics selects: at "problems" only the
// not-Ready, overdue or soon-expiring ones have series of their own
// (expiration, renewal, ready, info), at "all" every one has cert-manager's
// set, at "none" none; every mode reports each cluster's counts by
// readiness, soonest expiry and violations. A forgotten Certificate or
// cluster is not reported.
func TestCertificateSeriesFollowWhatWasObserved(t *testing.T) {
	now := time.Unix(1_000_000_000, 0)
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(d)); return &v }
	certificate := func(name string) *cmapi.Certificate {
		c := testCertificate()
		c.Namespace, c.Name = "apps", name
		return c
	}
	ready := []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue}}
	web := certificate("web") // healthy
	web.Status = cmapi.CertificateStatus{NotBefore: at(-time.Hour), NotAfter: at(60 * 24 * time.Hour), RenewalTime: at(40 * 24 * time.Hour), Conditions: ready}
	overdue := certificate("overdue") // Ready, but past its renewal time
	overdue.Status = cmapi.CertificateStatus{NotAfter: at(20 * 24 * time.Hour), RenewalTime: at(-time.Hour), Conditions: ready}
	bad := certificate("bad") // not Ready, and the policies no longer allow it
	bad.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse},
		{Type: cmapi.CertificateConditionType(reasons.PolicyViolationCondition), Status: cmmeta.ConditionTrue}}
	observe := func(m *Metrics) {
		m.Observe("east", web)
		m.Observe("east", overdue)
		m.Observe("east", bad)
		m.Observe("west", web)
	}
	perCluster := fmt.Sprintf(`
# HELP certhub_certificates Certificates of the cluster by Ready condition value; no series for a value no Certificate has.
# TYPE certhub_certificates gauge
certhub_certificates{cluster="east",ready="False"} 1
certhub_certificates{cluster="east",ready="True"} 2
certhub_certificates{cluster="west",ready="True"} 1
# HELP certhub_cluster_soonest_expiration_timestamp_seconds The soonest notAfter of the cluster's Certificates, as a Unix timestamp.
# TYPE certhub_cluster_soonest_expiration_timestamp_seconds gauge
certhub_cluster_soonest_expiration_timestamp_seconds{cluster="east"} %[1]d
certhub_cluster_soonest_expiration_timestamp_seconds{cluster="west"} %[2]d
# HELP certhub_certificate_policy_violations Issued certificates the issuance policies no longer allow (condition PolicyViolation=True; not revoked); no series while none.
# TYPE certhub_certificate_policy_violations gauge
certhub_certificate_policy_violations{cluster="east"} 1
`, overdue.Status.NotAfter.Unix(), web.Status.NotAfter.Unix())
	cases := []struct {
		mode   string
		series string // per Certificate
		count  int    // every series of the table
	}{
		{Problems, fmt.Sprintf(`
# HELP certhub_certificate_ready_status 1 for the Certificate's current Ready condition value (one series per Certificate).
# TYPE certhub_certificate_ready_status gauge
certhub_certificate_ready_status{cluster="east",condition="False",name="bad",namespace="apps"} 1
certhub_certificate_ready_status{cluster="east",condition="True",name="overdue",namespace="apps"} 1
# HELP certhub_certificate_info 1 per Certificate with series, labelled with its issuer (join on cluster, namespace, name).
# TYPE certhub_certificate_info gauge
certhub_certificate_info{cluster="east",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="bad",namespace="apps"} 1
certhub_certificate_info{cluster="east",issuer_group="cert-manager.io",issuer_kind="ClusterIssuer",issuer_name="ca",name="overdue",namespace="apps"} 1
# HELP certhub_certificate_renewal_timestamp_seconds When certhub will renew the certificate, as a Unix timestamp.
# TYPE certhub_certificate_renewal_timestamp_seconds gauge
certhub_certificate_renewal_timestamp_seconds{cluster="east",name="overdue",namespace="apps"} %d
`, overdue.Status.RenewalTime.Unix()), 6 + 6},
		{All, "", 6 + 2*6 + 5 + 2}, // web ×2: 6 series each; overdue: 5 (no notBefore); bad: ready and info
		{None, "", 6},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := New(Options{Registerer: reg, Mode: tc.mode, Clock: clocktesting.NewFakePassiveClock(now)})
			if err != nil {
				t.Fatal(err)
			}
			observe(m)
			names := []string{metricCerts, metricSoonest, metricViolations}
			want := perCluster
			if tc.series != "" {
				names = append(names, metricReady, metricInfo, metricRenewal)
				want += tc.series
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(m.certs); n != tc.count {
				t.Errorf("%d series, want %d", n, tc.count)
			}
			m.Forget("east", "apps", "bad")
			if got := m.Violations("east"); got != 0 {
				t.Errorf("east violations after forgetting bad: %d", got)
			}
		})
	}
}

// A cluster that leaves the replica leaves no series behind: every
// certhub_ series with its cluster label is gone, the other cluster's stay.
func TestDisengagedClusterLeavesNoSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(Options{Registerer: reg, Mode: All})
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range []multicluster.ClusterName{"east", "west"} {
		crt := testCertificate()
		crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse},
			{Type: cmapi.CertificateConditionType(reasons.PolicyViolationCondition), Status: cmmeta.ConditionTrue}}
		m.Observe(cluster, crt)
		m.Issued(cluster, "success", time.Now())
		m.Issued(cluster, "failed", time.Now())
		m.LoopDetected(cluster)
		m.BudgetWait(cluster)
	}
	if got := fixture.SeriesOfCluster(t, reg, "west"); got == 0 {
		t.Fatal("no series of west before it left: the test would prove nothing")
	}
	m.ForgetCluster("west")
	if got := fixture.SeriesOfCluster(t, reg, "west"); got != 0 {
		t.Errorf("%d series of west after it left, want 0", got)
	}
	if got := fixture.SeriesOfCluster(t, reg, "east"); got == 0 {
		t.Error("east's series went with west's")
	}
}

// testCertificate is a Certificate of issuer ClusterIssuer "ca".
func testCertificate() *cmapi.Certificate {
	return &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: cmapi.CertificateSpec{SecretName: "web-tls", DNSNames: []string{"web.example.com"},
			IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}}}
}
