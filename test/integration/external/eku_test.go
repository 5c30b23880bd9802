package external

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/test/fixture"
)

// Issue 56, policy corners: under --default-policy=allow (this suite's
// hub), a CSR asking for an extended key usage cert-manager has no name for
// (Microsoft's smart-card logon, 1.3.6.1.4.1.311.20.2.2) is refused, named,
// while a plain request beside it, made at the same time, is signed.
// Before, every EKU a CSR carried was signed.
func TestUnknownEKUDeniedUnderDefaultAllow(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[1] // without cert-manager's approver: the test approves
	const ns = "eku"
	fixture.EnsureNamespace(t, cp.Client, ns)
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	smartCardLogon := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 20, 2, 2}
	serverAuth := asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	eku, err := asn1.Marshal([]asn1.ObjectIdentifier{serverAuth, smartCardLogon})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: "card.eku.example.com"},
		DNSNames:        []string{"card.eku.example.com"},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Value: eku}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	card := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "smart-card"},
		Spec: cmapi.CertificateRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), IssuerRef: hubRef,
			Usages: []cmapi.KeyUsage{cmapi.UsageServerAuth}}}
	neighbour := request(t, ns, "neighbour", key, "neighbour.eku.example.com")
	for _, cr := range []*cmapi.CertificateRequest{card, neighbour} {
		if err := cp.Client.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
		setCondition(t, cp.Client, cr, cmapi.CertificateRequestConditionApproved, "test.approver")
	}
	waitRequest(t, cp.Client, neighbour, "Issued (the neighbour)", func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonIssued
	})
	got := waitRequest(t, cp.Client, card, "Failed", func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonFailed || readyReason(cr) == cmapi.CertificateRequestReasonIssued
	})
	c := readyCondition(got)
	if c.Reason != cmapi.CertificateRequestReasonFailed || !strings.Contains(c.Message, "1.3.6.1.4.1.311.20.2.2") || len(got.Status.Certificate) > 0 {
		t.Errorf("smart-card logon: Ready %s/%s %q, %d certificate bytes; want Failed naming 1.3.6.1.4.1.311.20.2.2, nothing signed",
			c.Status, c.Reason, c.Message, len(got.Status.Certificate))
	}
}
