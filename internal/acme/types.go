package acme

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ACMEOrder API (certhub.io/v1alpha1, namespaced, in the hub namespace
// only). The Go types mirror kustomize/base/crds/certhub.io_acmeorders.yaml.
// It is certhub's own group, so a cert-manager running in the hub cluster
// never picks an order up (its orders are acme.cert-manager.io).
var (
	// GroupVersion of ACMEOrder.
	GroupVersion = schema.GroupVersion{Group: "certhub.io", Version: "v1alpha1"}
	// OrderGVK is ACMEOrder's kind.
	OrderGVK = GroupVersion.WithKind("ACMEOrder")
)

// AddToScheme registers Order and OrderList as ACMEOrder and ACMEOrderList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(OrderGVK, &Order{})
	s.AddKnownTypeWithName(GroupVersion.WithKind("ACMEOrderList"), &OrderList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// States of an order, in the order they are passed.
const (
	// StateOrdering: this replica claimed the order and asks the CA for it.
	StateOrdering = "Ordering"
	// StatePresenting: the CA's authorizations are known; TXT records are being written.
	StatePresenting = "Presenting"
	// StatePropagating: the TXT records are written; waiting until the
	// zone's nameservers serve them.
	StatePropagating = "Propagating"
	// StateValidating: the challenges are accepted; the CA validates.
	StateValidating = "Validating"
	// StateFinalizing: every authorization is valid; the CSR is submitted
	// and the certificate fetched.
	StateFinalizing = "Finalizing"
	// StateValid: status.certificate holds the issued chain.
	StateValid = "Valid"
	// StateErrored: the order failed; status.reason and message say why.
	StateErrored = "Errored"
)

// Order (kind ACMEOrder) is one ACME order for one issuance of one downstream
// Certificate, driven by whichever replica holds it.
type Order struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              OrderSpec   `json:"spec"`
	Status            OrderStatus `json:"status,omitempty"`
}

// OrderSpec is what is ordered, for which Certificate. Immutable.
type OrderSpec struct {
	// IssuerName is the ACME ClusterIssuer.
	IssuerName string `json:"issuerName"`
	// Cluster, Namespace and Certificate name the downstream Certificate.
	Cluster     string `json:"cluster"`
	Namespace   string `json:"namespace"`
	Certificate string `json:"certificate"`
	// DNSNames and IPAddresses are the order's identifiers.
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// Request is the DER certificate signing request; its key is in the
	// Secret of the same name in this namespace.
	Request []byte `json:"request"`
	// Attempt counts the failed orders for this issuance before this one.
	Attempt int `json:"attempt,omitempty"`
	// Replaces is the ARI identifier (RFC 9773) of the certificate this
	// order renews, sent as the order's "replaces": Let's Encrypt exempts
	// such renewals from its rate limits. Only a renewal's first attempt
	// carries it.
	Replaces string `json:"replaces,omitempty"`
	// Shared is true when identical requests of several Certificates
	// share this order (ShareAnnotation); Cluster, Namespace and
	// Certificate then name the one that created it.
	Shared bool `json:"shared,omitempty"`
	// SolverLabels are the Certificate's labels when the order was
	// created: the solver of each name is chosen with them, as it was when
	// the order was checked (cert-manager's selector.matchLabels).
	SolverLabels map[string]string `json:"solverLabels,omitempty"`
}

// OrderStatus is the order's progress.
type OrderStatus struct {
	// State is one of the State* constants; empty until claimed.
	State string `json:"state,omitempty"`
	// Holder is the replica driving the order; HeldUntil when another may
	// take it over (the holder renews it on every step).
	Holder    string       `json:"holder,omitempty"`
	HeldUntil *metav1.Time `json:"heldUntil,omitempty"`
	// URL and FinalizeURL are the CA's order; CertificateURL its certificate.
	URL            string `json:"url,omitempty"`
	FinalizeURL    string `json:"finalizeURL,omitempty"`
	CertificateURL string `json:"certificateURL,omitempty"`
	// Challenges are the DNS-01 challenges of the order's authorizations.
	Challenges []Challenge `json:"challenges,omitempty"`
	// PresentedAt is when the last TXT record was written.
	PresentedAt *metav1.Time `json:"presentedAt,omitempty"`
	// Certificate is the issued chain (PEM), when Valid.
	Certificate []byte `json:"certificate,omitempty"`
	// Reason and Message say why the order failed, when Errored.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// FinishedAt is when the order became Valid or Errored.
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// ReplacesRefused is true when the CA refused the order with
	// spec.replaces (e.g. that certificate was replaced already); it is
	// then ordered without.
	ReplacesRefused bool `json:"replacesRefused,omitempty"`
}

// Challenge is one authorization's DNS-01 challenge.
type Challenge struct {
	// AuthorizationURL and URL are the CA's authorization and challenge.
	AuthorizationURL string `json:"authorizationURL"`
	URL              string `json:"url,omitempty"`
	// Identifier is the DNS name authorized (without "*.").
	Identifier string `json:"identifier"`
	Wildcard   bool   `json:"wildcard,omitempty"`
	// Token is the challenge token; Key the TXT record's value.
	Token string `json:"token,omitempty"`
	Key   string `json:"key,omitempty"`
	// FQDN is the record's name and Zone the zone it is written to.
	FQDN string `json:"fqdn,omitempty"`
	Zone string `json:"zone,omitempty"`
	// Solver is the index of the solver in the ClusterIssuer's spec.acme.solvers.
	Solver int `json:"solver"`
	// Presented is true while the TXT record is written (until cleaned up).
	Presented bool `json:"presented,omitempty"`
	// Valid is true when the CA already holds a valid authorization.
	Valid bool `json:"valid,omitempty"`
}

// OrderList is a list of ACMEOrders.
type OrderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Order `json:"items"`
}

// DeepCopyObject copies through JSON: these objects are small and few, and
// hand-written copies drift from the fields.
func (o *Order) DeepCopyObject() runtime.Object { return jsonCopy(o, &Order{}) }

// DeepCopy returns a copy of o.
func (o *Order) DeepCopy() *Order { return jsonCopy(o, &Order{}) }

// DeepCopyObject copies through JSON.
func (l *OrderList) DeepCopyObject() runtime.Object { return jsonCopy(l, &OrderList{}) }

func jsonCopy[T any](in, out *T) *T {
	if in == nil {
		return nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}
