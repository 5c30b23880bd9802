// Package discovery proves discovery end to end on real API servers with
// the shipped downstream RBAC: three clusters hold a certhub-written, a
// cert-manager-written (cert-manager's own controllers, test/fixture/
// cmrunner) and hand-made TLS Secrets — an expired one that an Ingress
// still serves, an RSA-1024 one, Opaque ones only an Ingress or a
// Gateway names — and
// `certhub status --discovered` and the metrics list each as what it is.
package discovery

import (
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
)

const issuerName = "discovery-ca"

var env *suite.Env

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3, Unregistered: 1, Hub: func(o *hub.Options) {
		o.DiscoveryReportInterval = 500 * time.Millisecond
	}}, &env))
}
