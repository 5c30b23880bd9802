// Package trust proves the trust bundles end to end: the hub's CA
// ClusterIssuers' certificates appear in a ConfigMap in every namespace of
// every served cluster, a certificate the hub issues verifies against the
// bundle on its own cluster, copies edited or deleted are repaired, and a
// second CA joins and leaves the bundle. (Namespace selection and foreign
// ConfigMaps: internal/trust's unit tests.)
package trust

import (
	"os"
	"testing"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
)

const issuerName = "trust-ca"

var env *suite.Env

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Hub: func(*hub.Options) {}}, &env))
}
