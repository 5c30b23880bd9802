// Package flood is the tier of one tenant's backlog against the issuance
// budget: tens of thousands of Certificates waiting in one namespace of one
// cluster (the hub issues 5 a second) while a neighbour in another cluster
// is issued. It runs with CERTHUB_FLOOD_CERTIFICATES Certificates: 1,000 in
// `make test` (the wiring), 30,000 in `make test-flood` (the long form
// issue 56 names).
package flood

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
)

const (
	issuerName = "flood-ca"
	// issuanceRate is the hub's --issuance-rate: the flood waits for it.
	issuanceRate = 5
)

var env *suite.Env

func TestMain(m *testing.M) {
	// The hub's log of tens of thousands of reconciles goes to a file.
	logs, err := os.Create(filepath.Join(os.TempDir(), "certhub-flood-hub.log"))
	if err != nil {
		panic(err)
	}
	defer logs.Close()
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 2, Logs: logs,
		Hub:   func(o *hub.Options) { o.IssuanceRate = issuanceRate },
		Setup: func(context.Context, *suite.Env) error { return nil }}, &env))
}
