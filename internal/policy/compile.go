package policy

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Mode decides Certificates that no policy selects.
type Mode string

// Modes for Set.Default (the --default-policy flag).
const (
	// Allow issues Certificates no policy selects (certhub before policies).
	Allow Mode = "allow"
	// Deny refuses them: only what a policy allows is issued.
	Deny Mode = "deny"
)

// ParseMode parses a --default-policy value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Allow, Deny:
		return m, nil
	}
	return "", fmt.Errorf("default policy must be %q or %q, not %q", Allow, Deny, s)
}

// Set is a compiled, immutable set of policies and the default for
// Certificates none selects. The zero Set allows everything.
type Set struct {
	policies []compiled // sorted by name
	def      Mode
}

// Len is the number of policies in the set.
func (s *Set) Len() int { return len(s.policies) }

// Compile compiles policies. A policy that does not compile is kept: it
// selects every Certificate and allows nothing, and its error is returned
// (joined) so callers can report it. The Set is always usable.
func Compile(policies []hubapi.IssuancePolicy, def Mode) (*Set, error) {
	s := compileAll(policies, def)
	var errs []error
	for _, c := range s.policies {
		if c.invalid != nil {
			errs = append(errs, fmt.Errorf("IssuancePolicy %q: %w", c.name, c.invalid))
		}
	}
	return s, errors.Join(errs...)
}

// compileAll compiles policies; an invalid one is kept, allowing nothing.
func compileAll(policies []hubapi.IssuancePolicy, def Mode) *Set {
	s := &Set{def: def, policies: make([]compiled, 0, len(policies))}
	for i := range policies {
		c, _ := compile(&policies[i])
		s.policies = append(s.policies, c)
	}
	slices.SortFunc(s.policies, func(a, b compiled) int { return strings.Compare(a.name, b.name) })
	return s
}

// invalid returns why the named policy is invalid, or nil.
func (s *Set) invalid(name string) error {
	for _, c := range s.policies {
		if c.name == name {
			return c.invalid
		}
	}
	return nil
}

// compiled is one policy ready to evaluate.
type compiled struct {
	name    string
	invalid error // non-nil: selects everything, allows nothing

	clusterNames  []pattern
	clusterLabels labels.Selector // nil: any labels
	namespaces    []pattern
	issuer        *[3]pattern // name, kind, group

	cn                           *valuePattern
	dns, uris, emails, otherName *valuesPattern
	ips                          *cidrs
	subject                      map[subjectField]*valuesPattern
	serial                       *valuePattern
	isCA                         bool
	maxPathLen                   int
	usages                       map[cmapi.KeyUsage]bool
	ku                           x509.KeyUsage // usages as x509 bits, defaults included
	eku                          []x509.ExtKeyUsage
	otherEKU                     *valuesPattern // extended key usages cert-manager has no name for, by OID
	minDuration, maxDuration     time.Duration
	key                          *hubapi.PrivateKeyConstraints
}

func compile(p *hubapi.IssuancePolicy) (compiled, error) {
	c := compiled{name: p.Name}
	if err := c.compile(&p.Spec); err != nil {
		return compiled{name: p.Name, invalid: err}, err
	}
	return c, nil
}

func (c *compiled) compile(s *hubapi.IssuancePolicySpec) error {
	if cs := s.Selector.Clusters; cs != nil {
		c.clusterNames = patterns(cs.MatchNames)
		if len(cs.MatchLabels) > 0 || len(cs.MatchExpressions) > 0 {
			sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: cs.MatchLabels, MatchExpressions: cs.MatchExpressions})
			if err != nil {
				return fmt.Errorf("spec.selector.clusters: %w", err)
			}
			c.clusterLabels = sel
		}
	}
	if ns := s.Selector.Namespaces; ns != nil {
		c.namespaces = patterns(ns.MatchNames)
	}
	if ir := s.Selector.IssuerRef; ir != nil {
		c.issuer = &[3]pattern{compilePattern(ir.Name), compilePattern(ir.Kind), compilePattern(ir.Group)}
	}

	a := &s.Allowed
	if a.CommonName != nil {
		c.cn = &valuePattern{p: compilePattern(a.CommonName.Value), set: a.CommonName.Value != "", required: a.CommonName.Required}
	}
	c.dns, c.uris, c.emails, c.otherName = values(a.DNSNames), values(a.URIs), values(a.EmailAddresses), values(a.OtherNames)
	c.otherEKU = values(a.OtherExtendedKeyUsages)
	if a.IPAddresses != nil {
		ips := &cidrs{required: a.IPAddresses.Required}
		for _, v := range a.IPAddresses.Values {
			pfx, err := parseCIDR(v)
			if err != nil {
				return fmt.Errorf("spec.allowed.ipAddresses: %w", err)
			}
			ips.prefixes = append(ips.prefixes, pfx)
		}
		c.ips = ips
	}
	if sub := a.Subject; sub != nil {
		c.subject = map[subjectField]*valuesPattern{}
		for f, v := range map[subjectField]*hubapi.StringValues{
			fieldOrganizations: sub.Organizations, fieldCountries: sub.Countries, fieldOrganizationalUnits: sub.OrganizationalUnits,
			fieldLocalities: sub.Localities, fieldProvinces: sub.Provinces, fieldStreetAddresses: sub.StreetAddresses, fieldPostalCodes: sub.PostalCodes,
			fieldDomainComponents: sub.DomainComponents, fieldUserIDs: sub.UserIDs, fieldOtherAttributes: sub.OtherAttributes,
		} {
			if v != nil {
				c.subject[f] = values(v)
			}
		}
		if sub.SerialNumber != nil {
			c.serial = &valuePattern{p: compilePattern(sub.SerialNumber.Value), set: sub.SerialNumber.Value != "", required: sub.SerialNumber.Required}
		}
	}
	c.isCA = a.IsCA
	if a.MaxPathLen != nil {
		if *a.MaxPathLen < 0 {
			return errors.New("spec.allowed.maxPathLen must not be negative")
		}
		c.maxPathLen = *a.MaxPathLen
	}
	if len(a.Usages) > 0 {
		c.usages = map[cmapi.KeyUsage]bool{}
		for _, u := range a.Usages {
			c.usages[u] = true
		}
	}

	c.compileUsages()

	k := &s.Constraints
	if k.MinDuration != nil {
		c.minDuration = k.MinDuration.Duration
	}
	if k.MaxDuration != nil {
		c.maxDuration = k.MaxDuration.Duration
	}
	if c.maxDuration != 0 && c.minDuration > c.maxDuration {
		return errors.New("spec.constraints.minDuration is longer than maxDuration")
	}
	if pk := k.PrivateKey; pk != nil {
		switch pk.Algorithm {
		case "", cmapi.RSAKeyAlgorithm, cmapi.ECDSAKeyAlgorithm, cmapi.Ed25519KeyAlgorithm:
		default:
			return fmt.Errorf("spec.constraints.privateKey.algorithm %q is not RSA, ECDSA or Ed25519", pk.Algorithm)
		}
		if pk.MaxSize != 0 && pk.MinSize > pk.MaxSize {
			return errors.New("spec.constraints.privateKey.minSize is larger than maxSize")
		}
		c.key = pk
	}
	return nil
}

func values(v *hubapi.StringValues) *valuesPattern {
	if v == nil {
		return nil
	}
	return &valuesPattern{ps: patterns(v.Values), required: v.Required}
}

func patterns(ss []string) []pattern {
	out := make([]pattern, 0, len(ss))
	for _, s := range ss {
		out = append(out, compilePattern(s))
	}
	return out
}

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR: %w", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR nor an IP address: %w", s, err)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// valuePattern allows one value.
type valuePattern struct {
	p        pattern
	set      bool // an empty Value allows nothing
	required bool
}

// valuesPattern allows values matching any of ps.
type valuesPattern struct {
	ps       []pattern
	required bool
}

// cidrs allows addresses inside any prefix.
type cidrs struct {
	prefixes []netip.Prefix
	required bool
}

// pattern is a glob: `*` matches any run of characters (approver-policy's
// wildcard), hubapi.VarCluster and hubapi.VarNamespace are replaced by the literal names.
// Matching allocates nothing: variables are compared in place.
type pattern struct {
	raw  string
	segs [][]piece // the pattern split at each `*`
}

// piece is a literal, or a variable (v != 0) matched literally.
type piece struct {
	lit string
	v   byte // 0: lit; 'c': cluster; 'n': namespace
}

func compilePattern(s string) pattern {
	p := pattern{raw: s}
	for _, seg := range strings.Split(s, "*") {
		var ps []piece
		for seg != "" {
			i := strings.Index(seg, "{{")
			var v byte
			switch {
			case i < 0:
				i = len(seg)
			case strings.HasPrefix(seg[i:], hubapi.VarCluster):
				v = 'c'
			case strings.HasPrefix(seg[i:], hubapi.VarNamespace):
				v = 'n'
			default:
				i += 2 // a literal "{{"
			}
			if i > 0 {
				ps = append(ps, piece{lit: seg[:i]})
			}
			seg = seg[i:]
			switch v {
			case 'c':
				ps, seg = append(ps, piece{v: v}), seg[len(hubapi.VarCluster):]
			case 'n':
				ps, seg = append(ps, piece{v: v}), seg[len(hubapi.VarNamespace):]
			}
		}
		p.segs = append(p.segs, ps)
	}
	return p
}

// vars are the values of the pattern variables for one Certificate.
// clusterUnsafe, namespaceUnsafe: the name is not a DNS label (a dot, a
// wildcard, an upper-case letter: "mycluster.example.com", "Prod-EU", a
// registration named after its server URL), so its variable matches
// nothing (UnsafeClusterName).
type vars struct {
	cluster, namespace             string
	clusterUnsafe, namespaceUnsafe bool
}

func newVars(cluster, namespace string) vars {
	return vars{cluster: cluster, namespace: namespace, clusterUnsafe: hubapi.UnsafeClusterName(cluster) != "", namespaceUnsafe: hubapi.UnsafeLabel(namespace) != ""}
}

// unsafe reports whether pc is a variable whose value may not be matched.
func (x vars) unsafe(pc piece) bool {
	return pc.v == 'c' && x.clusterUnsafe || pc.v == 'n' && x.namespaceUnsafe
}

func (x vars) value(pc piece) string {
	switch pc.v {
	case 'c':
		return x.cluster
	case 'n':
		return x.namespace
	}
	return pc.lit
}

// segLen is the length of seg with variables resolved.
func (x vars) segLen(seg []piece) int {
	n := 0
	for _, pc := range seg {
		n += len(x.value(pc))
	}
	return n
}

// segAt reports whether seg matches v at position at.
func (x vars) segAt(seg []piece, v string, at int) bool {
	for _, pc := range seg {
		if x.unsafe(pc) {
			return false
		}
		s := x.value(pc)
		if !strings.HasPrefix(v[at:], s) {
			return false
		}
		at += len(s)
	}
	return true
}

// index is the first position >= from where seg (of length n) matches v, or -1.
func (x vars) index(seg []piece, v string, from, n int) int {
	for at := from; at+n <= len(v); at++ {
		if x.segAt(seg, v, at) {
			return at
		}
	}
	return -1
}

func (p *pattern) match(v string, x vars) bool {
	segs := p.segs
	first, last := segs[0], segs[len(segs)-1]
	if len(segs) == 1 {
		return x.segLen(first) == len(v) && x.segAt(first, v, 0)
	}
	lf, ll := x.segLen(first), x.segLen(last)
	if len(v) < lf+ll || !x.segAt(first, v, 0) || !x.segAt(last, v, len(v)-ll) {
		return false
	}
	pos, end := lf, len(v)-ll
	for _, mid := range segs[1 : len(segs)-1] {
		n := x.segLen(mid)
		at := x.index(mid, v[:end], pos, n)
		if at < 0 {
			return false
		}
		pos = at + n
	}
	return true
}

// anyMatch reports whether v matches one of ps (an empty ps matches all).
func anyMatch(ps []pattern, v string, x vars) bool {
	if len(ps) == 0 {
		return true
	}
	for i := range ps {
		if ps[i].match(v, x) {
			return true
		}
	}
	return false
}
