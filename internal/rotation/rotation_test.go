package rotation

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Waves follow the numeric label, then the unlabelled clusters.
func TestWaves(t *testing.T) {
	r := &Rotator{opts: Options{Clusters: func() map[multicluster.ClusterName]map[string]string {
		return map[multicluster.ClusterName]map[string]string{
			"prod-a": {hubapi.WaveLabel: "10"}, "prod-b": {hubapi.WaveLabel: "10"}, "staging": {hubapi.WaveLabel: "2"},
			"sandbox": {hubapi.WaveLabel: "0"}, "legacy": nil, "typo": {hubapi.WaveLabel: "two"},
		}
	}}}
	got, n := r.waves()
	want := map[multicluster.ClusterName]int{"sandbox": 0, "staging": 1, "prod-a": 2, "prod-b": 2, "legacy": 3, "typo": 3}
	if n != 4 || !reflect.DeepEqual(got, want) {
		t.Errorf("waves %v (%d), want %v (4)", got, n, want)
	}
	if w, _ := r.waveOf("unknown"); w != 4 {
		t.Errorf("an unknown cluster is in wave %d, want after the last", w)
	}
}

// Which waves sign with the new CA in each phase, and which CAs the bundles hold.
func TestPhases(t *testing.T) {
	for _, tc := range []struct {
		phase   Phase
		wave    int
		signs   []bool // waves 0, 1, 2
		bundles []string
	}{
		{Publishing, 0, []bool{false, false, false}, []string{"old", "new"}},
		{Soaking, 0, []bool{false, false, false}, []string{"old", "new"}},
		{Rolling, 1, []bool{true, true, false}, []string{"old", "new"}},
		{Halted, 1, []bool{true, true, false}, []string{"old", "new"}},
		{Halted, -1, []bool{false, false, false}, []string{"old", "new"}}, // while publishing (From)
		{Pausing, 1, []bool{true, true, false}, []string{"old", "new"}},
		{Grace, 2, []bool{true, true, true}, []string{"old", "new"}},
		{Complete, 2, []bool{true, true, true}, []string{"new"}},
		{Aborting, 1, []bool{false, false, false}, []string{"old", "new"}},
	} {
		s := &State{Issuer: "ca", Next: "new", Phase: tc.phase, Wave: tc.wave, Waves: 3}
		if tc.wave < 0 {
			s.Wave, s.From = 0, Publishing
		}
		for w, want := range tc.signs {
			if got := s.signsWithNext(w); got != want {
				t.Errorf("%s wave %d: wave %d signs with the new CA = %v", tc.phase, tc.wave, w, got)
			}
		}
		r := &Rotator{states: map[string]*State{"ca": s}}
		if got := r.BundleSecrets("ca", "old"); !reflect.DeepEqual(got, tc.bundles) {
			t.Errorf("%s: bundle from %v, want %v", tc.phase, got, tc.bundles)
		}
	}
	if got := (&Rotator{states: map[string]*State{}}).BundleSecrets("other", "old"); !reflect.DeepEqual(got, []string{"old"}) {
		t.Errorf("no rotation: bundle from %v", got)
	}
}

func TestStateRoundTripAndLine(t *testing.T) {
	s := &State{Issuer: "ca", Next: "ca-next", Phase: Halted, Wave: 1, Waves: 3, Since: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC),
		Reason: "wave 2/3: …", Resume: "r1", Moved: 340, Total: 1000}
	if got := StateFrom(&corev1.ConfigMap{Data: s.Data()}); !reflect.DeepEqual(got, s) {
		t.Errorf("round trip %+v, want %+v", got, s)
	}
	if got, want := s.String(), "Halted, wave 2/3, 340/1000 re-issued: wave 2/3: …"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}

func TestSummarize(t *testing.T) {
	if got := summarize(map[multicluster.ClusterName]int{"b": 3, "a": -1}); got != "a (unreachable), b (3)" {
		t.Errorf("got %q", got)
	}
}

// Subscribers hear when a cluster's bundles come to hold the next CA after
// the first step saw them not: a cluster engaged after its wave started
// moves then, not at its next resync. Nothing new, nothing said.
func TestSubscribersHearOfANewlyPublishedCluster(t *testing.T) {
	r := &Rotator{published: map[string]map[multicluster.ClusterName]bool{}}
	calls := 0
	r.Subscribe(func() { calls++ })
	for _, tc := range []struct {
		published []multicluster.ClusterName
		want      int
	}{
		{published: []multicluster.ClusterName{"east"}, want: 0},         // the first step: the phase change tells
		{published: []multicluster.ClusterName{"east"}, want: 0},         // nothing new
		{published: []multicluster.ClusterName{"east", "west"}, want: 1}, // west engaged late, published now
		{published: []multicluster.ClusterName{"west"}, want: 1},         // east no longer seen: nothing to move
		{published: []multicluster.ClusterName{"west", "east"}, want: 2}, // east back
	} {
		m := map[multicluster.ClusterName]bool{}
		for _, n := range tc.published {
			m[n] = true
		}
		r.setPublished("ca", m)
		if calls != tc.want {
			t.Fatalf("after %v: %d calls, want %d", tc.published, calls, tc.want)
		}
	}
}
