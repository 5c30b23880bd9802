package acme

import (
	"context"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// A CertificateRevocation of an ACME certificate renews it at Pebble, then
// revokes the old one at Pebble with the hub's account (RFC 8555
// revokeCert) and the reason asked: Pebble reports the old serial Revoked
// (reason keyCompromise) and the new one Valid.
func TestRevokeACMECertificateAtTheCA(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca := bed.CA
	hub := bed.Hub.Client
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble", "--revocation-interval=300ms")
	cp := bed.Downstreams[0]
	fixture.EnsureNamespace(t, cp.Client, "shop")
	crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "revoked."+ca.Zone))
	crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	old := leaf(t, cp, crt)
	if st, _, err := ca.CertStatus(ctx, old.SerialNumber); err != nil || st != "Valid" {
		t.Fatalf("Pebble says %q (%v) of the issued certificate, want Valid", st, err)
	}

	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: "acme-key-leak"}, Spec: hubapi.CertificateRevocationSpec{
		Serials: []string{fmt.Sprintf("%X", old.SerialNumber)}, Reason: hubapi.RevocationKeyCompromise}}
	if err := hub.Create(ctx, rev); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		if err := hub.Get(ctx, client.ObjectKeyFromObject(rev), rev); err != nil {
			return false, nil
		}
		return rev.Status.Phase == hubapi.RevocationComplete, nil
	})
	if err != nil {
		t.Fatalf("the revocation never completed: %+v", rev.Status)
	}
	fresh := leaf(t, cp, crt)
	if fresh.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatal("the certificate was not renewed")
	}
	st, reason, err := ca.CertStatus(ctx, old.SerialNumber)
	if err != nil || st != "Revoked" || reason == nil || *reason != 1 {
		t.Errorf("Pebble says %q reason %v (%v) of the old certificate, want Revoked, 1 (keyCompromise)", st, reason, err)
	}
	if st, _, err := ca.CertStatus(ctx, fresh.SerialNumber); err != nil || st != "Valid" {
		t.Errorf("Pebble says %q (%v) of the new certificate, want Valid", st, err)
	}
	if e := rev.Status.Certificates; len(e) != 1 || e[0].IssuerKind != "ACME" || e[0].State != hubapi.RevocationRevoked || e[0].CertificatePEM != "" {
		t.Errorf("status entries %+v: want one ACME entry, Revoked, its certificate no longer kept", e)
	}
}

func leaf(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate) *x509.Certificate {
	t.Helper()
	s := fixture.GetSecret(t, cp.Client, crt)
	c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	return c
}
