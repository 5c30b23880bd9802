package migration

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// certManager is cert-manager running in one cluster, stopped once.
type certManager struct {
	t       *testing.T
	r       *cmrunner.Runner
	stopped bool
}

func (c *certManager) stop() {
	c.t.Helper()
	if c.stopped {
		return
	}
	c.stopped = true
	if err := c.r.Stop(); err != nil {
		c.t.Errorf("cert-manager's controllers: %v", err)
	}
}

// startCertManager runs cert-manager's controllers against cp (holding its
// leader-election Lease, as the binary does), after giving namespace ns
// cert-manager's CA Issuer cmIssuer.
func startCertManager(t *testing.T, cp *testbed.ControlPlane) *certManager {
	t.Helper()
	fixture.EnsureNamespace(t, cp.Client, ns)
	create(t, cp, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmIssuer}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKeyPEM}},
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmIssuer},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: cmIssuer}}}})
	return runCertManager(t, cp)
}

// startCertManagerClusterIssuer runs cert-manager's controllers against cp
// with a CA ClusterIssuer named as the hub's sameIssuer, holding the same
// key pair (the layout that moves with no Certificate changed).
func startCertManagerClusterIssuer(t *testing.T, cp *testbed.ControlPlane) *certManager {
	t.Helper()
	fixture.EnsureNamespace(t, cp.Client, ns)
	fixture.EnsureNamespace(t, cp.Client, "cert-manager")
	create(t, cp, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: sameIssuer + "-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKeyPEM}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: sameIssuer},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: sameIssuer + "-ca"}}}})
	return runCertManager(t, cp)
}

func create(t *testing.T, cp *testbed.ControlPlane, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := client.IgnoreAlreadyExists(cp.Client.Create(context.Background(), o)); err != nil {
			t.Fatal(err)
		}
	}
}

func runCertManager(t *testing.T, cp *testbed.ControlPlane) *certManager {
	t.Helper()
	kubeconfig, err := cp.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmrunner.Start(context.Background(), cmrunner.Options{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	cm := &certManager{t: t, r: r}
	t.Cleanup(cm.stop)
	return cm
}

// issueWithCertManager creates n Certificates from cert-manager's issuer
// ref and waits until cert-manager made them Ready.
func issueWithCertManager(t *testing.T, cp *testbed.ControlPlane, prefix string, n int, ref cmmeta.IssuerReference) []*cmapi.Certificate {
	t.Helper()
	crts := make([]*cmapi.Certificate, n)
	for i := range crts {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		crts[i] = fixture.Certificate(ns, name, ref.Name, fixture.WithNames("", name+"."+ns+".example.com"), fixture.WithIssuer(ref))
		if err := cp.Client.Create(context.Background(), crts[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, crt := range crts {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	}
	return crts
}

// leaf is the certificate in crt's Secret.
func leaf(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate) (*x509.Certificate, *corev1.Secret) {
	t.Helper()
	s := fixture.GetSecret(t, cp.Client, crt)
	c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatalf("Secret of %s: %v", crt.Name, err)
	}
	return c, s
}

// serials maps each Certificate to its certificate's serial.
func serials(t *testing.T, cp *testbed.ControlPlane, crts []*cmapi.Certificate) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, crt := range crts {
		c, _ := leaf(t, cp, crt)
		out[crt.Name] = c.SerialNumber.String()
	}
	return out
}

// setLabels changes the labels of a cluster's Argo CD Secret in the hub
// (what a Git commit synced by Argo CD does).
func setLabels(t *testing.T, secret *corev1.Secret, labels map[string]string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(secret), s); err != nil {
		t.Fatal(err)
	}
	for k, v := range labels {
		s.Labels[k] = v
	}
	if err := bed.Hub.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func setMode(t *testing.T, secret *corev1.Secret, mode string) {
	t.Helper()
	setLabels(t, secret, map[string]string{hubapi.ModeLabel: mode})
}

// waitReport polls the cluster's migration report until cond holds.
func waitReport(t *testing.T, cluster, what string, cond func(writegate.Report) bool) writegate.Report {
	t.Helper()
	var last writegate.Report
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		reports, err := writegate.ReadReports(ctx, bed.Hub.Client, bed.HubNamespace())
		if err != nil {
			return false, nil
		}
		last = reports[cluster]
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("cluster %s's report never showed %s; last: mode %s, writes %t, conflict %t (%s), counts %v", cluster, what, last.Mode, last.Writes, last.Conflict, last.Message, last.Counts)
	}
	return last
}

// waitTakenOver waits until the hub wrote every Certificate's Secret (its
// label) and the Certificate is Ready.
func waitTakenOver(t *testing.T, cp *testbed.ControlPlane, crts []*cmapi.Certificate) {
	t.Helper()
	for _, crt := range crts {
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
			s := &corev1.Secret{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: crt.Spec.SecretName}, s); err != nil {
				return false, nil
			}
			cur := &cmapi.Certificate{}
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
				return false, nil
			}
			return s.Labels[hubapi.ManagedByLabel] == hubapi.ManagedByValue && fixture.IsReady(cur), nil
		})
		if err != nil {
			cur := &cmapi.Certificate{}
			_ = cp.Client.Get(context.Background(), client.ObjectKeyFromObject(crt), cur)
			t.Fatalf("%s/%s: the hub never took it over (Secret labelled, Ready): %+v", cp.Name, crt.Name, cur.Status.Conditions)
		}
	}
}

// expectAllReady fails unless every Certificate is Ready.
func expectAllReady(t *testing.T, cp *testbed.ControlPlane, crts []*cmapi.Certificate) {
	t.Helper()
	for _, crt := range crts {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	}
}

// requests lists the CertificateRequests in ns by name.
func requests(t *testing.T, cp *testbed.ControlPlane) map[string]cmapi.CertificateRequest {
	t.Helper()
	list := &cmapi.CertificateRequestList{}
	if err := cp.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]cmapi.CertificateRequest, len(list.Items))
	for _, cr := range list.Items {
		out[cr.Name] = cr
	}
	return out
}

// newRequests describes the CertificateRequests in now that were not in
// before, with why cert-manager asked (its Issuing condition), for a
// failure message; empty when there are none.
func newRequests(t *testing.T, cp *testbed.ControlPlane, before, now map[string]cmapi.CertificateRequest) string {
	t.Helper()
	var out []string
	for name, cr := range now {
		if _, ok := before[name]; ok {
			continue
		}
		why := "?"
		crt := &cmapi.Certificate{}
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cr.Annotations[cmapi.CertificateNameKey]}, crt); err == nil {
			for _, c := range crt.Status.Conditions {
				if c.Type == cmapi.CertificateConditionIssuing {
					why = fmt.Sprintf("%s: %s", c.Reason, c.Message)
				}
			}
		}
		out = append(out, fmt.Sprintf("%s (revision %s): %s", name, cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey], why))
	}
	return strings.Join(out, "\n")
}

// expectWithinRate fails when the certificates' issue times (their
// notBefore, whole seconds) exceed rate per second with a burst of rate
// (the budget's bucket) in any span.
func expectWithinRate(t *testing.T, certs []*x509.Certificate, rate int) {
	t.Helper()
	at := make([]time.Time, len(certs))
	for i, c := range certs {
		at[i] = c.NotBefore
	}
	slices.SortFunc(at, time.Time.Compare)
	for i := range at {
		for j := i; j < len(at); j++ {
			span := at[j].Sub(at[i]) + time.Second // notBefore drops the fraction
			if allowed := rate + int(span.Seconds())*rate; j-i+1 > allowed {
				t.Errorf("%d certificates issued within %s (%s … %s); --issuance-rate %d allows %d",
					j-i+1, span, at[i].Format(time.TimeOnly), at[j].Format(time.TimeOnly), rate, allowed)
				return
			}
		}
	}
	t.Logf("%d re-issues from %s to %s (--issuance-rate %d)", len(at), at[0].Format(time.TimeOnly), at[len(at)-1].Format(time.TimeOnly), rate)
}

// writesOf lists the recorded writes, for a failure message.
func writesOf(w []string) string {
	if len(w) > 10 {
		return strings.Join(w[:10], "\n") + fmt.Sprintf("\n… and %d more", len(w)-10)
	}
	return strings.Join(w, "\n")
}
