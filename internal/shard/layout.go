package shard

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// One fence layout at a time.
//
// The fence layout (Options.Buckets, --shard-buckets) decides which Lease
// guards a cluster: its own, or its bucket's among N. Two replicas with
// different layouts guard the same cluster with different Leases, so both
// could write to it. That happens while a Deployment rolls out a new
// --shard-buckets (or a version whose default differs), so the
// Coordinator refuses it:
//
//   - every replica announces its layout on its peer Lease
//     (hubapi.ShardBucketsAnnotation, "0" for a fence per cluster);
//   - a replica that sees a live peer announce another layout, or a live
//     fence held by another replica under another layout, holds no fence:
//     it releases those it holds and acquires none, until every live
//     replica uses its layout and the other layout's fences are released
//     or expired. Its connections stay as they are.
//
// A peer of a version that announced nothing is judged by the fences it
// holds; one that holds none is taken to differ. So a rollout that changes
// the layout pauses issuance until the last replica of the old layout is
// gone (and its fences released, at once on SIGTERM); it never has two
// writers. The check reads the Lease informer after our own announcement,
// as any replica that announced before us is seen by us, and we are seen by
// any that checks after announcing; the window left is two replicas of
// different layouts that start within the informer's lag of each other.

// layoutOf is the layout a peer Lease announces, or -1 when it announces none.
func layoutOf(annotations map[string]string) int {
	n, err := strconv.Atoi(annotations[hubapi.ShardBucketsAnnotation])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// fenceLayoutOf is the layout a fence Lease was written under: its bucket
// count, 0 for a fence per cluster.
func fenceLayoutOf(annotations map[string]string) int {
	return max(layoutOf(annotations), 0)
}

// layoutConflict returns why another replica may be writing under a layout
// other than mine, or "" when no live Lease says so.
func (ob *observer) layoutConflict(now time.Time, self string, mine int) string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	announced := map[string]int{} // live peer → its layout (-1: none announced)
	holds := map[string]int{}     // live fence holder → the layout of a fence it holds
	var fences []string
	for name, o := range ob.leases {
		h := o.holder()
		if h == "" || h == self || !o.live(now, ob.maxSkew) {
			continue
		}
		switch o.lease.Labels[hubapi.LeaseKindLabel] {
		case leaseKindPeer:
			announced[h] = layoutOf(o.lease.Annotations)
		case leaseKindFence:
			l := fenceLayoutOf(o.lease.Annotations)
			holds[h] = l
			if l != mine {
				fences = append(fences, fmt.Sprintf("fence Lease %s is held by %q under --shard-buckets=%d", name, h, l))
			}
		}
	}
	if len(fences) > 0 {
		slices.Sort(fences)
		return fences[0]
	}
	var peers []string
	for id, l := range announced {
		switch {
		case l < 0:
			if held, ok := holds[id]; !ok {
				peers = append(peers, fmt.Sprintf("replica %q announces no fence layout (an older version) and holds no fence to tell it by", id))
			} else if held != mine {
				peers = append(peers, fmt.Sprintf("replica %q holds fences under --shard-buckets=%d", id, held))
			}
		case l != mine:
			peers = append(peers, fmt.Sprintf("replica %q uses --shard-buckets=%d", id, l))
		}
	}
	if len(peers) > 0 {
		slices.Sort(peers)
		return peers[0]
	}
	return ""
}
