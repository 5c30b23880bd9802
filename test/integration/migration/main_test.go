// Package migration moves clusters that run cert-manager onto the hub and
// back, with cert-manager v1.21's own controllers (test/fixture/cmrunner)
// in the downstream API servers:
//
//   - one cluster, reached through a recording proxy, whose 50 Certificates
//     cert-manager issued: observed (the plan, no write), refused while
//     cert-manager runs (ClusterConflict), taken over when it stops (the
//     certificates of the same CA kept, the others re-issued through the
//     budget), and handed back to cert-manager without a re-issue;
//   - three clusters in waves (wave=1/2/3), one label change at a time,
//     every Certificate Ready at every step.
package migration

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"os"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	// otherIssuer is the hub's own CA, another key pair than cert-manager's.
	otherIssuer = "hub-other"
	// sameIssuer is a hub ClusterIssuer given cert-manager's CA key pair.
	sameIssuer = "hub-same"
	// cmIssuer is cert-manager's CA Issuer in each cluster's namespace ns.
	cmIssuer = "cm-ca"
	ns       = "shop"
	// issuanceRate is the hub's --issuance-rate: re-issues are spread by it.
	issuanceRate = 2
)

var (
	env *suite.Env
	bed *testbed.Bed
	// caPEM and caKeyPEM are cert-manager's CA, later the hub's too.
	caPEM, caKeyPEM []byte
	caCert          *x509.Certificate
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: otherIssuer, Downstreams: 5, Unregistered: 5,
		Hub: func(o *hub.Options) {
			o.CertManagerCheckInterval = time.Second
			o.IssuanceRate = issuanceRate
			o.IssuerRetryInterval = time.Second
		},
		Setup: func(ctx context.Context, e *suite.Env) error {
			bed = e.Bed
			var err error
			if caPEM, caKeyPEM, caCert, err = newCA(); err != nil {
				return err
			}
			// The same key pair in the hub, under a hub ClusterIssuer.
			if err := bed.Hub.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: bed.HubNamespace(), Name: sameIssuer + "-ca"},
				Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKeyPEM}}); err != nil {
				return err
			}
			return bed.Hub.Client.Create(ctx, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: sameIssuer},
				Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: sameIssuer + "-ca"}}}})
		}}, &env))
}

// newCA makes the CA cert-manager issues with in every cluster.
func newCA() (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "fleet CA (cert-manager's, then the hub's)"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	certPEM, cert, err = pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err = pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to encode CA key: %w", err)
	}
	return certPEM, keyPEM, cert, nil
}
