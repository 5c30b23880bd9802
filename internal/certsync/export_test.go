package certsync

import (
	"crypto/x509"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/policy"
)

// Admit decides on crt in cluster with set through the reconciler's own
// templateFor and returns the template that would be signed.
func Admit(set *policy.Set, cluster string, crt *cmapi.Certificate) (*x509.Certificate, policy.Decision, error) {
	tmpl, d, _, err := templateFor(evaluator{set}, multicluster.ClusterName(cluster), crt)
	return tmpl, d, err
}
