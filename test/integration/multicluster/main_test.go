// Package multicluster is issuance end to end across clusters: one hub and two
// downstream API servers (real kube-apiserver + etcd), one hub replica, and
// cert-manager Certificates issued end to end.
package multicluster

import (
	"context"
	"os"
	"testing"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "test-ca"

var (
	env *suite.Env
	bed *testbed.Bed
	// caPEM is the CA certificate of issuerName, as the hub holds it.
	caPEM []byte
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Hub: func(*hub.Options) {},
		Setup: func(_ context.Context, e *suite.Env) error {
			bed, caPEM = e.Bed, e.CAPEM
			return nil
		}}, &env))
}
