package testbed

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreateCAIssuer makes a fresh self-signed CA, stores its key pair in the hub
// namespace as Secret <name>-ca and creates ClusterIssuer <name> using it.
// It returns the CA certificate.
func (b *Bed) CreateCAIssuer(ctx context.Context, name string) (*x509.Certificate, error) {
	cert, err := b.CreateCASecret(ctx, name+"-ca", name+" test CA")
	if err != nil {
		return nil, err
	}
	ci := &cmapi.ClusterIssuer{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: name + "-ca"}}},
	}
	if err := b.Hub.Client.Create(ctx, ci); err != nil {
		return nil, fmt.Errorf("failed to create ClusterIssuer %s: %w", name, err)
	}
	b.opts.Progress("created CA ClusterIssuer %q in the hub (key pair in Secret %s/%s-ca; the key never leaves the hub)", name, b.opts.HubNamespace, name)
	return cert, nil
}

// CreateCASecret makes a fresh self-signed CA named cn and stores its key
// pair in the hub namespace as Secret name (a CA ClusterIssuer's, or the
// next key pair of a CA rotation). It returns the CA certificate.
func (b *Bed) CreateCASecret(ctx context.Context, name, cn string) (*x509.Certificate, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, fmt.Errorf("failed to generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"certhub"}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}
	certPEM, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("failed to self-sign CA: %w", err)
	}
	keyPEM, err := pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.opts.HubNamespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
	if err := b.Hub.Client.Create(ctx, secret); err != nil {
		return nil, fmt.Errorf("failed to create CA Secret: %w", err)
	}
	return cert, nil
}
