package revocation

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
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
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/test/fixture"
)

// revoke creates a CertificateRevocation and waits until it is Complete.
func revoke(t *testing.T, name string, spec hubapi.CertificateRevocationSpec) *hubapi.CertificateRevocation {
	t.Helper()
	rev := &hubapi.CertificateRevocation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := env.Bed.Hub.Client.Create(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	return waitComplete(t, name)
}

// A tenant pastes a self-signed copy of its certificate (its own key, its
// own names) carrying another tenant's serial into its Secret, then an
// admin revokes everything in the tenant's cluster. The revocation selects
// from the hub's record: the attacker's real serial is listed, the victim's
// never; the victim's certificate is not renewed; the pasted copy is
// replaced (CertificateNotRecorded).
func TestPastedSerialRevokesTheAttackersOwn(t *testing.T) {
	ctx := context.Background()
	victimCP, attackerCP := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	victim, victimLeaf := issue(t, victimCP, "victim", "web")
	attacker, attackerLeaf := issue(t, attackerCP, "attacker", "web")

	s := fixture.GetSecret(t, attackerCP.Client, attacker)
	key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	forged := *attackerLeaf
	forged.SerialNumber = victimLeaf.SerialNumber
	der, err := x509.CreateCertificate(rand.Reader, &forged, &forged, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	s.Data[corev1.TLSCertKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := attackerCP.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	rev := revoke(t, "pasted-serial", hubapi.CertificateRevocationSpec{Clusters: []string{attackerCP.Name}, Namespace: "attacker"})

	crl := fetchCRL(t)
	if listed(crl, victimLeaf.SerialNumber) {
		t.Fatalf("the victim's serial %X is on the CRL (status %+v)", victimLeaf.SerialNumber, rev.Status.Certificates)
	}
	if !listed(crl, attackerLeaf.SerialNumber) {
		t.Fatalf("the attacker's real serial %X is not on the CRL (status %+v)", attackerLeaf.SerialNumber, rev.Status.Certificates)
	}
	// The pasted copy is not kept: the attacker's Certificate holds a certificate of the hub's again.
	got := fixture.WaitFor(t, attackerCP.Client, client.ObjectKeyFromObject(attacker), "re-issued over the pasted copy", func(c *cmapi.Certificate) bool {
		leaf := leafOf(t, attackerCP, c)
		return leaf.SerialNumber.Cmp(victimLeaf.SerialNumber) != 0 && leaf.CheckSignatureFrom(caCert(t)) == nil && fixture.IsReady(c)
	})
	if got.Status.Revision == nil || *got.Status.Revision < 2 {
		t.Errorf("the attacker's Certificate at revision %v, want a re-issue", got.Status.Revision)
	}
	if now := leafOf(t, victimCP, victim); now.SerialNumber.Cmp(victimLeaf.SerialNumber) != 0 {
		t.Error("the victim's certificate was renewed by a revocation that does not select it")
	}
}

// A serial superseded by a renewal, and one signed for a CertificateRequest,
// are in no Secret: the record still selects them, and each is revoked at
// once (nothing holds it to renew first).
func TestSupersededAndRequestSerialsAreRevoked(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	crt, first := issue(t, cp, "superseded", "web")
	neighbour, neighbourLeaf := issue(t, cp, "superseded", "api")
	cur := &cmapi.Certificate{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.DNSNames = append(cur.Spec.DNSNames, "www.superseded.example.com")
	if err := cp.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	second := waitRenewed(t, cp, crt, first)

	reqKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forReq := fixture.Certificate("superseded", "mesh", issuerName, fixture.WithNames("", "mesh.superseded.example.com"),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: issuerName, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	cr, err := fixture.CertificateRequest(forReq, "mesh-1", reqKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	fixture.SetRequestCondition(t, cp.Client, cr, cmapi.CertificateRequestConditionApproved, "test")
	cr = fixture.WaitRequest(t, cp.Client, cr, "signed", func(r *cmapi.CertificateRequest) bool { return len(r.Status.Certificate) > 0 })
	reqLeaf, err := pki.DecodeX509CertificateBytes(cr.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}

	rev := revoke(t, "superseded-and-request", hubapi.CertificateRevocationSpec{
		Serials: []string{fmt.Sprintf("%X", first.SerialNumber), fmt.Sprintf("%X", reqLeaf.SerialNumber)}, Reason: hubapi.RevocationKeyCompromise})
	crl := fetchCRL(t)
	if !listed(crl, first.SerialNumber) || !listed(crl, reqLeaf.SerialNumber) {
		t.Fatalf("CRL lists superseded %X: %v, request's %X: %v; status %+v", first.SerialNumber, listed(crl, first.SerialNumber),
			reqLeaf.SerialNumber, listed(crl, reqLeaf.SerialNumber), rev.Status.Certificates)
	}
	if listed(crl, second.SerialNumber) {
		t.Fatalf("the current serial %X was revoked", second.SerialNumber)
	}
	if now := leafOf(t, cp, crt); now.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Error("the Certificate holding the current serial was renewed for a revocation of its superseded one")
	}
	if now := leafOf(t, cp, neighbour); now.SerialNumber.Cmp(neighbourLeaf.SerialNumber) != 0 || listed(crl, neighbourLeaf.SerialNumber) {
		t.Error("the neighbour's certificate was renewed or revoked")
	}
}

// A request hash written on a tenant's Secret decides nothing: a tenant
// that asks for another usage and writes the hash of its new spec gets a
// new certificate, not its old one kept Ready.
func TestForgedRequestHashChangesNothing(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	crt, old := issue(t, cp, "forged-hash", "web")
	neighbour, neighbourLeaf := issue(t, cp, "forged-hash", "api")
	cur := &cmapi.Certificate{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Usages = []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageKeyEncipherment, cmapi.UsageServerAuth, cmapi.UsageClientAuth}
	hash, err := certspec.RequestHash(cur)
	if err != nil {
		t.Fatal(err)
	}
	s := fixture.GetSecret(t, cp.Client, crt)
	s.Annotations["certhub.io/request-hash"] = hash
	if err := cp.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	var last *x509.Certificate
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		last = leafOf(t, cp, crt)
		return hasClientAuth(last), nil
	})
	if err != nil {
		t.Fatalf("the Secret still holds a certificate without client auth (serial %X, first %X, usages %v): the forged hash kept it", last.SerialNumber, old.SerialNumber, last.ExtKeyUsage)
	}
	got := fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	if c := fixture.Condition(got, cmapi.CertificateConditionIssuing); c != nil && c.Reason == reasons.NotRecorded {
		t.Errorf("issuing: %+v", c)
	}
	if now := leafOf(t, cp, neighbour); now.SerialNumber.Cmp(neighbourLeaf.SerialNumber) != 0 {
		t.Error("the neighbour's certificate was re-issued")
	}
}

func hasClientAuth(c *x509.Certificate) bool {
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth {
			return true
		}
	}
	return false
}

func caCert(t *testing.T) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(env.CAPEM)
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
