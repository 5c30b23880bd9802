// Package adversarial proves that one bad actor affects nobody else: each
// test makes one tenant, cluster or registration misbehave and asserts both
// the specific answer it gets and that a healthy neighbour keeps issuing
// meanwhile, within a bound the test states.
package adversarial

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
	"github.com/certhub/certhub/test/integration/envtestmain"
)

const issuerName = "adversarial-ca"

var (
	env *envtestmain.Env
	bed *testbed.Bed
)

func TestMain(m *testing.M) {
	os.Exit(envtestmain.Run(m, envtestmain.Options{Issuer: issuerName,
		Hub: func(o *app.Options) { o.IssuerRetryInterval = time.Second },
		Setup: func(_ context.Context, e *envtestmain.Env) error {
			bed = e.Bed
			return nil
		}}, &env))
}
