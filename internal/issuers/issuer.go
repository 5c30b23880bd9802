package issuers

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons used in *Error and, by callers, as Condition and Event reasons.
const (
	// ReasonIssuerNotFound means the referenced issuer object does not exist in the hub.
	ReasonIssuerNotFound = "IssuerNotFound"
	// ReasonIssuerNotReady means the issuer exists but cannot sign (e.g. its CA Secret is missing or invalid).
	ReasonIssuerNotReady = "IssuerNotReady"
	// ReasonIssuerNotSupported means the reference names a kind, group or issuer type certhub does not implement.
	ReasonIssuerNotSupported = "IssuerNotSupported"
	// ReasonOrderPending is the Issuing=True reason while an Orderer's order runs.
	ReasonOrderPending = "OrderPending"
)

// Error is returned by Resolve when an issuerRef cannot be turned into an Issuer.
// Reason is one of the Reason* constants.
type Error struct {
	Reason  string
	Message string
	Err     error
	// Terminal is true when retrying cannot help until the Certificate
	// itself changes (an issuerRef naming an external issuer group or an
	// unknown kind); callers do not requeue.
	Terminal bool
	// RetryAfter, when set, is when to try again (an Orderer's back-off
	// after a failed order); else the caller's own retry interval.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Message, e.Err)
	}
	return e.Reason + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Request is what an Issuer signs: a template built from the Certificate spec
// and the public half of the leaf key.
type Request struct {
	// Template is the certificate to sign. Sign may modify it (serial, signature algorithm).
	Template *x509.Certificate
	// PublicKey is the leaf's public key.
	PublicKey crypto.PublicKey
	// PrivateKey is the leaf's private key; only self-signed issuers use it.
	PrivateKey crypto.Signer
}

// Result is a signed certificate as PEM, in the shape cert-manager writes it.
type Result struct {
	// ChainPEM is the leaf followed by any intermediates (tls.crt).
	ChainPEM []byte
	// CAPEM is the root of the chain (ca.crt); empty when unknown.
	CAPEM []byte
	// PrivateKey is set by Orderers: the leaf key they generated and held
	// in the hub while the certificate was ordered. Nil from Sign.
	PrivateKey crypto.Signer
}

// Orderer is an Issuer whose certificates take seconds to minutes (ACME).
// Callers use Order instead of Sign: it never waits for the CA, DNS or
// anything slow. While the order runs it returns a *Pending (call again
// after RetryAfter); when the order failed, an *Error with the CA's reason;
// when issued, the Result with the key it holds.
//
// InFlight reports whether the hub holds an order of this issuance (in any
// state): the only evidence that an issuance was admitted and is running.
// A Certificate's status saying so is no evidence (a downstream user can
// write it); callers that skip their budget for a running order ask here.
type Orderer interface {
	Issuer
	Order(ctx context.Context, req OrderRequest) (Result, error)
	InFlight(ctx context.Context, req OrderRequest) (bool, error)
}

// OrderRequest is what an Orderer orders: one issuance of one downstream
// Certificate. Calls for the same issuance (same cluster, Certificate,
// identifiers and Current) reach the same order, on any replica.
type OrderRequest struct {
	// Cluster is the downstream cluster's name.
	Cluster string
	// Certificate is the downstream Certificate.
	Certificate *cmapi.Certificate
	// Template is the certificate asked for (identifiers, subject, usages).
	Template *x509.Certificate
	// Key, when set, is the leaf key to keep (rotationPolicy Never); else
	// the Orderer generates one from the Certificate's spec.
	Key crypto.Signer
	// Current is the certificate this issuance replaces (nil for the first).
	Current *x509.Certificate
	// CSR, when set, is the DER request to finalize the order with: a
	// downstream CertificateRequest's, whose key stays in its cluster. The
	// Orderer then neither generates nor holds a key (Result.PrivateKey is
	// nil), and the order is the request's alone (never shared).
	// Certificate then describes the request: its namespace, name, UID,
	// labels and the names of the CSR.
	CSR []byte
}

// Pending is returned by Order while an order is in progress. Reason and
// Message go to the Certificate's Issuing condition.
type Pending struct {
	Reason, Message string
	// RetryAfter is when to ask again.
	RetryAfter time.Duration
}

func (p *Pending) Error() string { return p.Reason + ": " + p.Message }

// RenewalAdvice is what a CA says about renewing one certificate (ACME
// renewal information, RFC 9773; internal/acme gives it, certsync asks).
type RenewalAdvice struct {
	// At is the renewal time chosen in the CA's suggested window; zero
	// when the CA gives none or nothing is known yet.
	At time.Time
	// Recheck, when not zero, is when the answer goes stale.
	Recheck time.Time
	// Status is status.acme.ari as cert-manager 1.21 fills it (the window,
	// explanation URL, last and next check, last error); nil when the
	// issuer has no renewal information or nothing is known yet. Its times
	// are whole seconds, as the API stores them.
	Status *cmapi.CertificateACMEARIStatus
}

// Voucher is an Issuer that can tell whether a certificate it did not
// write comes from its own identity (a CA: its certificate signed it), so
// a Secret taken over from cert-manager keeps its certificate.
type Voucher interface {
	Issued(cert *x509.Certificate) bool
}

// Sealer is an Issuer with a secret only holders of its signing key can
// derive: Seal is HMAC-SHA256 of msg under a key derived (HKDF) from the
// CA's private key, a MAC and a pseudo-random function nobody else can
// compute. internal/crsign derives a request's serial number with it, so
// every replica signs the same certificate for one request and nobody
// downstream can predict or choose it. Seal returns nil when the issuer
// cannot seal.
type Sealer interface {
	Seal(msg []byte) []byte
}

// Issuer signs certificate requests. Implementations are safe for concurrent use.
type Issuer interface {
	Sign(ctx context.Context, req Request) (Result, error)
}

// Options configure a Resolver.
type Options struct {
	// Client reads ClusterIssuers and CA Secrets in the hub. Required.
	Client client.Reader
	// Namespace is the hub namespace that holds ClusterIssuer key Secrets
	// (cert-manager's "cluster resource namespace"). Required.
	Namespace string
	// ACME, when set, serves ClusterIssuers with spec.acme (internal/acme);
	// nil: they are IssuerNotSupported.
	ACME func(ctx context.Context, ci *cmapi.ClusterIssuer) (Issuer, error)
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.Client == nil {
		return errors.New("issuance: Client is required")
	}
	if o.Namespace == "" {
		return errors.New("issuance: Namespace is required")
	}
	return nil
}

// Resolver turns issuer references into Issuers.
type Resolver struct {
	opts Options
}

// New returns a Resolver.
func New(opts Options) (*Resolver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Resolver{opts: opts}, nil
}

// ExternalGroup returns a terminal *Error when ref names an issuer group
// other than cert-manager.io (an external issuer certhub cannot sign for),
// else nil. Callers may check it before anything else, as Resolve does.
func ExternalGroup(ref cmmeta.IssuerReference) *Error {
	if ref.Group == "" || ref.Group == cmapi.SchemeGroupVersion.Group {
		return nil
	}
	return &Error{Reason: ReasonIssuerNotSupported, Terminal: true, Message: fmt.Sprintf("issuerRef.group %q names an external issuer; certhub signs only with cert-manager.io issuers (a ClusterIssuer in the hub, or an Issuer downstream). Not retried until the Certificate changes", ref.Group)}
}

// Resolve returns the Issuer that ref names. A ClusterIssuer is read from the
// hub, with its CA key pair in Options.Namespace. A namespaced Issuer is read
// from the downstream cluster (downstream, in the Certificate's namespace),
// and so is its CA key pair: it lives where the Issuer lives, as with
// cert-manager.
func (r *Resolver) Resolve(ctx context.Context, ref cmmeta.IssuerReference, namespace string, downstream client.Reader) (Issuer, error) {
	if err := ExternalGroup(ref); err != nil {
		return nil, err
	}
	kind := ref.Kind
	if kind == "" {
		kind = cmapi.IssuerKind // cert-manager's default
	}
	switch kind {
	case cmapi.ClusterIssuerKind:
		ci := &cmapi.ClusterIssuer{}
		if err := r.opts.Client.Get(ctx, client.ObjectKey{Name: ref.Name}, ci); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Error{Reason: ReasonIssuerNotFound, Message: fmt.Sprintf("ClusterIssuer %q not found in the hub", ref.Name)}
			}
			return nil, fmt.Errorf("failed to get ClusterIssuer %q: %w", ref.Name, err)
		}
		if ci.Spec.ACME != nil && r.opts.ACME != nil {
			return r.opts.ACME(ctx, ci)
		}
		return r.forSpec(ctx, "ClusterIssuer "+ref.Name, &ci.Spec, r.opts.Client, r.opts.Namespace)
	case cmapi.IssuerKind:
		if downstream == nil {
			return nil, &Error{Reason: ReasonIssuerNotSupported, Message: "namespaced Issuers need the downstream cluster"}
		}
		iss := &cmapi.Issuer{}
		if err := downstream.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, iss); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Error{Reason: ReasonIssuerNotFound, Message: fmt.Sprintf("Issuer %s/%s not found in the downstream cluster", namespace, ref.Name)}
			}
			return nil, fmt.Errorf("failed to get Issuer %s/%s: %w", namespace, ref.Name, err)
		}
		return r.forSpec(ctx, fmt.Sprintf("Issuer %s/%s", namespace, ref.Name), &iss.Spec, downstream, namespace)
	default:
		return nil, &Error{Reason: ReasonIssuerNotSupported, Terminal: true, Message: fmt.Sprintf("issuer kind %q is not supported; use ClusterIssuer (in the hub) or Issuer", kind)}
	}
}

// forSpec builds the signer; CA key pairs are read with secrets from secretNS.
func (r *Resolver) forSpec(ctx context.Context, what string, spec *cmapi.IssuerSpec, secrets client.Reader, secretNS string) (Issuer, error) {
	switch {
	case spec.SelfSigned != nil:
		return selfSigned{}, nil
	case spec.CA != nil:
		iss, err := loadCA(ctx, what, secrets, client.ObjectKey{Namespace: secretNS, Name: spec.CA.SecretName})
		if c, ok := iss.(*ca); ok && err == nil {
			c.crlDistributionPoints = spec.CA.CRLDistributionPoints
		}
		return iss, err
	case spec.ACME != nil:
		return nil, &Error{Reason: ReasonIssuerNotSupported, Message: what + " is an ACME issuer: certhub orders from ACME servers only for ClusterIssuers in the hub (one account, DNS credentials kept in the hub)"}
	default:
		return nil, &Error{Reason: ReasonIssuerNotSupported, Message: what + " has no selfSigned or ca configuration; other issuer types are not supported yet"}
	}
}

// LoadCA reads a CA key pair Secret (tls.crt, tls.key) and returns its
// signer and the certificate that signs (the first of tls.crt).
func LoadCA(ctx context.Context, what string, secrets client.Reader, key client.ObjectKey) (Issuer, *x509.Certificate, error) {
	iss, err := loadCA(ctx, what, secrets, key)
	if err != nil {
		return nil, nil, err
	}
	c, _ := iss.(*ca)
	return iss, c.certs[0], nil
}

func loadCA(ctx context.Context, what string, secrets client.Reader, key client.ObjectKey) (Issuer, error) {
	s := &corev1.Secret{}
	if err := secrets.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &Error{Reason: ReasonIssuerNotReady, Message: fmt.Sprintf("%s: CA Secret %s not found", what, key)}
		}
		return nil, fmt.Errorf("failed to get CA Secret %s: %w", key, err)
	}
	ca, err := newCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, &Error{Reason: ReasonIssuerNotReady, Message: fmt.Sprintf("%s: CA Secret %s is invalid", what, key), Err: err}
	}
	return ca, nil
}
