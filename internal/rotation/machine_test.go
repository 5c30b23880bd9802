package rotation

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// The rotation's state machine, one step at a time on a fixed clock: what
// it moves to, what it says, and when its state goes.
func TestAdvance(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	tm := timings{Soak: time.Minute, Pause: time.Minute, Deadline: 10 * time.Minute, Grace: time.Minute}
	waves := map[multicluster.ClusterName]int{"a": 0, "b": 1}
	done := progress{Published: true, Moved: 2, Total: 2}
	view := func(a, b *progress) map[multicluster.ClusterName]progress {
		v := map[multicluster.ClusterName]progress{}
		if a != nil {
			v["a"] = *a
		}
		if b != nil {
			v["b"] = *b
		}
		return v
	}
	p := func(pr progress) *progress { return &pr }
	cases := []struct {
		name   string
		state  State
		in     stepInput
		after  time.Duration // since the state's Since
		phase  Phase
		wave   int
		remove bool
		says   string // in a note, or in the state's reason
		warns  bool   // a Warning note
	}{
		{name: "published in every reachable cluster: soaking, the unreachable one deferred",
			state: State{Phase: Publishing}, in: stepInput{view: view(p(progress{Published: true}), nil)},
			phase: Soaking, says: "b unreachable: rotated when back, bundle first"},
		{name: "not published in time: halted, naming the cluster",
			state: State{Phase: Publishing}, in: stepInput{view: view(p(progress{Published: true}), p(progress{}))}, after: 10 * time.Minute,
			phase: Halted, says: "not in the trust bundles of b", warns: true},
		{name: "a halted publication resumes publishing",
			state: State{Phase: Halted, From: Publishing, Resume: "1"}, in: stepInput{view: view(&done, &done), resume: "2"},
			phase: Publishing},
		{name: "a Certificate that cannot move holds no wave, and is listed",
			state: State{Phase: Rolling, Wave: 0}, in: stepInput{view: view(p(progress{Published: true, Moved: 1, Total: 2, Stuck: 1, StuckNames: []string{"shop/web (PolicyDenied)"}}), nil)},
			phase: Pausing, says: "a/shop/web (PolicyDenied)"},
		{name: "an unreachable cluster holds no wave",
			state: State{Phase: Rolling, Wave: 1}, in: stepInput{view: view(&done, nil)},
			phase: Grace, wave: 1, says: "b unreachable"},
		{name: "a reachable cluster not moving halts the wave at its deadline",
			state: State{Phase: Rolling, Wave: 0}, in: stepInput{view: view(p(progress{Published: true, Moved: 1, Total: 2}), nil)}, after: 10 * time.Minute,
			phase: Halted, says: "a (1)", warns: true},
		{name: "retiring the old CA waits for an unreachable cluster",
			state: State{Phase: Grace, Wave: 1}, in: stepInput{view: view(&done, nil)}, after: time.Minute,
			phase: Grace, wave: 1, says: "retiring the old CA waits for b"},
		{name: "and for a cluster back but not moved yet",
			state: State{Phase: Grace, Wave: 1}, in: stepInput{view: view(&done, p(progress{Published: true, Total: 2}))}, after: time.Minute,
			phase: Grace, wave: 1, says: "waits for b"},
		{name: "unless forced",
			state: State{Phase: Grace, Wave: 1, Force: "1"}, in: stepInput{view: view(&done, nil), force: "2"}, after: time.Minute,
			phase: Complete, wave: 1},
		{name: "withdrawn before anything was signed: the state goes",
			state: State{Phase: Soaking}, in: stepInput{view: view(&done, &done), withdrawn: true}, remove: true},
		{name: "withdrawn after a wave signed: aborting, both CAs stay",
			state: State{Phase: Pausing, Wave: 0}, in: stepInput{view: view(p(progress{Published: true, Moved: 2, Total: 2, OnNext: 2}), &done), withdrawn: true},
			phase: Aborting, says: "both CAs stay", warns: true},
		{name: "aborting while certificates are on the new CA",
			state: State{Phase: Aborting}, in: stepInput{view: view(p(progress{OnNext: 1, Total: 2}), &done), withdrawn: true},
			phase: Aborting, says: "1 certificate(s) still on the new CA"},
		{name: "aborting waits to see every cluster",
			state: State{Phase: Aborting}, in: stepInput{view: view(p(progress{Total: 2}), nil), withdrawn: true},
			phase: Aborting, says: "waiting to see b"},
		{name: "aborted: nothing left on the new CA, the state goes",
			state: State{Phase: Aborting}, in: stepInput{view: view(p(progress{Total: 2}), p(progress{Total: 2})), withdrawn: true}, remove: true},
		{name: "finished: withdrawn once the issuer points at the new CA",
			state: State{Phase: Complete, Wave: 1}, in: stepInput{view: view(&done, &done), withdrawn: true, finished: true}, remove: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state
			s.Next, s.Since = "ca-next", t0
			tc.in.waveOf, tc.in.waves = waves, 2
			if tc.in.resume == "" {
				tc.in.resume = s.Resume
			}
			if tc.in.force == "" {
				tc.in.force = s.Force
			}
			notes, remove := advance(&s, tc.in, tm, t0.Add(tc.after))
			if remove != tc.remove {
				t.Fatalf("remove %v, want %v (state %s)", remove, tc.remove, s.String())
			}
			if remove {
				return
			}
			if s.Phase != tc.phase || s.Wave != tc.wave {
				t.Errorf("phase %s wave %d, want %s wave %d (%s)", s.Phase, s.Wave, tc.phase, tc.wave, s.String())
			}
			said := s.Reason
			warned := false
			for _, n := range notes {
				said += "\n" + n.message
				warned = warned || n.typ == corev1.EventTypeWarning
			}
			if !strings.Contains(said, tc.says) {
				t.Errorf("said %q, want %q", said, tc.says)
			}
			if warned != tc.warns {
				t.Errorf("warned %v, want %v: %q", warned, tc.warns, said)
			}
		})
	}
}
