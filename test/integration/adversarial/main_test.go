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

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "adversarial-ca"

var (
	env *suite.Env
	bed *testbed.Bed
	// hubTraffic sees every request the in-process replica makes to the hub
	// API server and every response body (item 7).
	hubTraffic = newTrafficRecorder()
)

func TestMain(m *testing.M) {
	// The third downstream is registered by tests only, through TCP proxies.
	// The binary: a second replica to freeze (item 6), `certhub status` (item 7).
	// The in-process replica runs the fleet's fast Lease timings, as the process does.
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3, Unregistered: 1, Binary: true,
		Hub: func(o *hub.Options) {
			o.IssuerRetryInterval = time.Second
			// cert-manager is looked for every 2 s, so a tenant that writes
			// as cert-manager is seen within a test's bound.
			o.CertManagerCheckInterval = 2 * time.Second
			tm := fleet.FastTimings
			o.Shard.LeaseDuration, o.Shard.RenewDeadline, o.Shard.RetryPeriod, o.Shard.RenewInterval = tm.LeaseDuration, tm.RenewDeadline, tm.RetryPeriod, tm.RenewInterval
		},
		HubTransport: hubTraffic.wrap,
		Setup: func(_ context.Context, e *suite.Env) error {
			bed = e.Bed
			return nil
		}}, &env))
}

// neighbourIssues creates a healthy Certificate ns/name in c (its namespace
// too), waits until it is Ready, logs how long that took next to what the
// test set up (beside), and fails the test beyond neighbourBound.
func neighbourIssues(t *testing.T, c client.Client, ns, name, beside string) time.Duration {
	t.Helper()
	fixture.EnsureNamespace(t, c, ns)
	start := time.Now()
	crt := fixture.Certificate(ns, name, issuerName)
	if err := c.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	took := time.Since(start)
	t.Logf("neighbour Ready %s after it was created, next to %s (bound %s)", took.Round(time.Millisecond), beside, neighbourBound)
	if took > neighbourBound {
		t.Errorf("the neighbour took %s, bound %s", took, neighbourBound)
	}
	return took
}
