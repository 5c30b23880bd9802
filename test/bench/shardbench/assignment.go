package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/certhub/certhub/internal/shard"
)

// AssignmentRow is the fence layout's balance and movement at one fleet
// size, computed with shard.AssignBounded (what every replica runs) over
// nameSets sets of cluster names.
type AssignmentRow struct {
	Clusters int `json:"clusters"`
	Buckets  int `json:"shardBuckets"`
	// Fences is the number of fence Leases in use (mean over the name sets);
	// RenewalsPerSec what renewing them costs the hub.
	Fences         float64 `json:"fenceLeases"`
	RenewalsPerSec float64 `json:"leaseRenewalsPerSecond"`
	// MaxMin is the worst max/min split over 3 replicas; Moved the share of
	// clusters whose owner changes when a 4th replica joins (mean, worst).
	MaxMin                float64 `json:"worstMaxMin"`
	MovedMean, MovedWorst float64
}

const nameSets = 10

// assignment computes a row per (size, layout): per-cluster fences, 32
// buckets (the advice before the default) and the default.
func assignment(sizes []int) []AssignmentRow {
	p3 := []shard.Peer{{ID: "certhub-0"}, {ID: "certhub-1"}, {ID: "certhub-2"}}
	p4 := append(slices.Clone(p3), shard.Peer{ID: "certhub-3"})
	var rows []AssignmentRow
	for _, n := range sizes {
		for _, b := range []int{0, 32, shard.DefaultBuckets} {
			r := AssignmentRow{Clusters: n, Buckets: b}
			for set := range nameSets {
				names := make([]string, n)
				load := map[string]int{}
				for i := range names {
					names[i] = fmt.Sprintf("set%d-cluster-%d", set, i)
					load[shard.FenceKey(names[i], b)]++
				}
				units := make([]shard.Unit, 0, len(load))
				for k, l := range load {
					units = append(units, shard.Unit{Key: k, Load: l})
				}
				a3, a4 := shard.AssignBounded(units, p3, shard.DefaultBalance), shard.AssignBounded(units, p4, shard.DefaultBalance)
				per := map[string]int{}
				moved := 0
				for _, c := range names {
					k := shard.FenceKey(c, b)
					per[a3[k]]++
					if a3[k] != a4[k] {
						moved++
					}
				}
				counts := slices.Collect(func(yield func(int) bool) {
					for _, p := range p3 {
						if !yield(per[p.ID]) {
							return
						}
					}
				})
				r.MaxMin = max(r.MaxMin, float64(slices.Max(counts))/float64(max(slices.Min(counts), 1)))
				share := float64(moved) / float64(n)
				r.MovedMean += share / nameSets
				r.MovedWorst = max(r.MovedWorst, share)
				r.Fences += float64(len(units)) / nameSets
			}
			r.RenewalsPerSec = r.Fences / shard.DefaultRenewInterval.Seconds()
			rows = append(rows, r)
		}
	}
	return rows
}

func printAssignment(w io.Writer, rows []AssignmentRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nP5 ASSIGNMENT BY FLEET SIZE (computed: shard.AssignBounded, %d name sets)\t--shard-buckets\tFENCE LEASES\tLEASE RENEWALS/S\tWORST MAX/MIN (3 replicas)\tMOVED ON 3→4 mean | worst\n", nameSets)
	for _, r := range rows {
		layout := strconv.Itoa(r.Buckets)
		switch r.Buckets {
		case 0:
			layout = "0 (per cluster)"
		case shard.DefaultBuckets:
			layout += " (default)"
		}
		fmt.Fprintf(tw, "%d clusters\t%s\t%.0f\t%.1f\t%.3f\t%.1f %% | %.1f %%\n", r.Clusters, layout, r.Fences, r.RenewalsPerSec, r.MaxMin, 100*r.MovedMean, 100*r.MovedWorst)
	}
	_ = tw.Flush()
}
