package issuers

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
)

// ErrNeedsPrivateKey is returned by an Issuer that signs with the leaf's
// own private key (SelfSigned) when it was not given one: a request whose
// key stays downstream (a CertificateRequest) cannot be self-signed by
// the hub.
var ErrNeedsPrivateKey = errors.New("self-signed issuance needs the leaf private key")

// selfSigned signs a certificate with its own key, like cert-manager's
// SelfSigned issuer: ca.crt is the certificate itself.
type selfSigned struct{}

func (selfSigned) Sign(_ context.Context, req Request) (Result, error) {
	if req.PrivateKey == nil {
		return Result{}, ErrNeedsPrivateKey
	}
	certPEM, _, err := pki.SignCertificate(req.Template, req.Template, req.PublicKey, req.PrivateKey)
	if err != nil {
		return Result{}, fmt.Errorf("failed to self-sign certificate: %w", err)
	}
	return Result{ChainPEM: certPEM, CAPEM: certPEM}, nil
}

// SelfSigned reports whether iss signs each certificate with the
// certificate's own key (a SelfSigned issuer): what it signs is chained
// to nothing the hub vouches for.
func SelfSigned(iss Issuer) bool {
	_, ok := iss.(selfSigned)
	return ok
}

// IsSelfSigned reports whether cert is signed by its own key: the
// certificate a SelfSigned issuer wrote, not one a CA signed.
func IsSelfSigned(cert *x509.Certificate) bool {
	return cert != nil && bytes.Equal(cert.RawIssuer, cert.RawSubject) &&
		cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil
}
