package shard

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// Peer is a member of the replica set as the assignment sees it.
type Peer struct {
	// ID is the replica's identity (its peer Lease names it).
	ID string
	// Weight is the replica's relative capacity; 0 counts as 1.
	Weight float64
}

// Assign returns the ID of the peer that owns key under weighted rendezvous
// (highest-random-weight) hashing, or "" when there are no peers.
//
// Each (key, peer) pair gets a uniform u in (0,1] from xxhash64 of
// key + "\x00" + peer.ID; the score is -Weight/ln(u), the standard weighted
// HRW (equivalently, the smallest -ln(u)/Weight wins), so a peer with twice
// the weight owns twice the share. xxhash is fully mixed, unlike FNV-1a whose
// last byte barely reaches the high bits (upstream's 25/25/50 split with
// ordinal peer names). Ties, with probability ~2^-53, go to the smaller ID so
// every replica decides the same.
func Assign(key string, peers []Peer) string {
	best, bestScore := "", math.Inf(-1)
	for _, p := range peers {
		s := score(key, p)
		if s > bestScore || (s == bestScore && p.ID < best) {
			best, bestScore = p.ID, s
		}
	}
	return best
}

func score(key string, p Peer) float64 {
	d := xxhash.New()
	_, _ = d.WriteString(key)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(p.ID)
	// 53 high bits → u in (0,1]; never 0, so ln(u) is finite and ≤ 0.
	u := (float64(d.Sum64()>>11) + 1) / (1 << 53)
	w := p.Weight
	if w <= 0 {
		w = 1
	}
	if u == 1 {
		return math.Inf(1)
	}
	return -w / math.Log(u)
}
