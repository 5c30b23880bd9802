package certsync_test

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/gen"
)

// The policy property: for any Certificate spec that passes validation,
// every name and attribute of the certificate actually signed is one the
// single allowing policy lists (an oracle written apart from the engine
// reads the signed certificate), and a CA certificate carries the policy's
// path length and name constraints. FuzzPolicyProperty runs the same check
// under `make fuzz`.
func TestPolicyProperty(t *testing.T) {
	const perSeed = 1500
	var checked, allowed, signed int
	violations := map[string]int{} // by class (the oracle's message up to its first quote)
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		for i := range perSeed {
			c, a, s, err := propertyCase(r)
			checked += c
			allowed += a
			signed += s
			if err != nil {
				class := err.Error()[strings.Index(err.Error(), "certificate has ")+len("certificate has "):]
				class, _, _ = strings.Cut(class, "\"")
				if violations[class]++; violations[class] == 1 {
					t.Errorf("seed %d case %d: %v", seed, i, err)
				}
			}
		}
	}
	for class, n := range violations {
		t.Errorf("%d signed certificates had %s", n, class)
	}
	// The generator must reach both sides of the property, or it proves nothing.
	if allowed < checked/20 || allowed == checked {
		t.Fatalf("generated %d valid specs, %d allowed: the generator does not exercise the policy", checked, allowed)
	}
	t.Logf("%d valid specs checked, %d allowed and signed (%d CA certificates)", checked, allowed, signed)
}

func FuzzPolicyProperty(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42} {
		f.Add(s, s+1)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		if _, _, _, err := propertyCase(r); err != nil {
			t.Fatal(err)
		}
	})
}

const propertyCluster, propertyNamespace = "east", "team"

// propertyCase draws one policy and one valid spec; when the hub allows
// the spec it signs it with a CA and checks the certificate against the
// policy. It returns how many specs were valid (0 or 1), allowed and
// CA-signed, and the first violation.
func propertyCase(r *rand.Rand) (valid, allowed, ca int, err error) {
	crt, err := gen.Certificate(propertyNamespace, gen.Spec(r, true))
	if err != nil || certspec.ValidateSpec(crt) != nil {
		return 0, 0, 0, nil
	}
	if r.IntN(5) == 0 { // a sub-CA asking for names a CA's constraints can hold
		crt.Spec.IsCA, crt.Spec.URIs, crt.Spec.OtherNames, crt.Spec.EmailAddresses = true, nil, nil, nil
	}
	spec := gen.PolicySpec(r)
	if r.IntN(4) > 0 {
		spec = gen.PolicyFor(r, crt)
	}
	set, err := policy.Compile([]hubapi.IssuancePolicy{fixture.Policy("p", spec)}, policy.Deny)
	if err != nil {
		return 1, 0, 0, nil // a generated pattern the compiler refuses: it allows nothing
	}
	tmpl, d, err := certsync.Admit(set, propertyCluster, crt)
	if err != nil || !d.Allowed {
		return 1, 0, 0, nil
	}
	tmpl.PublicKey = propertyKey.Public()
	bundle, err := pki.SignCSRTemplate(propertyCA, propertyCAKey, tmpl)
	if err != nil {
		return 1, 1, 0, fmt.Errorf("sign an allowed template: %w", err)
	}
	cert, err := pki.DecodeX509CertificateBytes(bundle.ChainPEM)
	if err != nil {
		return 1, 1, 0, err
	}
	if cert.IsCA {
		ca = 1
	}
	if err := oracle(spec.Allowed, spec.Constraints, cert); err != nil {
		p, _ := json.Marshal(spec)
		c, _ := json.Marshal(crt.Spec)
		return 1, 1, ca, fmt.Errorf("policy %s allowed spec %s, and the signed certificate has %w", p, c, err)
	}
	return 1, 1, ca, nil
}

var propertyKey, _ = pki.GenerateECPrivateKey(256)

// propertyCA is the CA the property test signs with.
var propertyCA, propertyCAKey = func() ([]*x509.Certificate, crypto.Signer) {
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "property root"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	_, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		panic(err)
	}
	return []*x509.Certificate{cert}, key
}()

// oracle checks cert against what a policy lists, reading the certificate
// as any relying party would, independently of the policy package.
func oracle(a hubapi.PolicyAllowed, c hubapi.PolicyConstraints, cert *x509.Certificate) error {
	rdns, err := pki.UnmarshalRawDerBytesToRDNSequence(cert.RawSubject)
	if err != nil {
		return err
	}
	for _, rdn := range rdns {
		for _, atv := range rdn {
			v := fmt.Sprint(atv.Value)
			var ok bool
			switch atv.Type.String() {
			case "2.5.4.3":
				ok = a.CommonName != nil && a.CommonName.Value != "" && glob(a.CommonName.Value, v)
			case "2.5.4.5":
				ok = a.Subject != nil && a.Subject.SerialNumber != nil && a.Subject.SerialNumber.Value != "" && glob(a.Subject.SerialNumber.Value, v)
			default:
				ok = subjectAllowed(a.Subject, atv.Type.String(), v)
			}
			if !ok {
				return fmt.Errorf("subject attribute %s=%q that the policy does not list", atv.Type, v)
			}
		}
	}
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 17}) {
			continue
		}
		gns, err := pki.UnmarshalSANs(ext.Value)
		if err != nil {
			return err
		}
		if len(gns.X400Addresses)+len(gns.DirectoryNames)+len(gns.EDIPartyNames)+len(gns.RegisteredIDs) > 0 {
			return fmt.Errorf("a SAN of a kind no policy field lists: %+v", gns)
		}
		for _, n := range gns.DNSNames {
			if !anyGlob(a.DNSNames, n) {
				return fmt.Errorf("DNS name %q", n)
			}
		}
		for _, n := range gns.RFC822Names {
			if !anyGlob(a.EmailAddresses, n) {
				return fmt.Errorf("email address %q", n)
			}
		}
		for _, n := range gns.UniformResourceIdentifiers {
			if !anyGlob(a.URIs, n) {
				return fmt.Errorf("URI %q", n)
			}
		}
		for _, ip := range gns.IPAddresses {
			if !inCIDRs(a.IPAddresses, ip) {
				return fmt.Errorf("IP address %s", ip)
			}
		}
		for _, on := range gns.OtherNames {
			var s string
			if _, err := asn1.UnmarshalWithParams(on.Value.Bytes, &s, "utf8"); err != nil || !anyGlob(a.OtherNames, on.TypeID.String()+"="+s) {
				return fmt.Errorf("otherName %s=%q", on.TypeID, s)
			}
		}
	}
	if cert.IsCA {
		if err := caAllowed(a, cert); err != nil {
			return err
		}
	}
	if err := usagesAllowed(a, cert); err != nil {
		return err
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if c.MaxDuration != nil && life > c.MaxDuration.Duration+time.Second {
		return fmt.Errorf("a lifetime of %s over maxDuration %s", life, c.MaxDuration.Duration)
	}
	if c.MinDuration != nil && life < c.MinDuration.Duration-time.Second {
		return fmt.Errorf("a lifetime of %s under minDuration %s", life, c.MinDuration.Duration)
	}
	return nil
}

// caAllowed: a CA only when the policy allows one, with at most its path
// length, and for every name type the policy lists narrowly, constraints
// that keep the CA's own signatures inside the policy.
func caAllowed(a hubapi.PolicyAllowed, cert *x509.Certificate) error {
	if !a.IsCA {
		return fmt.Errorf("isCA, which the policy does not allow")
	}
	want := 0
	if a.MaxPathLen != nil {
		want = *a.MaxPathLen
	}
	if cert.MaxPathLen < 0 || (cert.MaxPathLen == 0 && !cert.MaxPathLenZero) || cert.MaxPathLen > want {
		return fmt.Errorf("a path length of %d (zero %v), beyond the policy's %d", cert.MaxPathLen, cert.MaxPathLenZero, want)
	}
	if !anyGlob(a.DNSNames, "anything.at.all.example") { // the policy does not allow every DNS name
		if len(cert.PermittedDNSDomains) == 0 && !slices.Contains(cert.ExcludedDNSDomains, "") {
			return fmt.Errorf("a CA with no DNS name constraint (permitted %v)", cert.PermittedDNSDomains)
		}
		for _, d := range cert.PermittedDNSDomains {
			if probe := "probe." + strings.TrimPrefix(d, "."); !anyGlob(a.DNSNames, probe) {
				return fmt.Errorf("a DNS name constraint %q that permits %q", d, probe)
			}
		}
	}
	if a.IPAddresses == nil || len(a.IPAddresses.Values) == 0 {
		if len(cert.ExcludedIPRanges) == 0 && len(cert.PermittedIPRanges) == 0 {
			return fmt.Errorf("a CA with no IP constraint although the policy allows no IP address")
		}
	}
	if !anyGlob(a.URIs, "urn:anything") && len(cert.PermittedURIDomains) == 0 && !slices.Contains(cert.ExcludedURIDomains, "") {
		return fmt.Errorf("a CA with no URI constraint")
	}
	if !anyGlob(a.EmailAddresses, "x@anything.example") && len(cert.PermittedEmailAddresses) == 0 && !slices.Contains(cert.ExcludedEmailAddresses, "") {
		return fmt.Errorf("a CA with no email constraint")
	}
	return nil
}

// usagesAllowed: every key usage bit and extended key usage is cert-manager's
// default or one the policy lists.
func usagesAllowed(a hubapi.PolicyAllowed, cert *x509.Certificate) error {
	ku := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	if cert.IsCA {
		ku |= x509.KeyUsageCertSign
	}
	var eku []x509.ExtKeyUsage
	for _, u := range a.Usages {
		k, e, _ := pki.KeyUsagesForCertificateOrCertificateRequest([]cmapi.KeyUsage{u}, false)
		ku |= k
		eku = append(eku, e...)
	}
	if extra := cert.KeyUsage &^ ku; extra != 0 {
		return fmt.Errorf("key usage bits %b the policy does not list", extra)
	}
	for _, e := range cert.ExtKeyUsage {
		if !slices.Contains(eku, e) {
			return fmt.Errorf("extended key usage %d the policy does not list", e)
		}
	}
	if len(cert.UnknownExtKeyUsage) > 0 {
		return fmt.Errorf("unknown extended key usages %v", cert.UnknownExtKeyUsage)
	}
	return nil
}

var subjectOIDs = map[string]func(*hubapi.SubjectAllowed) *hubapi.StringValues{
	"2.5.4.10":                   func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.Organizations },
	"2.5.4.6":                    func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.Countries },
	"2.5.4.11":                   func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.OrganizationalUnits },
	"2.5.4.7":                    func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.Localities },
	"2.5.4.8":                    func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.Provinces },
	"2.5.4.9":                    func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.StreetAddresses },
	"2.5.4.17":                   func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.PostalCodes },
	"0.9.2342.19200300.100.1.25": func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.DomainComponents },
	"0.9.2342.19200300.100.1.1":  func(s *hubapi.SubjectAllowed) *hubapi.StringValues { return s.UserIDs },
}

// subjectAllowed: any other attribute type is allowed by otherAttributes,
// as "<oid>=<value>".
func subjectAllowed(s *hubapi.SubjectAllowed, oid, v string) bool {
	if s == nil {
		return false
	}
	if f, ok := subjectOIDs[oid]; ok {
		return anyGlob(f(s), v)
	}
	return anyGlob(s.OtherAttributes, oid+"="+v)
}

// glob matches v against a policy pattern with the property test's cluster
// and namespace, through a regular expression (not the engine's matcher).
func glob(pattern, v string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		p = strings.NewReplacer(hubapi.VarCluster, propertyCluster, hubapi.VarNamespace, propertyNamespace).Replace(p)
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^(?s:" + strings.Join(parts, ".*") + ")$").MatchString(v)
}

func anyGlob(vs *hubapi.StringValues, v string) bool {
	if vs == nil {
		return false
	}
	for _, p := range vs.Values {
		if glob(p, v) {
			return true
		}
	}
	return false
}

func inCIDRs(vs *hubapi.StringValues, ip net.IP) bool {
	if vs == nil {
		return false
	}
	for _, c := range vs.Values {
		if !strings.Contains(c, "/") {
			if net.ParseIP(c).Equal(ip) {
				return true
			}
			continue
		}
		if _, n, err := net.ParseCIDR(c); err == nil && n.Contains(ip) {
			return true
		}
	}
	return false
}
