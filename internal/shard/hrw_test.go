package shard

import (
	"fmt"
	"maps"
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

func units(keys []string) []Unit {
	out := make([]Unit, len(keys))
	for i, k := range keys {
		out[i] = Unit{Key: k, Load: 1}
	}
	return out
}

func countBounded(a map[string]string, us []Unit, ps []Peer) []int {
	per := map[string]int{}
	for _, u := range us {
		per[a[u.Key]] += u.Load
	}
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = per[p.ID]
	}
	return out
}

// Golden vectors of the bounded assignment: like Assign's, part of the
// contract between replicas of different versions.
func TestAssignBoundedGolden(t *testing.T) {
	got := AssignBounded(units(clusterNames(6)), peers("certhub-0", "certhub-1", "certhub-2"), DefaultBalance)
	per := countBounded(got, units(clusterNames(6)), peers("certhub-0", "certhub-1", "certhub-2"))
	if !slices.Equal(per, []int{2, 2, 2}) {
		t.Errorf("6 clusters over 3 replicas split %v, want 2/2/2", per)
	}
	golden := map[string]string{"cluster-0": "certhub-1", "cluster-1": "certhub-0", "cluster-2": "certhub-2",
		"cluster-3": "certhub-1", "cluster-4": "certhub-0", "cluster-5": "certhub-2"}
	for k, v := range golden {
		if got[k] != v {
			t.Errorf("AssignBounded(%s) = %s, want %s (all: %v)", k, got[k], v, got)
		}
	}
	if len(AssignBounded(units(clusterNames(3)), nil, DefaultBalance)) != 0 {
		t.Error("an assignment without peers")
	}
}

// Balance (P5's goal: max/min ≤ 1.10 at 3 replicas) and movement (≤ 30 %
// on 3→4) of per-cluster fences, over several cluster name sets; buckets
// balance within 1.10 too. Weights are honoured: a replica of weight 2 gets
// twice the share. The result does not depend on the order of the input.
func TestAssignBoundedBalanceAndMovement(t *testing.T) {
	p3 := peers("certhub-0", "certhub-1", "certhub-2")
	p4 := peers("certhub-0", "certhub-1", "certhub-2", "certhub-3")
	for _, n := range []int{150, 1000} {
		for seed := range 10 {
			var keys []string
			for i := range n {
				keys = append(keys, fmt.Sprintf("s%d-cluster-%d", seed, i))
			}
			us := units(keys)
			a3, a4 := AssignBounded(us, p3, DefaultBalance), AssignBounded(us, p4, DefaultBalance)
			per := countBounded(a3, us, p3)
			if r := float64(slices.Max(per)) / float64(slices.Min(per)); r > 1.10 {
				t.Errorf("%d clusters, seed %d: split %v, max/min %.3f > 1.10", n, seed, per, r)
			}
			moved := 0
			for _, k := range keys {
				if a3[k] != a4[k] {
					moved++
				}
			}
			if share := float64(moved) / float64(n); share > 0.30 {
				t.Errorf("%d clusters, seed %d: 3→4 moved %.1f%% > 30%%", n, seed, 100*share)
			}
			// Buckets: units weighted by their clusters.
			load := map[string]int{}
			for _, k := range keys {
				load[FenceKey(k, 32)]++
			}
			var bs []Unit
			for k, l := range load {
				bs = append(bs, Unit{Key: k, Load: l})
			}
			if per := countBounded(AssignBounded(bs, p3, DefaultBalance), bs, p3); float64(slices.Max(per))/float64(slices.Min(per)) > 1.10 {
				t.Errorf("%d clusters in 32 buckets, seed %d: split %v", n, seed, per)
			}
			shuffled := slices.Clone(us)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if got := AssignBounded(shuffled, []Peer{p3[2], p3[0], p3[1]}, DefaultBalance); !maps.Equal(got, a3) {
				t.Errorf("%d clusters, seed %d: the assignment depends on the input order", n, seed)
			}
		}
	}
	weighted := []Peer{{ID: "big", Weight: 2}, {ID: "a", Weight: 1}, {ID: "b", Weight: 1}}
	per := countBounded(AssignBounded(units(clusterNames(400)), weighted, DefaultBalance), units(clusterNames(400)), weighted)
	if per[0] < 196 || per[0] > 204 {
		t.Errorf("weight 2 of 4 got %d of 400 clusters (split %v), want ~200", per[0], per)
	}
}
