package policy

import (
	"strings"
	"unicode"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The IssuancePolicy API. The Go types mirror the CRD in
// kustomize/base/crds/certhub.io_issuancepolicies.yaml; objects are read as
// unstructured and converted, so no generated deep-copy code is needed.
var (
	// GroupVersion of IssuancePolicy.
	GroupVersion = schema.GroupVersion{Group: "certhub.io", Version: "v1alpha1"}
	// GVK of IssuancePolicy.
	GVK = GroupVersion.WithKind("IssuancePolicy")
	// ListGVK of IssuancePolicyList.
	ListGVK = GroupVersion.WithKind("IssuancePolicyList")
)

// Variables substituted in every allowed pattern. They never add wildcards:
// a cluster or namespace name is matched literally.
const (
	VarCluster   = "{{cluster}}"
	VarNamespace = "{{namespace}}"
)

// UnsafeClusterName says why a cluster name cannot stand for VarCluster in
// a DNS pattern such as "*.{{cluster}}.example.com" ("" when it can): a dot
// would nest its names inside another cluster's ("x.east" under "east"), a
// "*" would make a wildcard over every cluster, and an upper-case letter or
// a space would name another cluster's hosts (DNS is case-insensitive). The
// inventory refuses registrations so named; Evaluate matches such a name
// (a registration named after its server URL) against no VarCluster pattern.
func UnsafeClusterName(name string) string {
	if strings.ContainsFunc(name, func(r rune) bool { return r == '.' || r == '*' || r >= 'A' && r <= 'Z' || unicode.IsSpace(r) }) {
		return "must not contain dots, wildcards, upper-case letters or spaces"
	}
	return ""
}

// IssuancePolicy says which Certificates (selector) may get what (allowed,
// constraints).
type IssuancePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
}

// Spec is an IssuancePolicy's spec. The vocabulary is approver-policy's
// CertificateRequestPolicy where it can be.
type Spec struct {
	// Selector picks the Certificates this policy speaks for. Required; an
	// empty selector selects every Certificate.
	Selector Selector `json:"selector"`
	// Allowed lists what a selected Certificate may ask for. A field not
	// listed is not allowed.
	Allowed Allowed `json:"allowed,omitempty"`
	// Constraints bound the duration and the private key.
	Constraints Constraints `json:"constraints,omitempty"`
}

// Selector picks Certificates by where they are and which issuer they name.
// Every set part must match; an unset part matches everything.
type Selector struct {
	// Clusters picks downstream clusters by name and by the labels of their
	// Argo CD cluster Secret (set in the hub, not downstream).
	Clusters *ClusterSelector `json:"clusters,omitempty"`
	// Namespaces picks downstream namespaces by name.
	Namespaces *NamespaceSelector `json:"namespaces,omitempty"`
	// IssuerRef picks the issuer a Certificate names.
	IssuerRef *IssuerRefSelector `json:"issuerRef,omitempty"`
}

// ClusterSelector matches a cluster by name glob and/or Secret labels.
type ClusterSelector struct {
	// MatchNames are cluster names, with `*` wildcards; empty matches any name.
	MatchNames []string `json:"matchNames,omitempty"`
	// MatchLabels and MatchExpressions form a label selector over the
	// cluster Secret's labels.
	MatchLabels      map[string]string                 `json:"matchLabels,omitempty"`
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// NamespaceSelector matches downstream namespaces by name. Namespace labels
// are deliberately not selectable: downstream admins set them.
type NamespaceSelector struct {
	// MatchNames are namespace names with `*` wildcards.
	MatchNames []string `json:"matchNames,omitempty"`
}

// IssuerRefSelector matches spec.issuerRef; each field is a `*` glob, empty
// matches anything. Kind "Issuer" selects every namespaced Issuer.
type IssuerRefSelector struct {
	Name  string `json:"name,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// Allowed lists what a selected Certificate may ask for.
type Allowed struct {
	CommonName *StringValue  `json:"commonName,omitempty"`
	DNSNames   *StringValues `json:"dnsNames,omitempty"`
	// IPAddresses values are CIDRs or single addresses.
	IPAddresses    *StringValues `json:"ipAddresses,omitempty"`
	URIs           *StringValues `json:"uris,omitempty"`
	EmailAddresses *StringValues `json:"emailAddresses,omitempty"`
	// OtherNames values are patterns over "<oid>=<utf8Value>".
	OtherNames *StringValues   `json:"otherNames,omitempty"`
	Subject    *SubjectAllowed `json:"subject,omitempty"`
	// IsCA allows isCA: true. Defaults to false (sub-CAs forbidden).
	IsCA bool `json:"isCA,omitempty"`
	// MaxPathLen is the path-length constraint a CA certificate allowed by
	// this policy is signed with. Defaults to 0 (it can sign leaves only).
	MaxPathLen *int `json:"maxPathLen,omitempty"`
	// Usages a Certificate may list in spec.usages. A Certificate that lists
	// none gets cert-manager's defaults, which are always allowed.
	Usages []cmapi.KeyUsage `json:"usages,omitempty"`
}

// StringValue allows one value matching Value (a pattern).
type StringValue struct {
	Value string `json:"value,omitempty"`
	// Required: the Certificate must set this field.
	Required bool `json:"required,omitempty"`
}

// StringValues allows values each matching one of Values (patterns).
type StringValues struct {
	Values []string `json:"values,omitempty"`
	// Required: the Certificate must set at least one value of this field.
	Required bool `json:"required,omitempty"`
}

// SubjectAllowed lists the subject fields a Certificate may set, from
// spec.subject or spec.literalSubject alike.
type SubjectAllowed struct {
	Organizations       *StringValues `json:"organizations,omitempty"`
	Countries           *StringValues `json:"countries,omitempty"`
	OrganizationalUnits *StringValues `json:"organizationalUnits,omitempty"`
	Localities          *StringValues `json:"localities,omitempty"`
	Provinces           *StringValues `json:"provinces,omitempty"`
	StreetAddresses     *StringValues `json:"streetAddresses,omitempty"`
	PostalCodes         *StringValues `json:"postalCodes,omitempty"`
	SerialNumber        *StringValue  `json:"serialNumber,omitempty"`
}

// Constraints bound what may be asked for.
type Constraints struct {
	// MinDuration and MaxDuration bound the certificate's duration (the
	// spec's, or cert-manager's default of 90 days when unset).
	MinDuration *metav1.Duration `json:"minDuration,omitempty"`
	MaxDuration *metav1.Duration `json:"maxDuration,omitempty"`
	// PrivateKey bounds the key (cert-manager's defaults when unset: RSA 2048).
	PrivateKey *PrivateKeyConstraints `json:"privateKey,omitempty"`
}

// PrivateKeyConstraints bounds the key algorithm and size (RSA bits, ECDSA
// curve bits; Ed25519 has no size).
type PrivateKeyConstraints struct {
	// Algorithm, when set, is the only algorithm allowed.
	Algorithm cmapi.PrivateKeyAlgorithm `json:"algorithm,omitempty"`
	MinSize   int                       `json:"minSize,omitempty"`
	MaxSize   int                       `json:"maxSize,omitempty"`
}
