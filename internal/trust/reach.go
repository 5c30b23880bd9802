package trust

import (
	"context"
	"encoding/pem"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Reaches reports whether the bundle ConfigMap in namespace of a cluster
// with clusterLabels carries iss's CA: iss is a CA issuer, not opted out,
// and its trust scope (ClustersAnnotation, NamespacesAnnotation) takes it
// there. What CA rotation waits for.
func Reaches(iss *cmapi.ClusterIssuer, clusterLabels map[string]string, namespace string) bool {
	if iss.Spec.CA == nil || iss.Annotations[hubapi.TrustBundleAnnotation] == "false" {
		return false
	}
	e := scope(iss, logr.Discard())
	return e.clusters.Matches(labels.Set(clusterLabels)) && matchesName(e.namespaces, namespace)
}

// PublishedPEM returns the PEM blocks a bundle carries for the CA Secret
// name of issuer (ca.crt, or tls.crt when empty): exactly what the bundle
// holds once that CA is published, whatever its chain (a root above an
// intermediate is published as the root).
func PublishedPEM(ctx context.Context, c client.Reader, namespace, issuer, name string) [][]byte {
	var out [][]byte
	for _, der := range caOf(ctx, c, namespace, issuer, name, logr.Discard()) {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	return out
}
