package shard

import (
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// Every change of the live-peer set is logged once, with the set before
// and after: the assignment follows it, so a replica whose view flaps moves
// fences, and the log is where an operator sees why.
func TestLivePeerChangesAreLogged(t *testing.T) {
	h := newHarness(t, "r0", nil)
	var lines []string
	h.c.log = funcr.New(func(_, args string) {
		if strings.Contains(args, "live peers changed") {
			lines = append(lines, args)
		}
	}, funcr.Options{})
	h.c.step(h.ctx)
	h.c.step(h.ctx)
	h.peer("r1")
	h.c.step(h.ctx)
	h.c.step(h.ctx)
	// r1 stops renewing: it is gone once its Lease has not changed for
	// LeaseDuration, while r0 keeps renewing its own.
	for range 4 {
		h.clk.Step(h.c.opts.LeaseDuration / 3)
		h.c.step(h.ctx)
	}
	want := []string{`"peers"=["r0"] "before"=[]`, `"peers"=["r0" "r1"] "before"=["r0"]`, `"peers"=["r0"] "before"=["r0" "r1"]`}
	if len(lines) != len(want) {
		t.Fatalf("%d lines logged, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s, want it to contain %s", i, lines[i], w)
		}
	}
	if !slices.Equal(h.c.livePeers, []string{"r0"}) {
		t.Errorf("livePeers %v, want [r0]", h.c.livePeers)
	}
}
