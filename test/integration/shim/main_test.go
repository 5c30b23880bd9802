// Package shim proves the ingress and gateway shims end to end: annotated
// Ingresses and Gateways in downstream API servers become the Certificates
// cert-manager's own certificate-shim makes (compared field by field with
// its SyncFnFor on the same object), which the hub then issues; edits and
// removals follow; a cluster without the Gateway API CRDs keeps working; a
// namespace-scoped registration sees only its namespace.
package shim

import (
	"context"
	"os"
	"testing"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
)

const issuerName = "shim-ca"

var env *suite.Env

func TestMain(m *testing.M) {
	// cluster-1: no Gateway API; cluster-2: Gateway API CRDs; cluster-3:
	// registered by TestNamespaceScopedRegistrationSeesItsNamespaceOnly.
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3, Unregistered: 1,
		Hub: func(*hub.Options) {},
		Setup: func(_ context.Context, e *suite.Env) error {
			return e.Bed.Downstreams[1].InstallGatewayAPI()
		}}, &env))
}
