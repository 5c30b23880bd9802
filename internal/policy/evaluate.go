package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Decision is the outcome of Set.Evaluate.
type Decision struct {
	// Allowed: the Certificate may be issued.
	Allowed bool
	// Policy names the IssuancePolicy that allowed it; empty when the
	// default decided.
	Policy string
	// Message says why (for a denial: the field, the value, the policies).
	Message string
	// SelfSignedOnly: allowed by the default policy only if the issuer
	// signs the certificate with the certificate's own key (a SelfSigned
	// issuer) — a CA no IssuancePolicy selects. Such a CA is chained to
	// nothing the hub vouches for (its owner could make it with openssl);
	// one signed by a hub CA needs a policy. Callers apply ForIssuer once
	// they know the signer.
	SelfSignedOnly bool
	// ca: for an allowed CA certificate, what it is signed with (Constrain).
	ca *caPowers
	// denial is the message ForIssuer gives for any other signer.
	denial string
}

// ForIssuer is the decision for a signer that is (selfSigned) or is not a
// SelfSigned issuer: d itself unless d is SelfSignedOnly and the signer is
// not, which is denied, naming the policy it needs.
func (d Decision) ForIssuer(selfSigned bool) Decision {
	if !d.SelfSignedOnly || selfSigned {
		return d
	}
	return Decision{Message: d.denial}
}

// caNeedsPolicy is the denial of a CA a hub CA would sign under the
// default policy: the policy to write.
const caNeedsPolicy = "isCA true signed by a hub CA needs an IssuancePolicy that selects the Certificate and allows it " +
	"(allowed.isCA: true, allowed.maxPathLen, and the names the CA may sign in allowed.dnsNames, ipAddresses, emailAddresses, uris, " +
	"which become its x509 name constraints): the default policy allows a CA from a SelfSigned issuer only (docs/issuancepolicy.md, \"Sub-CAs\")"

// maxMessage bounds a denial message (it lands in a condition and an Event).
const maxMessage = 1024

// Evaluate decides on one issuance: the certificate r.Template (built from
// r.Certificate when nil) exactly as it will be signed. It never fails: a
// template it cannot read is denied, as nothing can allow it. An allowed CA
// certificate must be signed only after Decision.Constrain.
func (s *Set) Evaluate(r Request) Decision {
	crt := r.Certificate
	x := newVars(r.Cluster, crt.Namespace)
	var f *facts // built on the first policy that selects
	considered := 0
	for i := range s.policies {
		p := &s.policies[i]
		if !p.selects(r, x) {
			continue
		}
		considered++
		if p.invalid != nil {
			continue
		}
		if f == nil {
			f = newFacts(r)
		}
		if p.check(f, x, false) == "" {
			d := Decision{Allowed: true, Policy: p.name, Message: "allowed by IssuancePolicy " + strconv.Quote(p.name)}
			if f.isCA {
				d.ca, _ = p.caPowers(f, x) // check has derived them once already
			}
			return d
		}
	}
	if considered == 0 {
		if s.def == Deny {
			return Decision{Message: fmt.Sprintf("no IssuancePolicy selects cluster %q, namespace %q, issuer %s, and the default policy is deny",
				r.Cluster, crt.Namespace, issuerString(crt))}
		}
		unselected := fmt.Sprintf("no IssuancePolicy selects cluster %q, namespace %q, issuer %s", r.Cluster, crt.Namespace, issuerString(crt))
		if f = newFacts(r); f.unknown != "" {
			return Decision{Message: unselected + "; " + f.unknown}
		}
		if len(f.unknownEKU) > 0 { // a CSR's smart-card logon, say: nothing cert-manager would sign
			return Decision{Message: fmt.Sprintf("%s; extended key usage %s has no cert-manager name: only an IssuancePolicy that lists it in allowed.otherExtendedKeyUsages allows it", unselected, f.unknownEKU[0])}
		}
		if f.isCA {
			return Decision{Allowed: true, SelfSignedOnly: true,
				Message: "no IssuancePolicy selects it; the default policy is allow, and allows a CA from a SelfSigned issuer only (it is chained to nothing the hub vouches for)",
				denial:  unselected + "; " + caNeedsPolicy}
		}
		return Decision{Allowed: true, Message: "no IssuancePolicy selects it; the default policy is allow"}
	}
	// Denied: a second pass spells out why, policy by policy.
	if f == nil {
		f = newFacts(r)
	}
	var names []string
	var why strings.Builder
	for i := range s.policies {
		p := &s.policies[i]
		if !p.selects(r, x) {
			continue
		}
		names = append(names, p.name)
		if why.Len() >= maxMessage {
			continue
		}
		v := "the policy is invalid"
		if p.invalid != nil {
			v += ": " + p.invalid.Error()
		} else {
			v = p.check(f, x, true)
		}
		fmt.Fprintf(&why, "; %s: %s", p.name, v)
	}
	msg := fmt.Sprintf("denied by every IssuancePolicy that selects it (%s)%s", strings.Join(names, ", "), why.String())
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	return Decision{Message: msg}
}

func issuerString(crt *cmapi.Certificate) string {
	kind := crt.Spec.IssuerRef.Kind
	if kind == "" {
		kind = cmapi.IssuerKind
	}
	return kind + "/" + crt.Spec.IssuerRef.Name
}

func (p *compiled) selects(r Request, x vars) bool {
	if len(p.clusterNames) > 0 && !anyMatch(p.clusterNames, r.Cluster, x) {
		return false
	}
	if p.clusterLabels != nil && !p.clusterLabels.Matches(labels.Set(r.ClusterLabels)) {
		return false
	}
	if len(p.namespaces) > 0 && !anyMatch(p.namespaces, r.Certificate.Namespace, x) {
		return false
	}
	if p.issuer != nil {
		ref := r.Certificate.Spec.IssuerRef
		kind, group := ref.Kind, ref.Group
		if kind == "" {
			kind = cmapi.IssuerKind
		}
		if group == "" {
			group = cmapi.SchemeGroupVersion.Group
		}
		for i, v := range [3]string{ref.Name, kind, group} {
			if pt := &p.issuer[i]; pt.raw != "" && !pt.match(v, x) {
				return false
			}
		}
	}
	return true
}

type subjectField string

// denied is check's answer without explain.
const denied = "denied"

const (
	fieldOrganizations       subjectField = "organizations"
	fieldCountries           subjectField = "countries"
	fieldOrganizationalUnits subjectField = "organizationalUnits"
	fieldLocalities          subjectField = "localities"
	fieldProvinces           subjectField = "provinces"
	fieldStreetAddresses     subjectField = "streetAddresses"
	fieldPostalCodes         subjectField = "postalCodes"
	fieldDomainComponents    subjectField = "domainComponents"
	fieldUserIDs             subjectField = "userIDs"
	// fieldOtherAttributes holds every other attribute type as "<oid>=<value>".
	fieldOtherAttributes subjectField = "otherAttributes"
)

// subjectFields are the subject fields in the order a denial checks them.
var subjectFields = []subjectField{fieldOrganizations, fieldCountries, fieldOrganizationalUnits, fieldLocalities, fieldProvinces,
	fieldStreetAddresses, fieldPostalCodes, fieldDomainComponents, fieldUserIDs, fieldOtherAttributes}

// subjectPaths are the fields' paths in a denial.
var subjectPaths = map[subjectField]string{
	fieldOrganizations: "spec.subject.organizations", fieldCountries: "spec.subject.countries", fieldOrganizationalUnits: "spec.subject.organizationalUnits",
	fieldLocalities: "spec.subject.localities", fieldProvinces: "spec.subject.provinces", fieldStreetAddresses: "spec.subject.streetAddresses", fieldPostalCodes: "spec.subject.postalCodes",
	fieldDomainComponents: "spec.literalSubject DC", fieldUserIDs: "spec.literalSubject UID", fieldOtherAttributes: "spec.literalSubject attribute",
}

// subjectOIDs maps literalSubject attribute types to policy fields; any
// other type is fieldOtherAttributes.
var subjectOIDs = map[string]subjectField{
	"2.5.4.10": fieldOrganizations, "2.5.4.6": fieldCountries, "2.5.4.11": fieldOrganizationalUnits,
	"2.5.4.7": fieldLocalities, "2.5.4.8": fieldProvinces, "2.5.4.9": fieldStreetAddresses, "2.5.4.17": fieldPostalCodes,
	"0.9.2342.19200300.100.1.25": fieldDomainComponents, "0.9.2342.19200300.100.1.1": fieldUserIDs,
}

// check returns "" when p allows every field of f, else (with explain) the
// first field it does not allow, the value, and what the policy allows;
// without explain, just denied (no formatting on the fast path).
func (p *compiled) check(f *facts, x vars, explain bool) string {
	if f.unknown != "" {
		return f.unknown
	}
	if f.isCA {
		if !p.isCA {
			if !explain {
				return denied
			}
			return "spec.isCA true is not allowed (allowed.isCA is false)"
		}
		if _, why := p.caPowers(f, x); why != "" {
			return why
		}
	}
	for _, cn := range f.cn { // several only from a literalSubject: each is checked
		if v := p.cn.check("spec.commonName", cn, x, explain); v != "" {
			return v
		}
	}
	if len(f.cn) == 0 {
		if v := p.cn.check("spec.commonName", "", x, explain); v != "" {
			return v
		}
	}
	for _, c := range []struct {
		field string
		vals  []string
		allow *valuesPattern
	}{
		{"spec.dnsNames", f.dns, p.dns}, {"spec.uris", f.uris, p.uris},
		{"spec.emailAddresses", f.emails, p.emails}, {"spec.otherNames", f.otherNames, p.otherName},
	} {
		if v := c.allow.check(c.field, c.vals, x, explain); v != "" {
			return v
		}
	}
	if v := p.ips.check(f.ips, explain); v != "" {
		return v
	}
	for _, field := range subjectFields {
		if v := p.subject[field].check(subjectPaths[field], f.subject[field], x, explain); v != "" {
			return v
		}
	}
	for _, sn := range f.serial {
		if v := p.serial.check("spec.subject.serialNumber", sn, x, explain); v != "" {
			return v
		}
	}
	if len(f.serial) == 0 {
		if v := p.serial.check("spec.subject.serialNumber", "", x, explain); v != "" {
			return v
		}
	}
	if v := p.checkUsages(f, x, explain); v != "" {
		return v
	}
	if p.maxDuration != 0 && f.duration > p.maxDuration {
		if !explain {
			return denied
		}
		return fmt.Sprintf("duration %s exceeds maxDuration %s", f.duration, p.maxDuration)
	}
	if p.minDuration != 0 && f.duration < p.minDuration {
		if !explain {
			return denied
		}
		return fmt.Sprintf("duration %s is shorter than minDuration %s", f.duration, p.minDuration)
	}
	if k := p.key; k != nil {
		if k.Algorithm != "" && k.Algorithm != f.algorithm {
			if !explain {
				return denied
			}
			return fmt.Sprintf("spec.privateKey.algorithm %s is not allowed (allowed: %s)", f.algorithm, k.Algorithm)
		}
		if f.algorithm != cmapi.Ed25519KeyAlgorithm {
			if k.MinSize != 0 && f.size < k.MinSize {
				if !explain {
					return denied
				}
				return fmt.Sprintf("spec.privateKey.size %d is below minSize %d", f.size, k.MinSize)
			}
			if k.MaxSize != 0 && f.size > k.MaxSize {
				if !explain {
					return denied
				}
				return fmt.Sprintf("spec.privateKey.size %d is above maxSize %d", f.size, k.MaxSize)
			}
		}
	}
	return ""
}

func (a *valuePattern) check(field, v string, x vars, explain bool) string {
	switch {
	case v == "":
		if a != nil && a.required {
			if !explain {
				return denied
			}
			return field + " is required"
		}
		return ""
	case a == nil || !a.set:
		if !explain {
			return denied
		}
		return fmt.Sprintf("%s %q is not allowed (the policy allows none)", field, v)
	case !a.p.match(v, x):
		if !explain {
			return denied
		}
		return fmt.Sprintf("%s %q is not allowed (allowed: %q)", field, v, a.p.raw)
	}
	return ""
}

func (a *valuesPattern) check(field string, vs []string, x vars, explain bool) string {
	if len(vs) == 0 {
		if a != nil && a.required {
			if !explain {
				return denied
			}
			return field + " is required"
		}
		return ""
	}
	if a == nil || len(a.ps) == 0 {
		if !explain {
			return denied
		}
		return fmt.Sprintf("%s %q is not allowed (the policy allows none)", field, vs[0])
	}
	for _, v := range vs {
		if !anyMatch(a.ps, v, x) {
			if !explain {
				return denied
			}
			return fmt.Sprintf("%s %q is not allowed (allowed: %s)", field, v, rawList(a.ps))
		}
	}
	return ""
}

func (a *cidrs) check(vs []string, explain bool) string {
	if len(vs) == 0 {
		if a != nil && a.required {
			if !explain {
				return denied
			}
			return "spec.ipAddresses is required"
		}
		return ""
	}
	if a == nil || len(a.prefixes) == 0 {
		if !explain {
			return denied
		}
		return fmt.Sprintf("spec.ipAddresses %q is not allowed (the policy allows none)", vs[0])
	}
next:
	for _, v := range vs {
		addr, err := netip.ParseAddr(v)
		if err != nil {
			if !explain {
				return denied
			}
			return fmt.Sprintf("spec.ipAddresses %q is not an IP address", v)
		}
		for _, p := range a.prefixes {
			if p.Contains(addr.Unmap()) || p.Contains(addr) {
				continue next
			}
		}
		if !explain {
			return denied
		}
		return fmt.Sprintf("spec.ipAddresses %q is not allowed (allowed: %s)", v, prefixList(a.prefixes))
	}
	return ""
}

func rawList(ps []pattern) string {
	out := make([]string, len(ps))
	for i := range ps {
		out[i] = ps[i].raw
	}
	return strings.Join(out, ", ")
}

func prefixList(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}

func usageList(m map[cmapi.KeyUsage]bool) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for u := range m {
		out = append(out, string(u))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
