package acme

import (
	"context"
	"errors"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"

	"github.com/certhub/certhub/internal/dns01"
)

// newProvider builds solver s's DNS provider when the hub runs it
// (checkSolver); a configuration dns01 cannot use is InvalidSolverConfig.
func newProvider(ctx context.Context, env dns01.Env, s cmacme.ACMEChallengeSolver) (dns01.Provider, error) {
	if err := checkSolver(s, 0); err != nil {
		return nil, err
	}
	p, err := dns01.New(ctx, env, s.DNS01)
	if ce := (*dns01.ConfigError)(nil); errors.As(err, &ce) {
		return nil, &solverError{ReasonSolverConfig, ce.Message}
	}
	return p, err
}
