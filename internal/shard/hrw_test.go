package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func peers(ids ...string) []Peer {
	out := make([]Peer, len(ids))
	for i, id := range ids {
		out[i] = Peer{ID: id, Weight: 1}
	}
	return out
}

func clusterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cluster-%d", i)
	}
	return out
}

func split(keys []string, ps []Peer) map[string]int {
	m := map[string]int{}
	for _, p := range ps {
		m[p.ID] = 0
	}
	for _, k := range keys {
		m[Assign(k, ps)]++
	}
	return m
}

// Golden vectors: the assignment is part of the wire contract between
// replicas of different versions; changing it moves clusters on upgrade.
func TestAssignGolden(t *testing.T) {
	ps := peers("certhub-0", "certhub-1", "certhub-2")
	golden := map[string]string{
		"cluster-0": "certhub-1", "cluster-1": "certhub-2", "cluster-2": "certhub-2", "east": "certhub-1",
		"west": "certhub-2", "https://kubernetes.default.svc": "certhub-0", "bucket-7": "certhub-2", "": "certhub-2",
	}
	for key, want := range golden {
		if got := Assign(key, ps); got != want {
			t.Errorf("Assign(%q) = %q, want %q", key, got, want)
		}
	}
	if got := Assign("x", nil); got != "" {
		t.Errorf("Assign with no peers = %q, want \"\"", got)
	}
}

func TestAssignIsOrderIndependent(t *testing.T) {
	ps := peers("a", "b", "c", "d", "e")
	for _, k := range clusterNames(200) {
		want := Assign(k, ps)
		shuffled := slices.Clone(ps)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Assign(k, shuffled); got != want {
			t.Fatalf("Assign(%q) depends on peer order: %q vs %q", k, got, want)
		}
	}
}

// Ordinal StatefulSet names are where upstream's FNV-1a HRW splits 25/25/50.
func TestBalanceWithOrdinalNames(t *testing.T) {
	m := split(clusterNames(1000), peers("certhub-0", "certhub-1", "certhub-2"))
	lo, hi := 1<<30, 0
	for _, n := range m {
		lo, hi = min(lo, n), max(hi, n)
	}
	t.Logf("split of 1000 clusters over 3 peers: %v (max/min %.3f)", m, float64(hi)/float64(lo))
	if float64(hi)/float64(lo) > 1.10 {
		t.Errorf("max/min = %d/%d = %.3f, want <= 1.10", hi, lo, float64(hi)/float64(lo))
	}
}

func TestMinimalMovement(t *testing.T) {
	keys := clusterNames(1000)
	three := peers("certhub-0", "certhub-1", "certhub-2")
	four := peers("certhub-0", "certhub-1", "certhub-2", "certhub-3")
	moved := 0
	for _, k := range keys {
		before, after := Assign(k, three), Assign(k, four)
		if before != after {
			moved++
			if after != "certhub-3" {
				t.Fatalf("%s moved %s→%s on scale-up; only moves to the new peer are allowed", k, before, after)
			}
		}
	}
	t.Logf("3→4 peers moved %d of %d clusters", moved, len(keys))
	if moved > 270 {
		t.Errorf("3→4 moved %d clusters, want <= 27%%", moved)
	}
	for _, k := range keys {
		before, after := Assign(k, four), Assign(k, three)
		if before != after && before != "certhub-3" {
			t.Fatalf("%s moved %s→%s on scale-down; only the leaving peer's clusters may move", k, before, after)
		}
	}
}

func TestWeights(t *testing.T) {
	keys := clusterNames(20000)
	m := split(keys, []Peer{{ID: "small", Weight: 1}, {ID: "big", Weight: 2}})
	ratio := float64(m["big"]) / float64(m["small"])
	t.Logf("weights 1:2 → %v (ratio %.3f)", m, ratio)
	if ratio < 2*0.95 || ratio > 2*1.05 {
		t.Errorf("weight 2 peer got %.3f× the weight 1 peer's share, want 2 within 5%%", ratio)
	}
	if zero := split(keys[:3000], []Peer{{ID: "a"}, {ID: "b", Weight: 1}}); zero["a"] < 1350 || zero["a"] > 1650 {
		t.Errorf("weight 0 should count as 1: %v", zero)
	}
}

func FuzzAssign(f *testing.F) {
	f.Add("cluster-1", "a", "b", "c")
	f.Add("", "", "x", "x")
	f.Fuzz(func(t *testing.T, key, p1, p2, p3 string) {
		ps := peers(p1, p2, p3)
		got := Assign(key, ps)
		if !slices.ContainsFunc(ps, func(p Peer) bool { return p.ID == got }) {
			t.Fatalf("Assign returned %q, not one of the peers", got)
		}
		if again := Assign(key, []Peer{ps[2], ps[0], ps[1]}); again != got {
			t.Fatalf("order-dependent: %q vs %q", got, again)
		}
	})
}
