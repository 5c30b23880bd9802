package acme

import (
	"context"
	"errors"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"

	"github.com/certhub/certhub/internal/dns01"
)

// dnsProvider writes and removes a solver's TXT records (internal/dns01).
type dnsProvider = dns01.Provider

// providerEnv is what building a provider needs from the hub.
type providerEnv = dns01.Env

// newProvider builds solver s's DNS provider when the hub runs it
// (checkSolver); a configuration dns01 cannot use is InvalidSolverConfig.
func newProvider(ctx context.Context, env providerEnv, s cmacme.ACMEChallengeSolver) (dnsProvider, error) {
	if err := checkSolver(s, 0); err != nil {
		return nil, err
	}
	p, err := dns01.New(ctx, env, s.DNS01)
	if ce := (*dns01.ConfigError)(nil); errors.As(err, &ce) {
		return nil, &solverError{ReasonSolverConfig, ce.Message}
	}
	return p, err
}
