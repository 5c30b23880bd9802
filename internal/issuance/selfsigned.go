package issuance

import (
	"context"
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
