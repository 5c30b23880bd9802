package writegate

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Test seams for the external test package (it uses test/fixture, which
// imports certsync, which imports this package).
var (
	Look             = look
	LeaseHeld        = leaseHeld
	CertManagerWrite = certManagerWrite
)

// Active and Skipped read a look's answer.
func (a activity) Active() bool      { return a.active }
func (a activity) Skipped() []string { return a.skipped }
func (a activity) Message() string   { return a.message }
func (a activity) Held() map[string]string {
	return a.namespaces
}

// WithClock makes the gate run on c.
func WithClock(o Options, c clock.WithTicker) Options {
	o.clock = c
	return o
}

// Pass runs one pass of the gate's loop (every owned cluster looked at).
func (g *Gate) Pass(ctx context.Context) { g.pass(ctx, logr.Discard(), false) }

// KickPass runs the pass a poke starts (only clusters never looked at, or
// whose mode changed).
func (g *Gate) KickPass(ctx context.Context) { g.pass(ctx, logr.Discard(), true) }
