// Package shard runs several hub replicas as separate processes against one
// hub and six downstream API servers, and checks the sharding coordinator's
// promises: one owner per cluster, bounded failover after SIGKILL, fast
// handoff after SIGTERM, and no two writers within one fence period.
package shard

import (
	"context"
	"os"
	"testing"

	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	issuerName  = "shard-ca"
	downstreams = 6
)

var (
	env           *suite.Env
	bed           *testbed.Bed
	certhubBinary string
	hubKubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Downstreams: downstreams, Issuer: issuerName, Binary: true, Race: raceEnabled,
		Setup: func(_ context.Context, e *suite.Env) error {
			bed, certhubBinary, hubKubeconfig = e.Bed, e.Binary, e.Kubeconfig
			return nil
		}}, &env))
}
