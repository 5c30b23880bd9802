// Package external is the tier of external issuer mode: clusters that keep
// cert-manager (its own v1.21 controllers, test/fixture/cmrunner) send
// CertificateRequests with issuerRef.group certhub.io to the hub, which
// signs them with its ClusterIssuer; the private keys stay downstream.
package external

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// hubIssuer is the hub's CA ClusterIssuer the requests name.
const hubIssuer = "hub-ca"

var (
	env *suite.Env
	// keepsKeys (Downstreams[0]) runs cert-manager with its approver;
	// direct (Downstreams[1]) without it (the tests approve and deny).
	// Both are registered in mode external through recording proxies.
	keepsKeys, direct *testbed.Proxy
)

func TestMain(m *testing.M) {
	// The third downstream is registered by TestSwitchToExternalStopsEveryRead.
	os.Exit(suite.Run(m, suite.Options{Issuer: hubIssuer, Downstreams: 3, Unregistered: 3,
		Hub: func(o *hub.Options) {
			o.IssuerRetryInterval = time.Second
			o.CertManagerCheckInterval = time.Second
		},
		Setup: func(ctx context.Context, e *suite.Env) error {
			env = e
			var err error
			if keepsKeys, err = externalCluster(ctx, e.Bed.Downstreams[0], "keeps-keys", true); err != nil {
				return err
			}
			direct, err = externalCluster(ctx, e.Bed.Downstreams[1], "direct", false)
			return err
		}}, &env))
}
