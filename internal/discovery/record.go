package discovery

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Managed says who keeps a discovered certificate.
type Managed string

const (
	// ManagedByCerthub means the Secret carries certhub's ownership label.
	ManagedByCerthub Managed = "certhub"
	// ManagedByCertManager means the Secret carries cert-manager's
	// cert-manager.io/certificate-name annotation (and not certhub's label).
	ManagedByCertManager Managed = "cert-manager"
	// ManagedByNone means nobody renews it.
	ManagedByNone Managed = "none"
)

// Problem is a flag on a discovered certificate.
type Problem string

const (
	// ProblemExpired means notAfter has passed.
	ProblemExpired Problem = "Expired"
	// ProblemExpiredServed means expired, and an Ingress or a Gateway still
	// names the Secret.
	ProblemExpiredServed Problem = "ExpiredServed"
	// ProblemWeakKey means an RSA key shorter than MinRSABits.
	ProblemWeakKey Problem = "WeakKey"
	// ProblemSHA1Signature means signed with SHA-1 (or MD5).
	ProblemSHA1Signature Problem = "SHA1Signature"
	// ProblemUnparseable means the Secret's tls.crt holds no X.509 certificate.
	ProblemUnparseable Problem = "Unparseable"
)

// MinRSABits is the shortest RSA key not flagged WeakKey.
const MinRSABits = 2048

// maxNames caps the DNS names kept per certificate (NameCount has them all).
const maxNames = 10

// maxString caps every string a record keeps from a tenant's Secret (a
// subject, an issuer, a name, an annotation): a self-signed certificate can
// carry a subject of a megabyte, and one record must not fill the
// cluster's report (a ConfigMap, at most 1 MiB) for every other.
const maxString = 256

// clip bounds s to maxString bytes, at a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxString {
		return s
	}
	cut := maxString - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Record is what discovery keeps of one Secret's certificate: public
// facts of its leaf (never key material), and who manages it.
type Record struct {
	Namespace string  `json:"namespace"`
	Secret    string  `json:"secret"`
	Managed   Managed `json:"managed"`
	// Certificate is the cert-manager Certificate the Secret names
	// (cert-manager.io/certificate-name), if any.
	Certificate string    `json:"certificate,omitempty"`
	Subject     string    `json:"subject,omitempty"`
	Issuer      string    `json:"issuer,omitempty"`
	Serial      string    `json:"serial,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
	DNSNames    []string  `json:"dnsNames,omitempty"`
	// NameCount is the leaf's number of DNS names, IPs, URIs and emails.
	NameCount int `json:"nameCount,omitempty"`
	// KeyAlgorithm is RSA, ECDSA or Ed25519; KeySize its bits.
	KeyAlgorithm       string `json:"keyAlgorithm,omitempty"`
	KeySize            int    `json:"keySize,omitempty"`
	SignatureAlgorithm string `json:"signatureAlgorithm,omitempty"`
	// Served: an Ingress (spec.tls) or a Gateway listener (tls.certificateRefs)
	// in the cluster names the Secret.
	Served bool `json:"served,omitempty"`
	// Problems are the flags that hold at the time of the report.
	Problems []Problem `json:"problems,omitempty"`

	// resourceVersion is the Secret's version the record was read at.
	resourceVersion string
	// static are the problems that do not change with time.
	static []Problem
}

// managedOf classifies a Secret by its metadata alone.
func managedOf(m metav1.Object) (Managed, string) {
	crt := m.GetAnnotations()[cmapi.CertificateNameKey]
	switch {
	case m.GetLabels()[hubapi.ManagedByLabel] == hubapi.ManagedByValue:
		return ManagedByCerthub, crt
	case crt != "":
		return ManagedByCertManager, crt
	}
	return ManagedByNone, ""
}

// inspect builds s's record from its metadata and tls.crt's leaf.
func inspect(s *corev1.Secret) Record {
	r := Record{Namespace: s.Namespace, Secret: s.Name, resourceVersion: s.ResourceVersion}
	r.Managed, r.Certificate = managedOf(s)
	r.Certificate = clip(r.Certificate)
	leaf, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		r.static = []Problem{ProblemUnparseable}
		return r
	}
	r.Subject, r.Issuer = clip(leaf.Subject.String()), clip(leaf.Issuer.String())
	r.Serial = fmt.Sprintf("%X", leaf.SerialNumber)
	r.NotBefore, r.NotAfter = leaf.NotBefore.UTC(), leaf.NotAfter.UTC()
	r.NameCount = len(leaf.DNSNames) + len(leaf.IPAddresses) + len(leaf.URIs) + len(leaf.EmailAddresses)
	for _, n := range leaf.DNSNames[:min(len(leaf.DNSNames), maxNames)] {
		r.DNSNames = append(r.DNSNames, clip(n))
	}
	r.SignatureAlgorithm = leaf.SignatureAlgorithm.String()
	switch pub := leaf.PublicKey.(type) {
	case *rsa.PublicKey:
		r.KeyAlgorithm, r.KeySize = "RSA", pub.N.BitLen()
		if r.KeySize < MinRSABits {
			r.static = append(r.static, ProblemWeakKey)
		}
	case *ecdsa.PublicKey:
		r.KeyAlgorithm, r.KeySize = "ECDSA", pub.Curve.Params().BitSize
	case ed25519.PublicKey:
		r.KeyAlgorithm, r.KeySize = "Ed25519", 256
	default:
		r.KeyAlgorithm = fmt.Sprintf("%T", pub)
	}
	switch leaf.SignatureAlgorithm {
	case x509.SHA1WithRSA, x509.ECDSAWithSHA1, x509.DSAWithSHA1, x509.MD5WithRSA, x509.MD2WithRSA:
		r.static = append(r.static, ProblemSHA1Signature)
	}
	return r
}

// at returns r as reported at now: its problems include the time-bound ones.
func (r Record) at(now time.Time) Record {
	r.Problems = slices.Clone(r.static)
	if !r.NotAfter.IsZero() && !now.Before(r.NotAfter) {
		r.Problems = append(r.Problems, ProblemExpired)
		if r.Served {
			r.Problems = append(r.Problems, ProblemExpiredServed)
		}
	}
	return r
}
