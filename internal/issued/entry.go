package issued

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Kinds of downstream object a certificate was signed for.
const (
	KindCertificate        = "Certificate"
	KindCertificateRequest = "CertificateRequest"
)

// Whys that are not a trigger's reason (certsync records its trigger's
// reason: DoesNotExist, Renewing, RevocationRequested, CARotation, ...).
const (
	// WhyRequest: a downstream CertificateRequest was signed.
	WhyRequest = "CertificateRequest"
	// WhyAdopted: a certificate cert-manager wrote, vouched for by the hub
	// CA the Certificate names, was kept when the hub took the Secret over.
	WhyAdopted = "Adopted"
	// WhyRebuilt: found downstream while the record was rebuilding, and it
	// verifies against the hub issuer its Certificate names.
	WhyRebuilt = "Rebuilt"
)

// MaxNamesKept bounds the names an entry keeps; NamesOmitted counts the rest.
const MaxNamesKept = 64

// Entry is one signed certificate.
type Entry struct {
	// Serial is the certificate's serial, upper-case hexadecimal.
	Serial string `json:"serial"`
	// Issuer is "ClusterIssuer/<name>" or, for a namespaced Issuer whose CA
	// the hub signs with, "Issuer/<namespace>/<name>".
	Issuer string `json:"issuer"`
	// Cluster, Namespace, Kind and Name say what it was signed for.
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// UID is the object's UID when signed.
	UID string `json:"uid,omitempty"`
	// Names are the subject alternative names and common name (at most
	// MaxNamesKept; NamesOmitted counts the rest).
	Names        []string  `json:"names,omitempty"`
	NamesOmitted int       `json:"namesOmitted,omitempty"`
	NotBefore    time.Time `json:"notBefore"`
	NotAfter     time.Time `json:"notAfter"`
	// SHA256 is the SHA-256 of the certificate's DER, hex: what the hub
	// compares a certificate found downstream with.
	SHA256 string `json:"sha256"`
	// PublicKeySHA256 is the SHA-256 of the certificate's SubjectPublicKeyInfo, hex.
	PublicKeySHA256 string `json:"publicKeySHA256"`
	// Why it was signed: the trigger's reason, or a Why* constant.
	Why string `json:"why"`
	// Replaces is the serial the object held when this was signed ("" for
	// none): two entries of one object replacing the same serial mean the
	// earlier never reached it (Undelivered).
	Replaces string `json:"replaces,omitempty"`
	// RequestHash digests the request an ordered certificate was made for
	// (certspec.RequestHash): an ACME CA may not echo subject and usages.
	RequestHash string `json:"requestHash,omitempty"`
	// DER is the certificate, for issuers that revoke with it (ACME).
	DER []byte `json:"der,omitempty"`
	// PerObject: one certificate may be delivered to several objects (an
	// ACME order shared by identical requests), so the entry is per object
	// (Key includes it) and each delivery is recorded.
	PerObject bool `json:"perObject,omitempty"`
	// RecordedBy is the replica that stored it, RecordedAt when.
	RecordedBy string    `json:"recordedBy,omitempty"`
	RecordedAt time.Time `json:"recordedAt"`
}

// Object names what an entry was signed for.
type Object struct {
	Cluster, Kind, Namespace, Name string
}

func (o Object) String() string { return o.Cluster + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name }

// Object is what e was signed for.
func (e *Entry) Object() Object {
	return Object{Cluster: e.Cluster, Kind: e.Kind, Namespace: e.Namespace, Name: e.Name}
}

// Key is e's identity: its issuer and serial (and its object when
// PerObject), as a ConfigMap key.
func (e *Entry) Key() string {
	if e.PerObject {
		return ObjectKey(e.Issuer, e.Serial, e.Object())
	}
	return Key(e.Issuer, e.Serial)
}

// ObjectKey is the identity of serial signed by issuer as delivered to o
// (a PerObject entry).
func ObjectKey(issuer, serial string, o Object) string {
	sum := sha256.Sum256([]byte(o.String()))
	return Key(issuer, serial) + "." + hex.EncodeToString(sum[:8])
}

// Key is the identity of serial signed by issuer, as a ConfigMap key
// ([-._a-zA-Z0-9], at most 253 characters).
func Key(issuer, serial string) string {
	sum := sha256.Sum256([]byte(issuer))
	return hex.EncodeToString(sum[:8]) + "." + serial
}

// NormalSerial reads a serial as a user writes it ("0a:1B", "A1b") into
// the form entries hold.
func NormalSerial(s string) string {
	s = strings.ToUpper(strings.NewReplacer(":", "", " ", "", "-", "").Replace(s))
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}

// Fingerprint is the SHA-256 of a certificate's DER, hex (Entry.SHA256).
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// Serial is a certificate's serial as entries hold it.
func Serial(c *x509.Certificate) string { return fmt.Sprintf("%X", c.SerialNumber) }

// ClusterIssuer is the Issuer of an entry signed by a hub ClusterIssuer.
func ClusterIssuer(name string) string { return "ClusterIssuer/" + name }

// NamespacedIssuer is the Issuer of an entry signed with a downstream Issuer's CA.
func NamespacedIssuer(namespace, name string) string { return "Issuer/" + namespace + "/" + name }

// IssuerOf is the Issuer of a reference (kind ClusterIssuer or Issuer,
// the latter in namespace).
func IssuerOf(kind, name, namespace string) string {
	if kind == "Issuer" {
		return NamespacedIssuer(namespace, name)
	}
	return ClusterIssuer(name)
}

// For is the entry of leaf signed by issuer for obj; the caller sets Why,
// Replaces, RequestHash and DER.
func For(leaf *x509.Certificate, issuer string, obj Object, uid string) Entry {
	e := Entry{Serial: Serial(leaf), Issuer: issuer, Cluster: obj.Cluster, Namespace: obj.Namespace, Kind: obj.Kind, Name: obj.Name,
		UID: uid, NotBefore: leaf.NotBefore.UTC(), NotAfter: leaf.NotAfter.UTC()}
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	e.PublicKeySHA256 = hex.EncodeToString(sum[:])
	e.SHA256 = Fingerprint(leaf)
	var names []string
	if leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	names = append(names, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	names = append(names, leaf.EmailAddresses...)
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		if len(e.Names) < MaxNamesKept {
			e.Names = append(e.Names, n)
		} else {
			e.NamesOmitted++
		}
	}
	return e
}

func (e *Entry) encode() (string, error) {
	raw, err := json.Marshal(e)
	return string(raw), err
}

func decode(s string) (*Entry, error) {
	e := &Entry{}
	if err := json.NewDecoder(strings.NewReader(s)).Decode(e); err != nil {
		return nil, err
	}
	return e, nil
}
