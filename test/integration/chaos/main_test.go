// Package chaos runs three hub replicas as processes against one hub and five
// downstream API servers while a driver creates and updates Certificates and
// breaks things on purpose: it SIGKILLs a random replica every few seconds
// (and restarts it), stops one downstream API server for a while, and
// restarts the hub API server once. At the end it checks the invariants that
// matter to users: every Certificate Ready with a valid certificate for its
// current spec, no Secret lost, no Certificate issued more often than its
// spec changes required, no cluster unowned for longer than the fence
// duration + 2s, and never two writers within one fence period.
//
// `make test` runs the short form (the defaults below); `make chaos` the long
// one (-chaos.duration=10m and more Certificates).
package chaos

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	issuerName  = "chaos-ca"
	downstreams = 5
	ns          = "chaos"
)

var (
	certs     = flag.Int("chaos.certs", 300, "Certificates created over the run (spread over the clusters)")
	requests  = flag.Int("chaos.requests", 12, "CertificateRequests (certhub.io issuer) created and approved over the run")
	updates   = flag.Int("chaos.updates", 200, "spec changes (new DNS name) made to issued Certificates over the run")
	duration  = flag.Duration("chaos.duration", 100*time.Second, "how long the faults go on")
	outage    = flag.Duration("chaos.outage", 30*time.Second, "how long one downstream API server stays stopped")
	killEvery = flag.Duration("chaos.kill-every", 4*time.Second, "a random replica is SIGKILLed every kill-every to 2×kill-every")
	seed      = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; the test logs the one it used)")
)

var (
	env *suite.Env
	bed *testbed.Bed
)

func TestMain(m *testing.M) {
	// The replicas are a plain (not -race) build: this tier loads 3 replicas
	// and 6 API servers on 2 cores; the shard tier runs race-built replicas.
	os.Exit(suite.Run(m, suite.Options{Downstreams: downstreams, Issuer: issuerName, Binary: true,
		Setup: func(_ context.Context, e *suite.Env) error {
			bed = e.Bed
			return nil
		}}, &env))
}
