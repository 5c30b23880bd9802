package v1alpha1

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IssuancePolicy says which downstream Certificates the hub may issue, and
// with what. It lives in the hub (made for Git); no downstream admin can
// change it. Reference: docs/policy.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=issuancepol,categories=certhub
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IssuancePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IssuancePolicySpec `json:"spec"`
}

// IssuancePolicySpec says which Certificates this policy speaks for
// (selector) and what they may get (allowed, constraints). A Certificate is
// issued when at least one policy that selects it allows every field it asks
// for. The vocabulary is approver-policy's CertificateRequestPolicy where it
// can be.
type IssuancePolicySpec struct {
	// Selector picks the Certificates this policy speaks for. Every set part
	// must match; an empty selector selects every Certificate.
	Selector PolicySelector `json:"selector"`
	// Allowed lists what a selected Certificate may ask for; a field not
	// listed is not allowed.
	// +optional
	Allowed PolicyAllowed `json:"allowed,omitempty"`
	// Constraints bound the duration and the private key.
	// +optional
	Constraints PolicyConstraints `json:"constraints,omitempty"`
}

// PolicySelector picks Certificates by where they are and which issuer they
// name. Every set part must match; an unset part matches everything.
type PolicySelector struct {
	// Clusters picks downstream clusters by name and by the labels of their
	// Argo CD cluster Secret in the hub (not downstream).
	// +optional
	Clusters *ClusterSelector `json:"clusters,omitempty"`
	// Namespaces picks downstream namespaces by name (labels are set
	// downstream and are not selectable).
	// +optional
	Namespaces *NamespaceSelector `json:"namespaces,omitempty"`
	// IssuerRef picks the Certificate's spec.issuerRef.
	// +optional
	IssuerRef *IssuerRefSelector `json:"issuerRef,omitempty"`
}

// ClusterSelector matches a cluster by name glob and/or Secret labels.
type ClusterSelector struct {
	// MatchNames are cluster names, with `*` wildcards; empty matches any name.
	// +optional
	MatchNames []string `json:"matchNames,omitempty"`
	// MatchLabels and MatchExpressions form a label selector over the
	// cluster Secret's labels.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// +optional
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// NamespaceSelector matches downstream namespaces by name. Namespace labels
// are deliberately not selectable: downstream admins set them.
type NamespaceSelector struct {
	// MatchNames are namespace names with `*` wildcards.
	// +optional
	MatchNames []string `json:"matchNames,omitempty"`
}

// IssuerRefSelector matches spec.issuerRef; each field is a `*` glob, empty
// matches anything. Kind "Issuer" selects every namespaced Issuer.
type IssuerRefSelector struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Group string `json:"group,omitempty"`
}

// PolicyAllowed lists what a selected Certificate may ask for. Values are
// patterns: `*` matches any run of characters; {{cluster}} and {{namespace}}
// are the Certificate's cluster and namespace.
type PolicyAllowed struct {
	// CommonName allows spec.commonName (and a CN in spec.literalSubject).
	// +optional
	CommonName *StringValue `json:"commonName,omitempty"`
	// DNSNames allows spec.dnsNames.
	// +optional
	DNSNames *StringValues `json:"dnsNames,omitempty"`
	// IPAddresses allows spec.ipAddresses: values are CIDRs or single addresses.
	// +optional
	IPAddresses *StringValues `json:"ipAddresses,omitempty"`
	// URIs allows spec.uris (e.g. SPIFFE IDs).
	// +optional
	URIs *StringValues `json:"uris,omitempty"`
	// EmailAddresses allows spec.emailAddresses.
	// +optional
	EmailAddresses *StringValues `json:"emailAddresses,omitempty"`
	// OtherNames allows spec.otherNames, as patterns over "<oid>=<utf8Value>".
	// +optional
	OtherNames *StringValues `json:"otherNames,omitempty"`
	// Subject allows subject fields, from spec.subject or spec.literalSubject.
	// +optional
	Subject *SubjectAllowed `json:"subject,omitempty"`
	// IsCA allows isCA: true. Defaults to false (sub-CAs forbidden).
	// +optional
	IsCA bool `json:"isCA,omitempty"`
	// MaxPathLen is the path-length constraint a CA certificate allowed by
	// this policy is signed with. Defaults to 0 (it can sign leaves only).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxPathLen *int `json:"maxPathLen,omitempty"`
	// Usages a Certificate may list in spec.usages. A Certificate that lists
	// none gets cert-manager's defaults, which are always allowed.
	// +optional
	Usages []cmapi.KeyUsage `json:"usages,omitempty"`
	// OtherExtendedKeyUsages allows extended key usages cert-manager has no
	// name for, which only a CSR can ask for (a downstream
	// CertificateRequest): values are dotted OIDs, or patterns over them
	// (e.g. "1.3.6.1.4.1.311.20.2.2" for smart-card logon). Without a policy
	// that lists one, it is denied, under --default-policy=allow too.
	// +optional
	OtherExtendedKeyUsages *StringValues `json:"otherExtendedKeyUsages,omitempty"`
}

// StringValue allows one value matching Value (a pattern).
type StringValue struct {
	// Value is a pattern: `*` matches any run of characters; {{cluster}} and
	// {{namespace}} are the Certificate's cluster and namespace.
	// +optional
	Value string `json:"value,omitempty"`
	// Required: the Certificate must set this field.
	// +optional
	Required bool `json:"required,omitempty"`
}

// StringValues allows values each matching one of Values (patterns).
type StringValues struct {
	// Values are patterns: `*` matches any run of characters; {{cluster}}
	// and {{namespace}} are the Certificate's cluster and namespace.
	// +optional
	Values []string `json:"values,omitempty"`
	// Required: the Certificate must set at least one value of this field.
	// +optional
	Required bool `json:"required,omitempty"`
}

// SubjectAllowed lists the subject fields a Certificate may set, from
// spec.subject or spec.literalSubject alike.
type SubjectAllowed struct {
	// +optional
	Organizations *StringValues `json:"organizations,omitempty"`
	// +optional
	Countries *StringValues `json:"countries,omitempty"`
	// +optional
	OrganizationalUnits *StringValues `json:"organizationalUnits,omitempty"`
	// +optional
	Localities *StringValues `json:"localities,omitempty"`
	// +optional
	Provinces *StringValues `json:"provinces,omitempty"`
	// +optional
	StreetAddresses *StringValues `json:"streetAddresses,omitempty"`
	// +optional
	PostalCodes *StringValues `json:"postalCodes,omitempty"`
	// +optional
	SerialNumber *StringValue `json:"serialNumber,omitempty"`
	// DomainComponents allows DC attributes (0.9.2342.19200300.100.1.25),
	// which only spec.literalSubject can carry.
	// +optional
	DomainComponents *StringValues `json:"domainComponents,omitempty"`
	// UserIDs allows UID attributes (0.9.2342.19200300.100.1.1), which only
	// spec.literalSubject can carry.
	// +optional
	UserIDs *StringValues `json:"userIDs,omitempty"`
	// OtherAttributes allows any other attribute type of spec.literalSubject
	// (one cert-manager accepts as a dotted OID, e.g. "1.2.840.113549.1.9.1=x"),
	// as patterns over "<oid>=<value>", like otherNames.
	// +optional
	OtherAttributes *StringValues `json:"otherAttributes,omitempty"`
}

// PolicyConstraints bound what may be asked for.
type PolicyConstraints struct {
	// MinDuration is the shortest duration allowed (a Go duration, e.g.
	// 720h): the Certificate's duration, or cert-manager's default of 2160h
	// when unset.
	// +optional
	MinDuration *metav1.Duration `json:"minDuration,omitempty"`
	// MaxDuration is the longest duration allowed, measured likewise.
	// +optional
	MaxDuration *metav1.Duration `json:"maxDuration,omitempty"`
	// PrivateKey bounds the key (cert-manager's defaults when the
	// Certificate sets none: RSA 2048).
	// +optional
	PrivateKey *PrivateKeyConstraints `json:"privateKey,omitempty"`
}

// PrivateKeyConstraints bound the key algorithm and size (RSA bits, ECDSA
// curve bits; Ed25519 has no size).
type PrivateKeyConstraints struct {
	// Algorithm, when set, is the only algorithm allowed.
	// +optional
	Algorithm cmapi.PrivateKeyAlgorithm `json:"algorithm,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinSize int `json:"minSize,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxSize int `json:"maxSize,omitempty"`
}

// IssuancePolicyList is a list of IssuancePolicies.
//
// +kubebuilder:object:root=true
type IssuancePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IssuancePolicy `json:"items"`
}
