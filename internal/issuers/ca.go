package issuers

import (
	"bytes"
	"context"
	"crypto"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
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
	// crlDistributionPoints go into every certificate signed, as the
	// ClusterIssuer's spec.ca.crlDistributionPoints ask (cert-manager's CA
	// issuer does the same); the hub serves its CRLs (internal/revocation).
	crlDistributionPoints []string
}

// sealInfo is the HKDF info of the seal key: a key for this use only.
const sealInfo = "certhub.io seal v1"

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

// Seal is HMAC-SHA256 of msg under a key derived (HKDF-SHA256) from the
// CA's private key; nil when the key cannot be marshalled. The key is
// derived here, when asked (crsign, once per request), not for every
// issuer resolved.
func (c *ca) Seal(msg []byte) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return nil
	}
	sealKey, err := hkdf.Key(sha256.New, der, nil, sealInfo, sha256.Size)
	if err != nil {
		return nil
	}
	m := hmac.New(sha256.New, sealKey)
	m.Write(msg)
	return m.Sum(nil)
}

func (c *ca) Sign(_ context.Context, req Request) (Result, error) {
	req.Template.PublicKey = req.PublicKey
	if len(c.crlDistributionPoints) > 0 {
		req.Template.CRLDistributionPoints = c.crlDistributionPoints
	}
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
