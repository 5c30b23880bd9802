package certspec

import (
	"encoding/json"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// NewList is an empty unstructured list of cert-manager
// Certificates, the form the downstream caches hold them in (CacheOptions).
func NewList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(certificateGVK.GroupVersion().WithKind(certificateGVK.Kind + "List"))
	return l
}

// NewObject is an empty unstructured Certificate, for the cache.
func NewObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(certificateGVK)
	return u
}

// UndecodableStatus is the merge patch that records Ready=False on a
// Certificate that does not decode (its typed status cannot be written).
func UndecodableStatus(generation int64, reason, message string, now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": string(cmapi.CertificateConditionReady), "status": "False", "reason": reason, "message": message,
		"lastTransitionTime": now.UTC().Format(time.RFC3339), "observedGeneration": generation,
	}}}})
}

// SecretNameField indexes Certificates by spec.secretName (certsync's
// Options.Indexer): finding the Certificates that share a Secret is one lookup.
const SecretNameField = "spec.secretName"

// SecretNameOf is the index's value of an unstructured Certificate.
func SecretNameOf(o client.Object) []string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if name, _, _ := unstructured.NestedString(u.Object, "spec", "secretName"); name != "" {
		return []string{name}
	}
	return nil
}
