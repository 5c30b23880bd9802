package revocation

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/revocation"
	"github.com/certhub/certhub/internal/trust"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// issue creates a Certificate in cp and returns its issued leaf.
func issue(t *testing.T, cp *testbed.ControlPlane, ns, name string) (*cmapi.Certificate, *x509.Certificate) {
	t.Helper()
	fixture.EnsureNamespace(t, cp.Client, ns)
	crt := fixture.Certificate(ns, name, issuerName, fixture.WithNames("", name+"."+ns+".example.com"))
	if err := cp.Client.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	crt = fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	return crt, leafOf(t, cp, crt)
}

func leafOf(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate) *x509.Certificate {
	t.Helper()
	s := fixture.GetSecret(t, cp.Client, crt)
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		t.Fatalf("%s/%s: no certificate in its Secret", crt.Namespace, crt.Name)
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// waitRenewed waits until crt's Secret holds a certificate other than old
// and returns it.
func waitRenewed(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate, old *x509.Certificate) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		leaf = leafOf(t, cp, crt)
		return leaf.SerialNumber.Cmp(old.SerialNumber) != 0, nil
	})
	if err != nil {
		t.Fatalf("%s/%s/%s was never renewed (serial %X)", cp.Name, crt.Namespace, crt.Name, old.SerialNumber)
	}
	return leaf
}

// waitComplete waits until the revocation is Complete and returns it.
func waitComplete(t *testing.T, name string) *hubapi.CertificateRevocation {
	t.Helper()
	rev := &hubapi.CertificateRevocation{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, rev); err != nil {
			return false, nil
		}
		return rev.Status.Phase == hubapi.RevocationComplete, nil
	})
	if err != nil {
		t.Fatalf("CertificateRevocation %s never Complete: %+v", name, rev.Status)
	}
	return rev
}

// fetchCRL GETs the issuer's CRL from the hub and verifies its signature
// against the CA certificate.
func fetchCRL(t *testing.T) *x509.RevocationList {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s%s%s", crlAddr, revocation.CRLPath, issuerName))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	der, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/pkix-crl" {
		t.Fatalf("GET the CRL: %d %s (%v)", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(env.CAPEM)
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("the CRL is not signed by the CA: %v", err)
	}
	return crl
}

func listed(crl *x509.RevocationList, serial *big.Int) bool {
	return slices.ContainsFunc(crl.RevokedCertificateEntries, func(e x509.RevocationListEntry) bool { return e.SerialNumber.Cmp(serial) == 0 })
}

// Revoking a CA-issued certificate by serial renews it first; then the
// hub's CRL (over HTTP, signed by the CA) lists the old serial and not the
// new one, with the reason; the issuer's opt-in CRL distribution point is
// in the new certificate.
func TestRevokeBySerial(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	ci := &cmapi.ClusterIssuer{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuerName}, ci); err != nil {
		t.Fatal(err)
	}
	cdp := fmt.Sprintf("http://%s%s%s", crlAddr, revocation.CRLPath, issuerName)
	patch := client.MergeFrom(ci.DeepCopy())
	ci.Spec.CA.CRLDistributionPoints = []string{cdp}
	if err := env.Bed.Hub.Client.Patch(ctx, ci, patch); err != nil {
		t.Fatal(err)
	}
	crt, old := issue(t, cp, "serial", "web")
	neighbour, neighbourLeaf := issue(t, cp, "serial", "api")

	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: "leaked-key"}, Spec: hubapi.CertificateRevocationSpec{
		Serials: []string{fmt.Sprintf("%x", old.SerialNumber)}, Reason: hubapi.RevocationKeyCompromise}}
	if err := env.Bed.Hub.Client.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	fresh := waitRenewed(t, cp, crt, old)
	rev = waitComplete(t, rev.Name)
	if rev.Status.Revoked != 1 || len(rev.Status.Certificates) != 1 || rev.Status.Certificates[0].State != hubapi.RevocationRevoked ||
		rev.Status.Certificates[0].Certificate != "web" || rev.Status.Certificates[0].Cluster != cp.Name {
		t.Errorf("status %+v", rev.Status)
	}
	crl := fetchCRL(t)
	if !listed(crl, old.SerialNumber) || listed(crl, fresh.SerialNumber) || listed(crl, neighbourLeaf.SerialNumber) {
		t.Fatalf("CRL %v: want the old serial %X only", crl.RevokedCertificateEntries, old.SerialNumber)
	}
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(old.SerialNumber) == 0 && e.ReasonCode != 1 {
			t.Errorf("reason code %d, want 1 (keyCompromise)", e.ReasonCode)
		}
	}
	// Published downstream beside the trust bundle, in every cluster.
	for _, d := range env.Bed.Downstreams {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{}
			if err := d.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: trust.DefaultConfigMapName}, cm); err != nil {
				return false, nil
			}
			last = cm.Data[trust.CRLKey]
			b, _ := pem.Decode([]byte(last))
			if b == nil {
				return false, nil
			}
			published, err := x509.ParseRevocationList(b.Bytes)
			return err == nil && listed(published, old.SerialNumber) && cm.Data[trust.DefaultKey] != "", nil
		})
		if err != nil {
			t.Errorf("%s: the trust bundle ConfigMap never carried the CRL listing %X; last %q", d.Name, old.SerialNumber, last)
		}
	}
	if !slices.Equal(fresh.CRLDistributionPoints, []string{cdp}) {
		t.Errorf("the new certificate's CRL distribution points %v, want %v", fresh.CRLDistributionPoints, cdp)
	}
	got := fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	if c := fixture.Condition(got, cmapi.CertificateConditionIssuing); c != nil && c.Reason == reasons.Revocation {
		t.Errorf("still issuing for the revocation: %+v", c)
	}
	if now := leafOf(t, cp, neighbour); now.SerialNumber.Cmp(neighbourLeaf.SerialNumber) != 0 {
		t.Error("a certificate the revocation does not select was renewed")
	}
}

// "Everything issued by CA X before T" rolls through three clusters: each
// certificate is renewed and its old serial listed; the status has a row
// per cluster.
func TestRevokeEverythingIssuedBefore(t *testing.T) {
	ctx := context.Background()
	type issued struct {
		cp   *testbed.ControlPlane
		crt  *cmapi.Certificate
		leaf *x509.Certificate
	}
	var all []issued
	for i, cp := range env.Bed.Downstreams {
		for j := range 2 {
			crt, leaf := issue(t, cp, "before", fmt.Sprintf("svc-%d-%d", i, j))
			all = append(all, issued{cp, crt, leaf})
		}
	}
	cutoff := metav1.NewTime(time.Now().Add(time.Second).Truncate(time.Second))
	var out bytes.Buffer
	cmd := app.NewCommand()
	cmd.SetArgs([]string{"revoke", "ca-incident", "--kubeconfig", env.Kubeconfig, "--issuer", issuerName, "--namespace", "before",
		"--issued-before", cutoff.UTC().Format(time.RFC3339)})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("certhub revoke: %v\n%s", err, out.String())
	}
	rev := waitComplete(t, "ca-incident")
	if !rev.Spec.IssuedBefore.Equal(&cutoff) || rev.Spec.IssuerName != issuerName || rev.Spec.Reason != hubapi.RevocationSuperseded {
		t.Errorf("certhub revoke created %+v", rev.Spec)
	}
	crl := fetchCRL(t)
	for _, is := range all {
		fresh := waitRenewed(t, is.cp, is.crt, is.leaf)
		if !listed(crl, is.leaf.SerialNumber) || listed(crl, fresh.SerialNumber) {
			t.Errorf("%s/%s: old serial listed %v, new serial listed %v", is.cp.Name, is.crt.Name, listed(crl, is.leaf.SerialNumber), listed(crl, fresh.SerialNumber))
		}
	}
	if len(rev.Status.Clusters) != len(env.Bed.Downstreams) {
		t.Fatalf("status rows %+v, want one per cluster", rev.Status.Clusters)
	}
	for _, row := range rev.Status.Clusters {
		if row.Selected != 2 || row.Revoked != 2 || row.LastSeen == nil {
			t.Errorf("cluster %s: %+v, want 2 selected and revoked", row.Cluster, row)
		}
	}
	if rev.Status.Revoked != 6 || rev.Status.Pending != 0 {
		t.Errorf("status revoked %d pending %d, want 6 and 0", rev.Status.Revoked, rev.Status.Pending)
	}
}
