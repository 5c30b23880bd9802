package policy

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// A CA certificate the hub signs can sign anything its relying parties
// accept below it, so the policy that allows it is turned into x509 name
// constraints (RFC 5280 4.2.1.10) the CA carries: a sub-CA, or a downstream
// CA Issuer on its Secret, can then sign only names the policy allows —
// every verifier that walks the chain to the hub's root refuses the rest.
//
//	policy allows           the CA is signed with
//	dnsNames  *.X            permitted DNS ".X" (every name below X)
//	          X and *.X      permitted DNS "X" (X and every name below it)
//	          *              no DNS constraint
//	          none listed    excluded DNS "" (no DNS name at all)
//	ipAddresses CIDRs        permitted IP ranges; none listed: 0.0.0.0/0 and ::/0 excluded
//	emailAddresses *@*.X     permitted ".X"; with *@X too: "X" and ".X"; local@X: "local@X"
//	               *         no email constraint; none listed: excluded ""
//	uris      *              no URI constraint; none listed: excluded ""
//
// Any other pattern (X alone, which x509 would widen to every name below
// X; a wildcard inside a label; a URI path) cannot be expressed and the CA
// is refused with the pattern named, as is a policy allowing otherNames
// (x509 has no constraint for them). Constraints the Certificate asks for
// itself (spec.nameConstraints) are kept when they lie inside the policy's.
// Common names are not name constraints: clients that authenticate by CN
// must not trust a sub-CA (docs/security.md).

// caPowers is what a CA certificate allowed by a policy is signed with.
type caPowers struct {
	maxPathLen                    int
	permittedDNS, excludedDNS     []string
	permittedEmail, excludedEmail []string
	permittedURI, excludedURI     []string
	permittedIP, excludedIP       []*net.IPNet
}

// Constrain applies the decision's CA powers to tmpl, the template it
// allowed: for a CA certificate, the path length and name constraints of
// the allowing policy. A leaf template is left as it is.
func (d Decision) Constrain(tmpl *x509.Certificate) {
	if d.ca == nil || !tmpl.IsCA {
		return
	}
	c := d.ca
	tmpl.MaxPathLen, tmpl.MaxPathLenZero = c.maxPathLen, c.maxPathLen == 0
	tmpl.PermittedDNSDomainsCritical = true
	tmpl.PermittedDNSDomains, tmpl.ExcludedDNSDomains = c.permittedDNS, c.excludedDNS
	tmpl.PermittedEmailAddresses, tmpl.ExcludedEmailAddresses = c.permittedEmail, c.excludedEmail
	tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = c.permittedURI, c.excludedURI
	tmpl.PermittedIPRanges, tmpl.ExcludedIPRanges = c.permittedIP, c.excludedIP
}

// caPowers derives the CA powers of p for f (a CA template), or says why
// p's patterns cannot be a CA's constraints.
func (p *compiled) caPowers(f *facts, x vars) (*caPowers, string) {
	if p.otherName != nil && len(p.otherName.ps) > 0 {
		return nil, "a CA cannot be constrained to the policy's otherNames (x509 has no name constraint for them)"
	}
	c := &caPowers{maxPathLen: p.maxPathLen}
	var why string
	var all bool
	if c.permittedDNS, all, why = dnsConstraints(p.dns, x); why != "" {
		return nil, why
	} else if !all && len(c.permittedDNS) == 0 {
		c.excludedDNS = []string{""}
	}
	if c.permittedEmail, all, why = emailConstraints(p.emails, x); why != "" {
		return nil, why
	} else if !all && len(c.permittedEmail) == 0 {
		c.excludedEmail = []string{""}
	}
	if p.uris != nil && len(p.uris.ps) > 0 {
		for _, pt := range p.uris.ps {
			if pt.raw != "*" {
				return nil, fmt.Sprintf("allowed.uris %q cannot be a CA's name constraint (x509 constrains only a URI's host); allow \"*\" or no URIs for a CA", pt.raw)
			}
		}
	} else {
		c.excludedURI = []string{""}
	}
	if p.ips != nil && len(p.ips.prefixes) > 0 {
		for _, pfx := range p.ips.prefixes {
			c.permittedIP = append(c.permittedIP, &net.IPNet{IP: net.IP(pfx.Addr().AsSlice()), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())})
		}
	} else {
		c.excludedIP = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
	if why := c.keepAsked(f.tmpl, p); why != "" {
		return nil, why
	}
	return c, ""
}

// keepAsked narrows c to the constraints the template asks for itself
// (spec.nameConstraints), each of which must lie inside c's.
func (c *caPowers) keepAsked(tmpl *x509.Certificate, p *compiled) string {
	for _, d := range tmpl.PermittedDNSDomains {
		if len(c.permittedDNS) > 0 && !slices.ContainsFunc(c.permittedDNS, func(w string) bool { return domainWithin(d, w) }) ||
			slices.Contains(c.excludedDNS, "") {
			return fmt.Sprintf("spec.nameConstraints.permitted.dnsDomains %q is not inside what the policy allows (%s)", d, rawList(p.dns.psOrNil()))
		}
	}
	if len(tmpl.PermittedDNSDomains) > 0 {
		c.permittedDNS = tmpl.PermittedDNSDomains
	}
	for _, e := range tmpl.PermittedEmailAddresses {
		if len(c.permittedEmail) > 0 && !slices.ContainsFunc(c.permittedEmail, func(w string) bool { return emailWithin(e, w) }) ||
			slices.Contains(c.excludedEmail, "") {
			return fmt.Sprintf("spec.nameConstraints.permitted.emailAddresses %q is not inside what the policy allows", e)
		}
	}
	if len(tmpl.PermittedEmailAddresses) > 0 {
		c.permittedEmail = tmpl.PermittedEmailAddresses
	}
	for _, r := range tmpl.PermittedIPRanges {
		inner, ok := netipPrefix(r)
		if !ok || len(c.permittedIP) > 0 && !slices.ContainsFunc(c.permittedIP, func(w *net.IPNet) bool {
			outer, ok := netipPrefix(w)
			return ok && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
		}) || len(c.excludedIP) > 0 {
			return fmt.Sprintf("spec.nameConstraints.permitted.ipRanges %s is not inside what the policy allows", r)
		}
	}
	if len(tmpl.PermittedIPRanges) > 0 {
		c.permittedIP = tmpl.PermittedIPRanges
	}
	if len(tmpl.PermittedURIDomains) > 0 {
		if slices.Contains(c.excludedURI, "") {
			return "spec.nameConstraints.permitted.uriDomains: the policy allows no URIs"
		}
		c.permittedURI = tmpl.PermittedURIDomains
	}
	c.excludedDNS = append(c.excludedDNS, tmpl.ExcludedDNSDomains...)
	c.excludedEmail = append(c.excludedEmail, tmpl.ExcludedEmailAddresses...)
	c.excludedURI = append(c.excludedURI, tmpl.ExcludedURIDomains...)
	c.excludedIP = append(c.excludedIP, tmpl.ExcludedIPRanges...)
	return ""
}

func (v *valuesPattern) psOrNil() []pattern {
	if v == nil {
		return nil
	}
	return v.ps
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	if a.Is4In6() && ones >= 96 {
		a, ones = a.Unmap(), ones-96
	}
	return netip.PrefixFrom(a, ones), true
}

// literal is pt with variables resolved, and whether it holds no `*`
// beyond an optional leading "*." (returned without it).
func literal(pt pattern, x vars) (lit string, wildcard, ok bool) {
	var b strings.Builder
	for i, seg := range pt.segs {
		if i > 0 {
			b.WriteByte('*')
		}
		for _, pc := range seg {
			if x.unsafe(pc) {
				return "", false, false
			}
			b.WriteString(x.value(pc))
		}
	}
	s := b.String()
	if rest, found := strings.CutPrefix(s, "*."); found {
		return rest, true, !strings.Contains(rest, "*") && rest != ""
	}
	return s, false, !strings.Contains(s, "*") && s != ""
}

// dnsConstraints turns the allowed DNS patterns into permitted domains;
// all is true when "*" allows every name.
func dnsConstraints(v *valuesPattern, x vars) (permitted []string, all bool, why string) {
	if v == nil {
		return nil, false, ""
	}
	exact, below := map[string]bool{}, map[string]bool{}
	for _, pt := range v.ps {
		if pt.raw == "*" {
			return nil, true, ""
		}
		lit, wildcard, ok := literal(pt, x)
		if !ok {
			return nil, false, fmt.Sprintf("allowed.dnsNames %q cannot be a CA's name constraint (only \"*.domain\", or \"domain\" together with \"*.domain\")", pt.raw)
		}
		if wildcard {
			below[lit] = true
		} else {
			exact[lit] = true
		}
	}
	for d := range exact {
		if !below[d] {
			return nil, false, fmt.Sprintf("allowed.dnsNames %q cannot be a CA's name constraint: x509 would also permit every name below it; allow %q as well, or leave CAs out of this policy", d, "*."+d)
		}
		permitted = append(permitted, d)
	}
	for d := range below {
		if !exact[d] {
			permitted = append(permitted, "."+d)
		}
	}
	slices.Sort(permitted)
	return permitted, false, ""
}

// emailConstraints turns the allowed email patterns into permitted
// mailboxes and domains. "*@X" alone cannot be one: Go's verifier reads an
// email constraint "X" as X and every host below it, RFC 5280 as X only.
func emailConstraints(v *valuesPattern, x vars) (permitted []string, all bool, why string) {
	if v == nil {
		return nil, false, ""
	}
	exact, below := map[string]bool{}, map[string]bool{}
	for _, pt := range v.ps {
		if pt.raw == "*" {
			return nil, true, ""
		}
		local, domain, found := strings.Cut(pt.raw, "@")
		dom, wildcard, ok := literal(compilePattern(domain), x)
		switch {
		case !found || !ok:
		case local == "*" && wildcard:
			below[dom] = true
			continue
		case local == "*":
			exact[dom] = true
			continue
		case !wildcard && !strings.Contains(local, "*"):
			l, _, _ := literal(compilePattern(local), x)
			permitted = append(permitted, l+"@"+dom)
			continue
		}
		return nil, false, fmt.Sprintf("allowed.emailAddresses %q cannot be a CA's name constraint (only \"*@*.domain\", \"*@domain\" together with \"*@*.domain\", or one address)", pt.raw)
	}
	for d := range exact {
		if !below[d] {
			return nil, false, fmt.Sprintf("allowed.emailAddresses %q cannot be a CA's name constraint: verifiers differ on whether it permits hosts below %s; allow %q as well, or leave CAs out of this policy", "*@"+d, d, "*@*."+d)
		}
		permitted = append(permitted, d)
	}
	for d := range below {
		permitted = append(permitted, "."+d)
	}
	slices.Sort(permitted)
	return permitted, false, ""
}

// domainWithin reports whether every name the x509 DNS constraint inner
// permits is permitted by outer ("x.y" permits x.y and below; ".x.y" only
// below; "" everything).
func domainWithin(inner, outer string) bool {
	inner, outer = strings.ToLower(inner), strings.ToLower(outer)
	if outer == "" {
		return true
	}
	if inner == "" {
		return false
	}
	ib, ob := strings.TrimPrefix(inner, "."), strings.TrimPrefix(outer, ".")
	if strings.HasSuffix(ib, "."+ob) {
		return true
	}
	if ib != ob {
		return false
	}
	return !strings.HasPrefix(outer, ".") || strings.HasPrefix(inner, ".")
}

// emailWithin is domainWithin for email constraints (a mailbox, a host,
// or ".domain"), as Go's verifier reads them.
func emailWithin(inner, outer string) bool {
	if strings.Contains(outer, "@") {
		return strings.EqualFold(inner, outer)
	}
	if _, host, found := strings.Cut(inner, "@"); found {
		inner = host
	}
	return domainWithin(inner, outer)
}
