package certspec

import (
	"fmt"
	"maps"
	"net"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
)

// Limits from cert-manager's API (pkg/apis/certmanager/v1).
const (
	minDuration    = time.Hour
	minRenewBefore = 5 * time.Minute
	maxCommonName  = 64
	// certManagerGroup is the API group of cert-manager's own issuers.
	certManagerGroup = "cert-manager.io"
)

// Error is why a Certificate spec cannot be issued: the reason of the
// first invalid field and every field error, as cert-manager's webhook would
// have reported them. Downstream clusters run no cert-manager webhook and the
// CRD has no validation rules, so the hub validates.
type Error struct {
	// Reason is the condition reason of the first invalid field.
	Reason string
	// Errs are every field error.
	Errs field.ErrorList
}

func (e *Error) Error() string { return e.Errs.ToAggregate().Error() }

// reasonFor maps a field path to the condition reason users see.
func reasonFor(path string) string {
	for _, r := range []struct{ prefix, reason string }{
		{"spec.secretName", reasons.InvalidSecretName},
		{"spec.secretTemplate", reasons.InvalidSecretName},
		{"spec.issuerRef", reasons.InvalidIssuerRef},
		{"spec.subject", reasons.InvalidSubject},
		{"spec.literalSubject", reasons.InvalidSubject},
		{"spec.duration", reasons.InvalidLifetime},
		{"spec.renewBefore", reasons.InvalidLifetime},
		{"spec.renewal", reasons.InvalidLifetime},
		{"spec.privateKey", reasons.InvalidPrivateKey},
		{"spec.usages", reasons.InvalidUsages},
		{"spec.keystores", reasons.InvalidKeystores},
		{"spec.additionalOutputFormats", reasons.InvalidOutputFormats},
		{"spec.revisionHistoryLimit", reasons.InvalidSpec},
		{"spec.nameConstraints", reasons.InvalidSpec},
	} {
		if strings.HasPrefix(path, r.prefix) {
			return r.reason
		}
	}
	return reasons.InvalidNames // commonName, dnsNames, ipAddresses, uris, emailAddresses, otherNames, "no names"
}

var knownUsages = map[cmapi.KeyUsage]bool{
	cmapi.UsageSigning: true, cmapi.UsageDigitalSignature: true, cmapi.UsageContentCommitment: true,
	cmapi.UsageKeyEncipherment: true, cmapi.UsageKeyAgreement: true, cmapi.UsageDataEncipherment: true,
	cmapi.UsageCertSign: true, cmapi.UsageCRLSign: true, cmapi.UsageEncipherOnly: true, cmapi.UsageDecipherOnly: true,
	cmapi.UsageAny: true, cmapi.UsageServerAuth: true, cmapi.UsageClientAuth: true, cmapi.UsageCodeSigning: true,
	cmapi.UsageEmailProtection: true, cmapi.UsageSMIME: true, cmapi.UsageIPsecEndSystem: true,
	cmapi.UsageIPsecTunnel: true, cmapi.UsageIPsecUser: true, cmapi.UsageTimestamping: true,
	cmapi.UsageOCSPSigning: true, cmapi.UsageMicrosoftSGC: true, cmapi.UsageNetscapeSGC: true,
}

// ValidateSpec mirrors cert-manager's webhook validation of a Certificate
// (internal/apis/certmanager/validation, not importable). It returns nil or a
// *Error.
func ValidateSpec(crt *cmapi.Certificate) error {
	s := crt.Spec
	p := field.NewPath("spec")
	var el field.ErrorList

	if s.SecretName == "" {
		el = append(el, field.Required(p.Child("secretName"), "must be specified"))
	} else if msgs := validation.IsDNS1123Subdomain(s.SecretName); len(msgs) > 0 {
		el = append(el, field.Invalid(p.Child("secretName"), s.SecretName, strings.Join(msgs, "; ")))
	}
	if t := s.SecretTemplate; t != nil {
		for _, k := range slices.Sorted(maps.Keys(t.Annotations)) {
			if strings.HasPrefix(k, "cert-manager.io/") {
				el = append(el, field.Invalid(p.Child("secretTemplate", "annotations"), k, "cert-manager.io/* annotations are not allowed"))
			} else if why := reservedKey(k); why != "" {
				el = append(el, field.Invalid(p.Child("secretTemplate", "annotations"), k, why))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(t.Labels)) {
			if why := reservedKey(k); why != "" || strings.HasPrefix(k, "cert-manager.io/") || k == argoInstanceLabel {
				if why == "" {
					why = "is reserved (cert-manager's, or Argo CD's tracking label)"
				}
				el = append(el, field.Invalid(p.Child("secretTemplate", "labels"), k, why))
			}
		}
	}
	el = append(el, validateIssuerRef(s.IssuerRef, p)...)

	commonName := s.CommonName
	var literalCNs []string // every CN of a literalSubject: each is signed
	if s.LiteralSubject != "" {
		if s.CommonName != "" {
			el = append(el, field.Invalid(p.Child("commonName"), s.CommonName, "When providing a `LiteralSubject` no `commonName` may be provided."))
		}
		if s.Subject != nil {
			el = append(el, field.Invalid(p.Child("subject"), "...", "When providing a `LiteralSubject` no `Subject` properties may be provided."))
		}
		rdns, err := pki.UnmarshalSubjectStringToRDNSequence(s.LiteralSubject)
		if err != nil {
			el = append(el, field.Invalid(p.Child("literalSubject"), s.LiteralSubject, err.Error()))
		}
		for _, rdn := range rdns {
			for _, atv := range rdn {
				switch {
				case atv.Type.Equal(nil):
					el = append(el, field.Invalid(p.Child("literalSubject"), s.LiteralSubject, fmt.Sprintf("Literal subject contains unrecognized key with value [%s]", atv.Value)))
				case atv.Type.Equal(pki.OIDConstants.CommonName):
					if str, ok := atv.Value.(string); ok {
						commonName = str
						literalCNs = append(literalCNs, str)
					} else {
						el = append(el, field.Invalid(p.Child("literalSubject"), atv.Value, "Field with type CN should be a string"))
					}
				}
			}
		}
	}
	if commonName == "" && len(s.DNSNames) == 0 && len(s.URIs) == 0 && len(s.EmailAddresses) == 0 &&
		len(s.IPAddresses) == 0 && len(s.OtherNames) == 0 {
		el = append(el, field.Invalid(p, "", "at least one of commonName (from the commonName field or from a literalSubject), dnsNames, emailAddresses, ipAddresses, otherNames, or uris must be set"))
	}
	if len(commonName) > maxCommonName {
		el = append(el, field.TooLong(p.Child("commonName"), commonName, maxCommonName))
	} else {
		// cert-manager checks the last CN only; every CN is signed, so every
		// one is held to x509's upper bound (ub-common-name), in bytes.
		for _, cn := range literalCNs {
			if len(cn) > maxCommonName {
				el = append(el, field.TooLong(p.Child("commonName"), cn, maxCommonName))
				break
			}
		}
	}
	for i, d := range s.DNSNames {
		if d == "" {
			el = append(el, field.Invalid(p.Child("dnsNames").Index(i), d, "must not be empty"))
		}
	}
	for i, ip := range s.IPAddresses {
		if net.ParseIP(ip) == nil {
			el = append(el, field.Invalid(p.Child("ipAddresses").Index(i), ip, "invalid IP address"))
		}
	}
	for i, u := range s.URIs {
		if pu, err := url.Parse(u); err != nil || pu.Scheme == "" {
			el = append(el, field.Invalid(p.Child("uris").Index(i), u, "invalid URI: must be absolute"))
		}
	}
	for i, e := range s.EmailAddresses {
		a, err := mail.ParseAddress(e)
		if err != nil {
			el = append(el, field.Invalid(p.Child("emailAddresses").Index(i), e, fmt.Sprintf("invalid email address: %s", err)))
		} else if a.Address != e {
			el = append(el, field.Invalid(p.Child("emailAddresses").Index(i), e, "invalid email address: make sure the supplied value only contains the email address itself"))
		}
	}
	for i, on := range s.OtherNames {
		if on.OID == "" {
			el = append(el, field.Required(p.Child("otherNames").Index(i).Child("oid"), "must be specified"))
		} else if _, err := pki.ParseObjectIdentifier(on.OID); err != nil {
			el = append(el, field.Invalid(p.Child("otherNames").Index(i).Child("oid"), on.OID, "invalid oid syntax"))
		}
		if on.UTF8Value == "" {
			el = append(el, field.Required(p.Child("otherNames").Index(i).Child("utf8Value"), "must be set to a valid non-empty UTF8 string"))
		}
	}

	el = append(el, validateLifetime(crt, p)...)
	el = append(el, validatePrivateKey(crt, p)...)
	for i, u := range s.Usages {
		if !knownUsages[u] {
			el = append(el, field.Invalid(p.Child("usages").Index(i), u, "unknown keyusage"))
		}
	}
	if s.RevisionHistoryLimit != nil && *s.RevisionHistoryLimit < 1 {
		el = append(el, field.Invalid(p.Child("revisionHistoryLimit"), *s.RevisionHistoryLimit, "must not be less than 1"))
	}
	for i, f := range s.AdditionalOutputFormats {
		if f.Type != cmapi.CertificateOutputFormatDER && f.Type != cmapi.CertificateOutputFormatCombinedPEM {
			el = append(el, field.NotSupported(p.Child("additionalOutputFormats").Index(i).Child("type"), f.Type, []string{"DER", "CombinedPEM"}))
		}
	}
	if nc := s.NameConstraints; nc != nil {
		if !s.IsCA {
			el = append(el, field.Invalid(p.Child("nameConstraints"), "...", "isCA should be true when nameConstraints is set"))
		}
		if nc.Permitted == nil && nc.Excluded == nil {
			el = append(el, field.Invalid(p.Child("nameConstraints"), "...", "either permitted or excluded must be set"))
		}
	}
	el = append(el, validateKeystores(crt, p)...)

	if len(el) == 0 {
		return nil
	}
	return &Error{Reason: reasonFor(el[0].Field), Errs: el}
}

// validateIssuerRef is cert-manager's webhook rule: a name, and for the
// cert-manager.io group (or none) a kind of Issuer or ClusterIssuer. Kinds of
// other groups are not checked here; the reconciler refuses them for good.
// argoInstanceLabel is Argo CD's default resource tracking label: on a
// Secret it makes Argo CD count the Secret as part of an Application (and
// prune it).
const argoInstanceLabel = "app.kubernetes.io/instance"

// reservedKey says why a secretTemplate label or annotation key may not be
// set by a downstream user ("" when it may): certhub's own marks (ownership,
// writer, loop count), Argo CD's (a Secret labelled
// argocd.argoproj.io/secret-type=cluster in a cluster that runs Argo CD or a
// hub would register a cluster), and the service-account token annotations
// that bind a Secret to a ServiceAccount.
func reservedKey(k string) string {
	switch {
	case strings.HasPrefix(k, hubapi.KeyPrefix):
		return "certhub.io/* keys are certhub's own marks"
	case strings.HasPrefix(k, "argocd.argoproj.io/"):
		return "argocd.argoproj.io/* keys belong to Argo CD (cluster registration, tracking)"
	case strings.HasPrefix(k, "kubernetes.io/service-account."):
		return "kubernetes.io/service-account.* keys bind a Secret to a ServiceAccount"
	}
	return ""
}

func validateIssuerRef(ref cmmeta.IssuerReference, p *field.Path) field.ErrorList {
	var el field.ErrorList
	rp := p.Child("issuerRef")
	if ref.Name == "" {
		el = append(el, field.Required(rp.Child("name"), "must be specified"))
	}
	if ref.Group != "" && ref.Group != certManagerGroup {
		return el
	}
	switch ref.Kind {
	case "", cmapi.IssuerKind, cmapi.ClusterIssuerKind:
	default:
		msg := "must be one of Issuer or ClusterIssuer"
		if ref.Group == "" {
			msg += fmt.Sprintf(" (did you forget to set %s?)", rp.Child("kind").Child("group").String())
		}
		el = append(el, field.Invalid(rp.Child("kind"), ref.Kind, msg))
	}
	return el
}

func validateLifetime(crt *cmapi.Certificate, p *field.Path) field.ErrorList {
	var el field.ErrorList
	s := crt.Spec
	duration := cmapi.DefaultCertificateDuration
	if s.Duration != nil {
		duration = s.Duration.Duration
	}
	if duration < minDuration {
		el = append(el, field.Invalid(p.Child("duration"), duration.String(), fmt.Sprintf("certificate duration must be greater than %s", minDuration)))
	}
	if s.RenewBefore != nil && s.RenewBeforePercentage != nil {
		el = append(el, field.Invalid(p.Child("renewBefore"), s.RenewBefore.Duration.String(), "renewBefore and renewBeforePercentage are mutually exclusive and cannot both be set"))
	}
	if s.RenewBefore != nil {
		if s.RenewBefore.Duration < minRenewBefore {
			el = append(el, field.Invalid(p.Child("renewBefore"), s.RenewBefore.Duration.String(), fmt.Sprintf("certificate renewBefore must be greater than %s", minRenewBefore)))
		}
		if duration <= s.RenewBefore.Duration {
			el = append(el, field.Invalid(p.Child("renewBefore"), s.RenewBefore.Duration.String(), fmt.Sprintf("certificate duration %s must be greater than renewBefore %s", duration, s.RenewBefore.Duration)))
		}
	}
	if pct := s.RenewBeforePercentage; pct != nil {
		rb := time.Duration(float64(duration) * float64(*pct) / 100)
		switch {
		case *pct <= 0 || *pct >= 100:
			el = append(el, field.Invalid(p.Child("renewBeforePercentage"), *pct, "must be between 0 and 100, exclusive"))
		case rb < minRenewBefore:
			el = append(el, field.Invalid(p.Child("renewBeforePercentage"), *pct, fmt.Sprintf("certificate renewBeforePercentage must result in a renewBefore greater than %s", minRenewBefore)))
		}
	}
	if r := s.Renewal; r != nil {
		if r.Policy != "" && r.Policy != cmapi.CertificateRenewalPolicyRenewBefore && r.Policy != cmapi.CertificateRenewalPolicyDisabled {
			el = append(el, field.NotSupported(p.Child("renewal", "policy"), r.Policy, []string{"RenewBefore", "Disabled"}))
		}
	}
	return el
}

func validatePrivateKey(crt *cmapi.Certificate, p *field.Path) field.ErrorList {
	pk := crt.Spec.PrivateKey
	if pk == nil {
		return nil
	}
	var el field.ErrorList
	kp := p.Child("privateKey")
	switch pk.Algorithm {
	case "", cmapi.RSAKeyAlgorithm:
		if pk.Size != 0 && (pk.Size < pki.MinRSAKeySize || pk.Size > pki.MaxRSAKeySize) {
			el = append(el, field.Invalid(kp.Child("size"), pk.Size, fmt.Sprintf("must be between %d and %d for rsa keyAlgorithm", pki.MinRSAKeySize, pki.MaxRSAKeySize)))
		}
	case cmapi.ECDSAKeyAlgorithm:
		if pk.Size != 0 && pk.Size != 256 && pk.Size != 384 && pk.Size != 521 {
			el = append(el, field.NotSupported(kp.Child("size"), pk.Size, []string{"256", "384", "521"}))
		}
	case cmapi.Ed25519KeyAlgorithm:
	default:
		el = append(el, field.Invalid(kp.Child("algorithm"), pk.Algorithm, "must be either empty or one of RSA, ECDSA or Ed25519"))
	}
	if pk.Encoding != "" && pk.Encoding != cmapi.PKCS1 && pk.Encoding != cmapi.PKCS8 {
		el = append(el, field.NotSupported(kp.Child("encoding"), pk.Encoding, []string{"PKCS1", "PKCS8"}))
	}
	if pk.RotationPolicy != "" && pk.RotationPolicy != cmapi.RotationPolicyNever && pk.RotationPolicy != cmapi.RotationPolicyAlways {
		el = append(el, field.NotSupported(kp.Child("rotationPolicy"), pk.RotationPolicy, []string{"Never", "Always"}))
	}
	return el
}

func validateKeystores(crt *cmapi.Certificate, p *field.Path) field.ErrorList {
	ks := crt.Spec.Keystores
	if ks == nil {
		return nil
	}
	var el field.ErrorList
	check := func(name string, path *field.Path, ref string, pw *string) {
		switch {
		case ref != "" && pw != nil:
			el = append(el, field.Forbidden(path, fmt.Sprintf("%s: only one of passwordSecretRef or password may be set", name)))
		case ref == "" && pw == nil:
			el = append(el, field.Forbidden(path, fmt.Sprintf("%s: one of passwordSecretRef or password must be set", name)))
		case pw != nil && *pw == "":
			el = append(el, field.Forbidden(path.Child("password"), fmt.Sprintf("%s: a literal password must not be empty", name)))
		}
	}
	if j := ks.JKS; j != nil && j.Create {
		check("JKS", p.Child("keystores", "jks"), j.PasswordSecretRef.Name, j.Password)
	}
	if k := ks.PKCS12; k != nil && k.Create {
		check("PKCS#12", p.Child("keystores", "pkcs12"), k.PasswordSecretRef.Name, k.Password)
		switch k.Profile {
		case "", cmapi.LegacyRC2PKCS12Profile, cmapi.LegacyDESPKCS12Profile, cmapi.Modern2023PKCS12Profile, cmapi.Modern2026PKCS12Profile:
		default:
			el = append(el, field.NotSupported(p.Child("keystores", "pkcs12", "profile"), k.Profile, []string{"LegacyRC2", "LegacyDES", "Modern2023", "Modern2026"}))
		}
	}
	return el
}

// Decode converts an unstructured Certificate to the typed API; when it
// does not decode, the error is an *Error naming the field.
func Decode(u *unstructured.Unstructured) (*cmapi.Certificate, error) {
	crt := &cmapi.Certificate{}
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crt)
	if err == nil {
		return crt, nil
	}
	p := field.NewPath("spec")
	for _, f := range []string{"duration", "renewBefore"} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", f); found {
			s, ok := v.(string)
			if !ok {
				return nil, &Error{Reason: reasons.InvalidLifetime, Errs: field.ErrorList{field.Invalid(p.Child(f), v, "must be a duration string, e.g. 2160h")}}
			}
			if _, perr := time.ParseDuration(s); perr != nil {
				return nil, &Error{Reason: reasons.InvalidLifetime, Errs: field.ErrorList{field.Invalid(p.Child(f), s, fmt.Sprintf("is not a duration (%v); use Go duration units, e.g. 24h", perr))}}
			}
		}
	}
	return nil, &Error{Reason: reasons.InvalidSpec, Errs: field.ErrorList{field.Invalid(p, "...", "cannot be decoded as a cert-manager.io/v1 Certificate: "+err.Error())}}
}

// Validate is the hub's verdict on a Certificate object as an API server
// stores it: nil when it decodes and its spec is valid, else an error
// naming the field and why. The reconciler decides the same way; the
// downstream ValidatingAdmissionPolicy is held to agree with it (the
// admission tier's differential test).
func Validate(u *unstructured.Unstructured) error {
	crt, err := Decode(u)
	if err != nil {
		return err
	}
	return ValidateSpec(crt)
}
