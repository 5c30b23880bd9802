// Package issuance checks cert-manager parity on real API servers: every spec
// field ends up in the issued certificate and Secret as cert-manager would
// write it, renewals and manual triggers behave, invalid specs are refused
// with a reason, and Argo CD's own health check reads the status correctly.
package issuance

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
	"github.com/certhub/certhub/test/integration/envtestmain"
)

const issuerName = "parity-ca"

var (
	env   *envtestmain.Env
	bed   *testbed.Bed
	caPEM []byte
)

func TestMain(m *testing.M) {
	os.Exit(envtestmain.Run(m, envtestmain.Options{Issuer: issuerName,
		Hub: func(o *app.Options) { o.IssuerRetryInterval = time.Second },
		Setup: func(_ context.Context, e *envtestmain.Env) error {
			bed, caPEM = e.Bed, e.CAPEM
			return nil
		}}, &env))
}
