package certspec

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmutil "github.com/cert-manager/cert-manager/pkg/util"
	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/certhub/certhub/internal/issuers"
)

// oidSubjectAltName is the subjectAltName extension (RFC 5280 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// Mismatches lists the spec fields an issued certificate does not
// carry, by the rules of cert-manager's issuing path (pki.RequestMatchesSpec,
// which compares the CertificateRequest with the spec): names compared as
// unordered lists, literalSubject byte for byte as DER, structured subject
// field by field, isCA, key usages. certhub keeps no CertificateRequest, and
// its issuers sign the template built from the spec as it is, so the
// certificate stands in for the request.
//
// Not FuzzyX509AltNamesMatchSpec: cert-manager only falls back to it when
// the CertificateRequest is gone, and it cannot see a commonName that comes
// from literalSubject (a Certificate whose literal CN is not among its
// dnsNames was re-issued on every reconcile).
//
// Duration is not compared (the CA may shorten a certificate to its own
// expiry); a changed duration takes effect at the next renewal.
func Mismatches(cert *x509.Certificate, spec cmapi.CertificateSpec) []string {
	v := nameMismatches(cert, spec)
	v = append(v, subjectMismatches(cert, spec)...)
	if cert.IsCA != spec.IsCA {
		v = append(v, "spec.isCA")
	}
	if ku, eku, err := pki.KeyUsagesForCertificateOrCertificateRequest(spec.Usages, spec.IsCA); err != nil ||
		cert.KeyUsage != ku || !sameExtKeyUsages(cert.ExtKeyUsage, eku) {
		v = append(v, "spec.usages")
	}
	return v
}

// RequestHash digests the request cert-manager would build from spec:
// subject and extensions (names, usages, basic constraints).
func RequestHash(crt *cmapi.Certificate) (string, error) {
	csr, err := issuers.CertificateRequest(crt)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if len(csr.RawSubject) > 0 {
		h.Write(csr.RawSubject)
	} else {
		fmt.Fprintf(h, "%s", csr.Subject.ToRDNSequence())
	}
	for _, e := range csr.ExtraExtensions {
		fmt.Fprintf(h, "\x00%s\x00%t\x00%x", e.Id, e.Critical, e.Value)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// RequestMismatches compares spec with the request a Secret's certificate
// was ordered with (the hub's record holds its RequestHash), and its names with the certificate.
func RequestMismatches(cert *x509.Certificate, crt *cmapi.Certificate, hash string) []string {
	spec := crt.Spec
	if cn := spec.CommonName; cn != "" && !slices.Contains(spec.DNSNames, cn) {
		spec.DNSNames = append(slices.Clone(spec.DNSNames), cn) // the CA puts the common name among the names
	}
	v := nameMismatches(cert, spec)
	if h, err := RequestHash(crt); err != nil || h != hash {
		v = append(v, "the request (subject, usages or isCA)")
	}
	return v
}

// nameMismatches compares the subject alternative names.
func nameMismatches(cert *x509.Certificate, spec cmapi.CertificateSpec) []string {
	var v []string
	if !cmutil.EqualUnsorted(cert.DNSNames, spec.DNSNames) {
		v = append(v, "spec.dnsNames")
	}
	if ips, err := pki.IPAddressesFromStrings(spec.IPAddresses); err != nil || !cmutil.EqualIPsUnsorted(cert.IPAddresses, ips) {
		v = append(v, "spec.ipAddresses")
	}
	if !cmutil.EqualUnsorted(pki.URLsToString(cert.URIs), spec.URIs) {
		v = append(v, "spec.uris")
	}
	if !cmutil.EqualUnsorted(cert.EmailAddresses, spec.EmailAddresses) {
		v = append(v, "spec.emailAddresses")
	}
	if !cmutil.EqualOtherNamesUnsorted(otherNames(cert), spec.OtherNames) {
		v = append(v, "spec.otherNames")
	}
	return v
}

// subjectMismatches compares the subject: a literalSubject as the exact DER
// the template was built from, otherwise each structured field unordered.
func subjectMismatches(cert *x509.Certificate, spec cmapi.CertificateSpec) []string {
	if spec.LiteralSubject != "" {
		rdns, err := pki.UnmarshalSubjectStringToRDNSequence(spec.LiteralSubject)
		if err != nil {
			return []string{"spec.literalSubject"}
		}
		der, err := pki.MarshalRDNSequenceToRawDERBytes(rdns)
		if err != nil || !bytes.Equal(cert.RawSubject, der) {
			return []string{"spec.literalSubject"}
		}
		return nil
	}
	var v []string
	sub := cmapi.X509Subject{}
	if spec.Subject != nil {
		sub = *spec.Subject
	}
	got := cert.Subject
	if got.CommonName != spec.CommonName {
		v = append(v, "spec.commonName")
	}
	for _, f := range []struct {
		field     string
		cert, crt []string
	}{
		{"spec.subject.organizations", got.Organization, sub.Organizations},
		{"spec.subject.countries", got.Country, sub.Countries},
		{"spec.subject.organizationalUnits", got.OrganizationalUnit, sub.OrganizationalUnits},
		{"spec.subject.localities", got.Locality, sub.Localities},
		{"spec.subject.provinces", got.Province, sub.Provinces},
		{"spec.subject.streetAddresses", got.StreetAddress, sub.StreetAddresses},
		{"spec.subject.postalCodes", got.PostalCode, sub.PostalCodes},
	} {
		if !cmutil.EqualUnsorted(f.cert, f.crt) {
			v = append(v, f.field)
		}
	}
	if got.SerialNumber != sub.SerialNumber {
		v = append(v, "spec.subject.serialNumber")
	}
	return v
}

// otherNames returns the UTF-8 otherName SANs of cert; a SAN extension that
// does not parse yields nil, which mismatches any spec that asks for some.
func otherNames(cert *x509.Certificate) []cmapi.OtherName {
	var out []cmapi.OtherName
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		sans, err := pki.UnmarshalSANs(ext.Value)
		if err != nil {
			return nil
		}
		for _, on := range sans.OtherNames {
			var inner asn1.RawValue
			if _, err := asn1.Unmarshal(on.Value.Bytes, &inner); err != nil {
				return nil
			}
			uv, err := pki.UnmarshalUniversalValue(inner)
			if err != nil || uv.Type() != pki.UniversalValueTypeUTF8String {
				return nil
			}
			out = append(out, cmapi.OtherName{OID: on.TypeID.String(), UTF8Value: uv.UTF8String})
		}
	}
	return out
}

// sameExtKeyUsages compares extended key usages as sets: "server auth"
// listed twice in the spec is the same certificate as listed once.
func sameExtKeyUsages(a, b []x509.ExtKeyUsage) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// CAPowersDiffer says how a kept CA certificate's powers differ from those
// today's policy signs it with (tmpl, constrained by the decision): path
// length and every x509 name constraint. "" when they agree, or when
// either is no CA (names, usages and isCA are the spec's and the policy's
// to judge: Mismatches, Decision).
func CAPowersDiffer(cert, tmpl *x509.Certificate) string {
	if !cert.IsCA || !tmpl.IsCA {
		return ""
	}
	pathLen := func(c *x509.Certificate) string {
		if c.MaxPathLen > 0 || c.MaxPathLen == 0 && c.MaxPathLenZero {
			return fmt.Sprint(c.MaxPathLen)
		}
		return "unlimited"
	}
	var v []string
	if a, b := pathLen(cert), pathLen(tmpl); a != b {
		v = append(v, fmt.Sprintf("maxPathLen %s → %s", a, b))
	}
	ips := func(ns []*net.IPNet) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = n.String()
		}
		return out
	}
	for _, c := range []struct {
		what      string
		kept, now []string
	}{
		{"permitted DNS", cert.PermittedDNSDomains, tmpl.PermittedDNSDomains}, {"excluded DNS", cert.ExcludedDNSDomains, tmpl.ExcludedDNSDomains},
		{"permitted IP", ips(cert.PermittedIPRanges), ips(tmpl.PermittedIPRanges)}, {"excluded IP", ips(cert.ExcludedIPRanges), ips(tmpl.ExcludedIPRanges)},
		{"permitted email", cert.PermittedEmailAddresses, tmpl.PermittedEmailAddresses}, {"excluded email", cert.ExcludedEmailAddresses, tmpl.ExcludedEmailAddresses},
		{"permitted URI", cert.PermittedURIDomains, tmpl.PermittedURIDomains}, {"excluded URI", cert.ExcludedURIDomains, tmpl.ExcludedURIDomains},
	} {
		if !cmutil.EqualUnsorted(c.kept, c.now) {
			v = append(v, fmt.Sprintf("%s %q → %q", c.what, c.kept, c.now))
		}
	}
	return strings.Join(v, ", ")
}
