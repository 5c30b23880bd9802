package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CertificateRevocation pulls certificates back everywhere they are
// served: every downstream certificate it selects is renewed first, then
// its old serial is revoked — listed in the CA issuer's CRL that the hub
// keeps, or revoked at the ACME CA (RFC 8555 revokeCert). It lives in the
// hub; nothing downstream can create or widen one. Reference:
// docs/revocation.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=certrevoke,categories=certhub
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revoked",type=integer,JSONPath=`.status.revoked`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CertificateRevocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CertificateRevocationSpec `json:"spec"`
	// +optional
	Status CertificateRevocationStatus `json:"status,omitempty"`
}

// RevocationReason is an RFC 5280 CRLReason, by name.
// +kubebuilder:validation:Enum=unspecified;keyCompromise;cACompromise;affiliationChanged;superseded;cessationOfOperation
type RevocationReason string

// The RFC 5280 reasons a revocation may give.
const (
	RevocationUnspecified          RevocationReason = "unspecified"
	RevocationKeyCompromise        RevocationReason = "keyCompromise"
	RevocationCACompromise         RevocationReason = "cACompromise"
	RevocationAffiliationChanged   RevocationReason = "affiliationChanged"
	RevocationSuperseded           RevocationReason = "superseded"
	RevocationCessationOfOperation RevocationReason = "cessationOfOperation"
)

// CertificateRevocationSpec selects certificates by where they are, who
// issued them, their serial or when; every set part must match, and at
// least one must be set.
// +kubebuilder:validation:XValidation:rule="has(self.clusters) || has(self.namespace) || has(self.certificate) || has(self.issuerName) || has(self.serials) || has(self.issuedBefore)",message="select something: clusters, namespace, certificate, issuerName, serials or issuedBefore"
type CertificateRevocationSpec struct {
	// Clusters are downstream cluster names, with `*` wildcards; empty:
	// every cluster.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// Namespace and Certificate pick the downstream Certificate by its
	// namespace and name (`*` wildcards); empty: any.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Certificate string `json:"certificate,omitempty"`
	// IssuerName is the hub ClusterIssuer the Certificate names.
	// +optional
	IssuerName string `json:"issuerName,omitempty"`
	// Serials are certificate serial numbers, hexadecimal (colons and case
	// ignored).
	// +optional
	Serials []string `json:"serials,omitempty"`
	// IssuedBefore selects certificates whose notBefore is before it.
	// +optional
	IssuedBefore *metav1.Time `json:"issuedBefore,omitempty"`
	// Reason is the RFC 5280 reason recorded in the CRL or sent to the ACME
	// CA. Default superseded.
	// +optional
	Reason RevocationReason `json:"reason,omitempty"`
}

// RevocationPhase is where a CertificateRevocation is.
type RevocationPhase string

// The phases of a CertificateRevocation.
const (
	// RevocationInProgress: selected certificates are being renewed, or
	// their old serials revoked, or clusters not looked at yet.
	RevocationInProgress RevocationPhase = "InProgress"
	// RevocationComplete: every selected certificate seen in every selected
	// cluster is renewed and its old serial revoked.
	RevocationComplete RevocationPhase = "Complete"
)

// CertificateRevocationStatus is the progress, per cluster and per
// certificate.
type CertificateRevocationStatus struct {
	// +optional
	Phase RevocationPhase `json:"phase,omitempty"`
	// Revoked and Pending count the certificates revoked and still to
	// revoke (renewing, or waiting for the CA).
	// +optional
	Revoked int `json:"revoked,omitempty"`
	// +optional
	Pending int `json:"pending,omitempty"`
	// Clusters is the progress in each selected cluster, by name.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Clusters []RevocationClusterStatus `json:"clusters,omitempty"`
	// Certificates are the certificates selected so far, one per serial.
	// +optional
	// +listType=map
	// +listMapKey=serial
	Certificates []RevokedCertificate `json:"certificates,omitempty"`
}

// RevocationClusterStatus is a revocation's progress in one cluster.
type RevocationClusterStatus struct {
	Cluster string `json:"cluster"`
	// Selected, Revoked: the cluster's certificates selected, and revoked.
	Selected int `json:"selected"`
	Revoked  int `json:"revoked"`
	// LastSeen is when the replica that owns the cluster last looked.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// Message says what holds it, if anything.
	// +optional
	Message string `json:"message,omitempty"`
}

// RevokedCertificateState is where one selected certificate is.
type RevokedCertificateState string

// The states of a selected certificate.
const (
	// RevocationRenewing: the Certificate is being issued a new certificate.
	RevocationRenewing RevokedCertificateState = "Renewing"
	// RevocationRevoked: the old serial is revoked (in the CRL, or at the CA).
	RevocationRevoked RevokedCertificateState = "Revoked"
	// RevocationFailed: the CA refused the revocation (Message says why);
	// tried again.
	RevocationFailed RevokedCertificateState = "Failed"
)

// RevokedCertificate is one selected certificate.
type RevokedCertificate struct {
	// Serial is the certificate's serial, upper-case hexadecimal.
	Serial    string `json:"serial"`
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	// Certificate is the downstream Certificate's name.
	Certificate string `json:"certificate"`
	IssuerName  string `json:"issuerName"`
	// IssuerKind is the kind of issuer that revokes it: CA or ACME.
	IssuerKind string                  `json:"issuerKind"`
	State      RevokedCertificateState `json:"state"`
	// RevokedAt is when the serial was revoked.
	// +optional
	RevokedAt *metav1.Time `json:"revokedAt,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// CertificatePEM is the selected certificate of an ACME issuer, kept
	// until the CA has revoked it (RFC 8555 revokeCert sends the
	// certificate itself, and the renewal replaces it downstream).
	// +optional
	CertificatePEM string `json:"certificatePEM,omitempty"`
}

// +kubebuilder:object:root=true

// CertificateRevocationList is a list of CertificateRevocations.
type CertificateRevocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CertificateRevocation `json:"items"`
}
