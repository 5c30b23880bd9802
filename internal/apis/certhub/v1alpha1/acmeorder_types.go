package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// States of an ACMEOrder, in the order they are passed.
const (
	// ACMEOrderOrdering: a replica claimed the order and asks the CA for it.
	ACMEOrderOrdering = "Ordering"
	// ACMEOrderPresenting: the CA's authorizations are known; TXT records are being written.
	ACMEOrderPresenting = "Presenting"
	// ACMEOrderPropagating: the TXT records are written; waiting until the
	// zone's nameservers serve them.
	ACMEOrderPropagating = "Propagating"
	// ACMEOrderValidating: the challenges are accepted; the CA validates.
	ACMEOrderValidating = "Validating"
	// ACMEOrderFinalizing: every authorization is valid; the CSR is
	// submitted and the certificate fetched.
	ACMEOrderFinalizing = "Finalizing"
	// ACMEOrderValid: status.certificate holds the issued chain.
	ACMEOrderValid = "Valid"
	// ACMEOrderErrored: the order failed; status.reason and message say why.
	ACMEOrderErrored = "Errored"
)

// ACMEOrder is one ACME order for one issuance of one downstream Certificate,
// kept in the hub so any replica can resume it. Its leaf key is in the Secret
// of the same name; DNS credentials never leave the hub. Written and read only
// by certhub; `kubectl get acmeorders -n certhub` shows each order's progress.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=hubord,categories=certhub
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.spec.issuerName`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Certificate",type=string,JSONPath=`.spec.certificate`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ACMEOrder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ACMEOrderSpec   `json:"spec"`
	Status ACMEOrderStatus `json:"status,omitempty"`
}

// ACMEOrderSpec is what is ordered, for which Certificate. It is immutable.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ACMEOrderSpec struct {
	// IssuerName is the ACME ClusterIssuer.
	IssuerName string `json:"issuerName"`
	// Cluster is the downstream cluster of the Certificate.
	Cluster string `json:"cluster"`
	// Namespace is the downstream Certificate's namespace.
	Namespace string `json:"namespace"`
	// Certificate is the downstream Certificate's name.
	Certificate string `json:"certificate"`
	// DNSNames are the order's DNS identifiers.
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`
	// IPAddresses are the order's IP identifiers.
	// +optional
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// Request is the DER certificate signing request; its key is in the
	// Secret of the same name in this namespace, unless KeyInCluster. (No format: byte in the
	// schema: the API server's CEL check of spec's immutability refuses
	// such a field on status updates.)
	// +kubebuilder:validation:Format=""
	Request []byte `json:"request"`
	// KeyInCluster is true when the request is a downstream
	// CertificateRequest's CSR: its key never left the cluster, and the
	// order has no key Secret.
	// +optional
	KeyInCluster bool `json:"keyInCluster,omitempty"`
	// Continues is the URL of the CA order this ACMEOrder continues: the
	// order of an ACMEOrder of the same issuance that was deleted while it
	// ran. The hub reads its authorizations back from the CA instead of
	// ordering again (one CA order per issuance).
	// +optional
	Continues string `json:"continues,omitempty"`
	// Attempt counts the failed orders of this issuance before this one.
	// +optional
	Attempt int `json:"attempt,omitempty"`
	// Replaces is the ARI identifier (RFC 9773) of the certificate this
	// order renews, sent to the CA as the order's "replaces": Let's Encrypt
	// exempts such renewals from its rate limits. Only a renewal's first
	// attempt carries it.
	// +optional
	Replaces string `json:"replaces,omitempty"`
	// Shared is true when identical requests of several Certificates share
	// this order (certhub.io/share-identical-requests); cluster, namespace
	// and certificate then name the one that created it.
	// +optional
	Shared bool `json:"shared,omitempty"`
	// SolverLabels are the Certificate's labels when the order was created:
	// each name's solver is chosen with them, as when the order was checked
	// (cert-manager's selector.matchLabels).
	// +optional
	SolverLabels map[string]string `json:"solverLabels,omitempty"`
}

// ACMEOrderStatus is the order's progress.
type ACMEOrderStatus struct {
	// State is where the order is; empty until a replica claims it.
	// +kubebuilder:validation:Enum="";Ordering;Presenting;Propagating;Validating;Finalizing;Valid;Errored
	// +optional
	State string `json:"state,omitempty"`
	// Holder is the replica driving the order.
	// +optional
	Holder string `json:"holder,omitempty"`
	// HeldUntil is when another replica may take the order over (the
	// holder renews it on every step).
	// +optional
	HeldUntil *metav1.Time `json:"heldUntil,omitempty"`
	// URL is the CA's order.
	// +optional
	URL string `json:"url,omitempty"`
	// FinalizeURL is the CA's finalize URL of the order.
	// +optional
	FinalizeURL string `json:"finalizeURL,omitempty"`
	// CertificateURL is the CA's URL of the issued certificate.
	// +optional
	CertificateURL string `json:"certificateURL,omitempty"`
	// Challenges are the DNS-01 challenges of the order's authorizations.
	// +optional
	Challenges []ACMEChallenge `json:"challenges,omitempty"`
	// PresentedAt is when the last TXT record was written.
	// +optional
	PresentedAt *metav1.Time `json:"presentedAt,omitempty"`
	// Certificate is the issued chain (PEM), when Valid.
	// +kubebuilder:validation:Format=""
	// +optional
	Certificate []byte `json:"certificate,omitempty"`
	// Reason says why the order failed, when Errored.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why the order failed, when Errored.
	// +optional
	Message string `json:"message,omitempty"`
	// FinishedAt is when the order became Valid or Errored.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// ReplacesRefused is true when the CA refused the order with
	// spec.replaces (e.g. that certificate was replaced already); it was
	// then ordered without.
	// +optional
	ReplacesRefused bool `json:"replacesRefused,omitempty"`
}

// ACMEChallenge is one authorization's DNS-01 challenge.
type ACMEChallenge struct {
	// AuthorizationURL is the CA's authorization.
	AuthorizationURL string `json:"authorizationURL"`
	// URL is the CA's challenge.
	// +optional
	URL string `json:"url,omitempty"`
	// Identifier is the DNS name authorized (without "*.").
	Identifier string `json:"identifier"`
	// Wildcard is true when the authorization is for "*." + identifier.
	// +optional
	Wildcard bool `json:"wildcard,omitempty"`
	// Token is the challenge token.
	// +optional
	Token string `json:"token,omitempty"`
	// Key is the TXT record's value.
	// +optional
	Key string `json:"key,omitempty"`
	// FQDN is the TXT record's name.
	// +optional
	FQDN string `json:"fqdn,omitempty"`
	// Zone is the zone the record is written to.
	// +optional
	Zone string `json:"zone,omitempty"`
	// Solver is the index of the solver in the ClusterIssuer's spec.acme.solvers.
	Solver int `json:"solver"`
	// Presented is true while the TXT record is written (until cleaned up).
	// +optional
	Presented bool `json:"presented,omitempty"`
	// Valid is true when the CA already holds a valid authorization.
	// +optional
	Valid bool `json:"valid,omitempty"`
}

// ACMEOrderList is a list of ACMEOrders.
//
// +kubebuilder:object:root=true
type ACMEOrderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ACMEOrder `json:"items"`
}
