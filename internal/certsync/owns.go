package certsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/certspec"
)

// duplicateRequeue is how soon a Certificate that shares its secretName with
// another, and does not own the Secret, is looked at again (cert-manager's
// trigger controller waits the same).
const duplicateRequeue = 3 * time.Minute

// secretOwner is cert-manager's CertificateOwnsSecret
// (internal/controller/certificates, not importable): of the Certificates in
// crt's namespace that name the same secretName, the owner is the one the
// Secret's cert-manager.io/certificate-name annotation names, else the
// oldest (then by name). It returns the owner and the other Certificates
// sharing the name; owner == crt.Name when there are no duplicates. Without
// it, two such Certificates re-issue against each other for as long as they
// exist, both Ready while the Secret holds one of them.
func secretOwner(ctx context.Context, c client.Reader, indexed bool, crt *cmapi.Certificate, secret *corev1.Secret) (owner string, others []string, err error) {
	list := certspec.NewList()
	opts := []client.ListOption{client.InNamespace(crt.Namespace)}
	if indexed {
		opts = append(opts, client.MatchingFields{certspec.SecretNameField: crt.Spec.SecretName})
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return "", nil, fmt.Errorf("failed to list Certificates in %s: %w", crt.Namespace, err)
	}
	var same []unstructured.Unstructured
	for _, u := range list.Items {
		if name, _, _ := unstructured.NestedString(u.Object, "spec", "secretName"); name == crt.Spec.SecretName {
			same = append(same, u)
		}
	}
	if len(same) <= 1 {
		return crt.Name, nil, nil
	}
	slices.SortFunc(same, func(a, b unstructured.Unstructured) int {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		switch {
		case ta.Equal(&tb):
			return strings.Compare(a.GetName(), b.GetName())
		case ta.Before(&tb):
			return -1
		default:
			return 1
		}
	})
	names := make([]string, len(same))
	for i, u := range same {
		names[i] = u.GetName()
	}
	owner = names[0]
	if secret != nil {
		if a, ok := secret.Annotations[cmapi.CertificateNameKey]; ok && slices.Contains(names, a) {
			owner = a
		}
	}
	for _, n := range names {
		if n != crt.Name {
			others = append(others, n)
		}
	}
	return owner, others, nil
}
