package certsync

import (
	"encoding/json"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Downstream clusters run no cert-manager webhook, and the CRD declares
// duration and renewBefore as plain strings, so the API server stores a
// Certificate like `duration: "1 day"` that the typed API cannot decode. A
// typed informer fails its whole list on one such object — every other
// Certificate of the cluster would get no answer. So the controller watches
// Certificates unstructured and decodes each one on its own: a bad object
// gets Ready=False naming the field, and its neighbours are unaffected.

// certificateGVK is cert-manager's Certificate kind.
var certificateGVK = cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind)

// NewCertificateList is an empty unstructured list of cert-manager
// Certificates, the form the downstream caches hold them in (CacheOptions).
func NewCertificateList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(certificateGVK.GroupVersion().WithKind(certificateGVK.Kind + "List"))
	return l
}

// newCertificateObject is an empty unstructured Certificate, for the cache.
func newCertificateObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(certificateGVK)
	return u
}

// decodeCertificate converts an unstructured Certificate to the typed API;
// when it does not decode, the error is a *specError naming the field.
func decodeCertificate(u *unstructured.Unstructured) (*cmapi.Certificate, error) {
	crt := &cmapi.Certificate{}
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crt)
	if err == nil {
		return crt, nil
	}
	p := field.NewPath("spec")
	for _, f := range []string{"duration", "renewBefore"} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", f); found {
			s, ok := v.(string)
			if !ok {
				return nil, &specError{reason: ReasonInvalidLifetime, errs: field.ErrorList{field.Invalid(p.Child(f), v, "must be a duration string, e.g. 2160h")}}
			}
			if _, perr := time.ParseDuration(s); perr != nil {
				return nil, &specError{reason: ReasonInvalidLifetime, errs: field.ErrorList{field.Invalid(p.Child(f), s, fmt.Sprintf("is not a duration (%v); use Go duration units, e.g. 24h", perr))}}
			}
		}
	}
	return nil, &specError{reason: ReasonInvalidSpec, errs: field.ErrorList{field.Invalid(p, "...", "cannot be decoded as a cert-manager.io/v1 Certificate: "+err.Error())}}
}

// undecodableStatus is the merge patch that records Ready=False on a
// Certificate that does not decode (its typed status cannot be written).
func undecodableStatus(generation int64, reason, message string, now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": string(cmapi.CertificateConditionReady), "status": "False", "reason": reason, "message": message,
		"lastTransitionTime": now.UTC().Format(time.RFC3339), "observedGeneration": generation,
	}}}})
}

// Validate is the hub's verdict on a Certificate object as an API server
// stores it: nil when it decodes and its spec is valid, else an error
// naming the field and why. The reconciler decides the same way; the
// downstream ValidatingAdmissionPolicy is held to agree with it (the
// admission tier's differential test).
func Validate(u *unstructured.Unstructured) error {
	crt, err := decodeCertificate(u)
	if err != nil {
		return err
	}
	return validateSpec(crt)
}
