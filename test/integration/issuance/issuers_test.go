package issuance

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
)

func newCA(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour * 24), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	certPEM, _, err = pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// A namespaced Issuer resolves in the downstream namespace, with its CA key
// pair there too, as with cert-manager.
func TestNamespacedIssuerDownstream(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "team-ca")
	certPEM, keyPEM := newCA(t, "team CA")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-ca", Name: "team-ca-kp"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "team-ca", Name: "team"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "team-ca-kp"}}}}); err != nil {
		t.Fatal(err)
	}
	crt := fixture.Certificate("team-ca", "svc", "team")
	crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: "team", Kind: cmapi.IssuerKind, Group: "cert-manager.io"}
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	got := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	expectStable(t, c, got)
	s := fixture.GetSecret(t, c, got)
	if !bytes.Equal(s.Data["ca.crt"], certPEM) {
		t.Errorf("ca.crt is not the namespaced Issuer's CA")
	}
	if s.Annotations[cmapi.IssuerKindAnnotationKey] != cmapi.IssuerKind {
		t.Errorf("issuer-kind annotation %q", s.Annotations[cmapi.IssuerKindAnnotationKey])
	}
}

// A ClusterIssuer that does not exist yet is reported, and used once it
// appears in the hub, without touching the Certificate.
func TestClusterIssuerAppearsLater(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "late-issuer")
	crt := fixture.Certificate("late-issuer", "waits", "late-ca")
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "Ready=False/IssuerNotFound", fixture.NotReadyWith(issuers.ReasonIssuerNotFound))
	if _, err := bed.CreateCAIssuer(ctx, "late-ca"); err != nil {
		t.Fatal(err)
	}
	expectStable(t, c, fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt)))
}
