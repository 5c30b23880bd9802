package crsign

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/certhub/certhub/internal/issuers"
)

// Key sizes the hub signs: what cert-manager's own validation accepts for a
// Certificate's private key (RSA 2048–8192 bits; ECDSA P-256, P-384,
// P-521; Ed25519).
const (
	MinRSAKeySize = 2048
	MaxRSAKeySize = 8192
)

// checkCSR verifies the request's CSR (it parses, it is signed by the key it
// carries, the key is one the hub signs) and returns the certificate
// template cert-manager's CA issuer would sign for it
// (pki.CertificateTemplateFromCertificateRequest: duration, usages and
// isCA from the request's spec, checked against the CSR), with the CSR.
func checkCSR(cr *cmapi.CertificateRequest, maxNames int) (*x509.Certificate, *x509.CertificateRequest, error) {
	csr, err := pki.DecodeX509CertificateRequestBytes(cr.Spec.Request)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.request does not hold a PEM CSR: %w", err)
	}
	if n := issuers.NamesOfCSR(csr); n > maxNames {
		return nil, nil, fmt.Errorf("the CSR asks for %d names (SANs and subject attributes), more than the hub's limit of %d per certificate (--max-names-per-certificate)", n, maxNames)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("the CSR's signature does not verify with its own public key: %w", err)
	}
	if err := checkKey(csr.PublicKey); err != nil {
		return nil, nil, err
	}
	tmpl, err := pki.CertificateTemplateFromCertificateRequest(cr)
	if err != nil {
		return nil, nil, fmt.Errorf("the CSR does not match the request's spec: %w", err)
	}
	return tmpl, csr, nil
}

// checkKey refuses weak or unknown public keys.
func checkKey(pub any) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < MinRSAKeySize || n > MaxRSAKeySize {
			return fmt.Errorf("RSA key of %d bits: the hub signs RSA keys of %d to %d bits", n, MinRSAKeySize, MaxRSAKeySize)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return fmt.Errorf("ECDSA key on curve %s: the hub signs P-256, P-384 and P-521", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("public key of type %T: the hub signs RSA, ECDSA and Ed25519 keys", pub)
	}
	return nil
}
