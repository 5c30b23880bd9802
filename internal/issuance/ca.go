package issuance

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
)

// ca signs with a CA key pair held in the hub, like cert-manager's CA issuer:
// tls.crt is leaf + the CA chain, ca.crt the chain's root.
type ca struct {
	certs []*x509.Certificate
	key   crypto.Signer
}

func newCA(certPEM, keyPEM []byte) (*ca, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, errors.New("tls.crt and tls.key must both be set")
	}
	certs, err := pki.DecodeX509CertificateChainBytes(certPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to decode tls.crt: %w", err)
	}
	key, err := pki.DecodePrivateKeyBytes(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to decode tls.key: %w", err)
	}
	if ok, err := pki.PublicKeyMatchesCertificate(key.Public(), certs[0]); err != nil || !ok {
		return nil, errors.New("tls.key does not match the first certificate in tls.crt")
	}
	if !certs[0].IsCA {
		return nil, errors.New("the certificate in tls.crt is not a CA (basicConstraints CA=false)")
	}
	return &ca{certs: certs, key: key}, nil
}

func (c *ca) Sign(_ context.Context, req Request) (Result, error) {
	req.Template.PublicKey = req.PublicKey
	bundle, err := pki.SignCSRTemplate(c.certs, c.key, req.Template)
	if err != nil {
		return Result{}, fmt.Errorf("failed to sign certificate with CA: %w", err)
	}
	return Result{ChainPEM: bundle.ChainPEM, CAPEM: bundle.CAPEM}, nil
}

// Issued reports whether cert was signed by this CA's key (its signing
// certificate).
func (c *ca) Issued(cert *x509.Certificate) bool {
	return cert.CheckSignatureFrom(c.certs[0]) == nil && bytes.Equal(cert.RawIssuer, c.certs[0].RawSubject)
}
