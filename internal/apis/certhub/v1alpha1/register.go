package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is certhub's API group. It is its own, so a cert-manager running
// in the hub cluster never picks an ACMEOrder up (its orders are
// acme.cert-manager.io).
const GroupName = "certhub.io"

// Kinds of the API.
const (
	ACMEOrderKind      = "ACMEOrder"
	IssuancePolicyKind = "IssuancePolicy"
	// CertificateRevocationKind pulls certificates back (renew, then revoke).
	CertificateRevocationKind = "CertificateRevocation"
)

var (
	// SchemeGroupVersion is the group and version of every type here.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns a GroupResource of this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&ACMEOrder{}, &ACMEOrderList{},
		&IssuancePolicy{}, &IssuancePolicyList{},
		&CertificateRevocation{}, &CertificateRevocationList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
