package policy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/certhub/certhub/internal/issuers"
)

// Request is one issuance to decide on: where it comes from (cluster,
// namespace, issuer) and the x509 certificate that will be signed.
type Request struct {
	// Cluster is the downstream cluster's name.
	Cluster string
	// ClusterLabels are the labels of its Argo CD cluster Secret (none for a
	// kubeconfig-file cluster).
	ClusterLabels map[string]string
	// Certificate is the downstream Certificate (its namespace is the
	// downstream namespace). Its issuerRef and namespace select policies;
	// its spec.privateKey says which key the hub will generate when
	// Template has no public key yet.
	Certificate *cmapi.Certificate
	// Template is the certificate that will be signed, as the signer gets
	// it (issuers.Template). Nil: Evaluate builds it from Certificate.
	// Every attribute, SAN, usage, basic constraint and the lifetime are
	// read from here, never from the spec.
	Template *x509.Certificate
}

// facts are what the template asks for, computed once per evaluation.
type facts struct {
	cn         []string // every CN attribute of the subject
	dns        []string
	ips        []string
	uris       []string
	emails     []string
	otherNames []string // "<oid>=<value>"
	subject    map[subjectField][]string
	serial     []string // every serialNumber attribute
	unknown    string   // an attribute or SAN no policy field covers, or a parse error
	isCA       bool
	ku         x509.KeyUsage
	eku        []x509.ExtKeyUsage
	unknownEKU []string // extended key usages cert-manager has no name for, as dotted OIDs
	duration   time.Duration
	algorithm  cmapi.PrivateKeyAlgorithm
	size       int
	// tmpl is the template, for the CA's name constraints.
	tmpl *x509.Certificate
}

var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidSerialNumber = asn1.ObjectIdentifier{2, 5, 4, 5}
	oidSAN          = asn1.ObjectIdentifier{2, 5, 29, 17}
)

// newFacts reads r's template (built from the Certificate when nil).
func newFacts(r Request) *facts {
	tmpl := r.Template
	if tmpl == nil {
		var err error
		if tmpl, err = issuers.Template(r.Certificate); err != nil {
			return &facts{unknown: fmt.Sprintf("the certificate cannot be built from the spec: %v", err)}
		}
	}
	f := &facts{tmpl: tmpl, isCA: tmpl.BasicConstraintsValid && tmpl.IsCA, ku: tmpl.KeyUsage, eku: tmpl.ExtKeyUsage,
		duration: tmpl.NotAfter.Sub(tmpl.NotBefore)}
	for _, oid := range tmpl.UnknownExtKeyUsage {
		f.unknownEKU = append(f.unknownEKU, oid.String())
	}
	f.readSubject(tmpl)
	f.readSANs(tmpl)
	f.algorithm, f.size = keyOf(tmpl, r.Certificate)
	return f
}

// readSubject collects every attribute of every RDN of the subject the
// certificate will carry (RawSubject when set, as x509 signs it).
func (f *facts) readSubject(tmpl *x509.Certificate) {
	rdns := tmpl.Subject.ToRDNSequence()
	if len(tmpl.RawSubject) > 0 {
		var err error
		if rdns, err = pki.UnmarshalRawDerBytesToRDNSequence(tmpl.RawSubject); err != nil {
			f.unknown = fmt.Sprintf("the subject does not parse: %v", err)
			return
		}
	}
	f.subject = map[subjectField][]string{}
	for _, rdn := range rdns {
		for _, atv := range rdn {
			val := fmt.Sprint(atv.Value)
			switch {
			case atv.Type.Equal(oidCommonName):
				f.cn = append(f.cn, val)
			case atv.Type.Equal(oidSerialNumber):
				f.serial = append(f.serial, val)
			default:
				field, ok := subjectOIDs[atv.Type.String()]
				if len(atv.Type) == 0 { // a type cert-manager could not parse as a name or an OID
					if f.unknown == "" {
						f.unknown = fmt.Sprintf("subject attribute %q has no type", val)
					}
					continue
				}
				if !ok {
					field, val = fieldOtherAttributes, atv.Type.String()+"="+val
				}
				f.subject[field] = append(f.subject[field], val)
			}
		}
	}
}

// readSANs collects the names of the SAN extension the template carries
// (which x509 signs instead of the typed fields) and the typed fields.
func (f *facts) readSANs(tmpl *x509.Certificate) {
	f.dns = append(f.dns, tmpl.DNSNames...)
	f.emails = append(f.emails, tmpl.EmailAddresses...)
	for _, ip := range tmpl.IPAddresses {
		f.ips = append(f.ips, ip.String())
	}
	for _, u := range tmpl.URIs {
		f.uris = append(f.uris, u.String())
	}
	for _, ext := range tmpl.ExtraExtensions {
		if !ext.Id.Equal(oidSAN) {
			continue
		}
		gns, err := pki.UnmarshalSANs(ext.Value)
		if err != nil {
			f.unknown = fmt.Sprintf("the subject alternative names do not parse: %v", err)
			return
		}
		f.dns = appendNew(f.dns, gns.DNSNames...)
		f.emails = appendNew(f.emails, gns.RFC822Names...)
		f.uris = appendNew(f.uris, gns.UniformResourceIdentifiers...)
		for _, ip := range gns.IPAddresses {
			f.ips = appendNew(f.ips, ip.String())
		}
		for _, on := range gns.OtherNames {
			var s string
			if _, err := asn1.UnmarshalWithParams(on.Value.Bytes, &s, "utf8"); err != nil {
				f.unknown = fmt.Sprintf("otherName %s is not a UTF8String", on.TypeID)
				return
			}
			f.otherNames = append(f.otherNames, on.TypeID.String()+"="+s)
		}
		if len(gns.X400Addresses)+len(gns.DirectoryNames)+len(gns.EDIPartyNames)+len(gns.RegisteredIDs) > 0 {
			f.unknown = "a subject alternative name of a kind no policy field covers (x400Address, directoryName, ediPartyName, registeredID)"
		}
	}
}

// appendNew appends the values of vs not already in to, in linear time
// (a Certificate may ask for tens of thousands of names).
func appendNew(to []string, vs ...string) []string {
	if len(vs) == 0 {
		return to
	}
	seen := make(map[string]struct{}, len(to)+len(vs))
	for _, w := range to {
		seen[w] = struct{}{}
	}
	for _, v := range vs {
		if _, ok := seen[v]; !ok {
			seen[v] = struct{}{}
			to = append(to, v)
		}
	}
	return to
}

// keyOf is the key the certificate will be issued for: the template's
// public key when known, else the one the hub generates from the spec.
func keyOf(tmpl *x509.Certificate, crt *cmapi.Certificate) (cmapi.PrivateKeyAlgorithm, int) {
	switch k := tmpl.PublicKey.(type) {
	case *rsa.PublicKey:
		return cmapi.RSAKeyAlgorithm, k.N.BitLen()
	case *ecdsa.PublicKey:
		return cmapi.ECDSAKeyAlgorithm, k.Curve.Params().BitSize
	case ed25519.PublicKey:
		return cmapi.Ed25519KeyAlgorithm, 0
	}
	algorithm, size := cmapi.RSAKeyAlgorithm, 0
	if crt != nil {
		if pk := crt.Spec.PrivateKey; pk != nil {
			if pk.Algorithm != "" {
				algorithm = pk.Algorithm
			}
			size = pk.Size
		}
	}
	if size == 0 {
		switch algorithm {
		case cmapi.RSAKeyAlgorithm:
			size = 2048
		case cmapi.ECDSAKeyAlgorithm:
			size = 256
		}
	}
	if algorithm == cmapi.Ed25519KeyAlgorithm {
		size = 0
	}
	return algorithm, size
}
