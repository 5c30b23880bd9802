package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture/fleet"
)

// stats are the replicas' figures, in ids' order.
type stats struct {
	owned, connected, heap, stacks, goroutines, cpu []float64
}

// sampled are the metrics sample reads.
var sampled = []string{"certhub_shard_owned_clusters", "certhub_engaged_clusters", "go_memstats_heap_inuse_bytes",
	"go_memstats_stack_inuse_bytes", "go_goroutines", "process_cpu_seconds_total"}

// sample scrapes every replica's /metrics for the sampled metrics.
func sample(ctx context.Context, procs map[string]*fleet.Replica, ids []string) (stats, error) {
	var st stats
	for _, id := range ids {
		m, err := procs[id].Metrics(ctx, sampled...)
		if err != nil {
			return st, err
		}
		st.owned = append(st.owned, m.Sum("certhub_shard_owned_clusters", nil))
		st.connected = append(st.connected, m.Sum("certhub_engaged_clusters", nil))
		st.heap = append(st.heap, mib(m.Sum("go_memstats_heap_inuse_bytes", nil)))
		st.stacks = append(st.stacks, mib(m.Sum("go_memstats_stack_inuse_bytes", nil)))
		st.goroutines = append(st.goroutines, m.Sum("go_goroutines", nil))
		st.cpu = append(st.cpu, m.Sum("process_cpu_seconds_total", nil))
	}
	return st, nil
}

// guard logs where the machine's memory is going, and stops the size —
// with the busiest replica's profiles — before the kernel would kill a
// process of the bed.
func (s scale) guard(ctx context.Context, procs map[string]*fleet.Replica, ids []string, pprofAddrs map[string]string, clusters int) error {
	avail, err := benchutil.MemAvailableMiB()
	if err != nil {
		return err
	}
	rss, n, err := benchutil.RSSByCommand()
	if err != nil {
		return err
	}
	st, err := sample(ctx, procs, ids)
	if err != nil {
		benchutil.Logf("scraping the replicas: %v", err)
	}
	line := fmt.Sprintf("memory available %.0f MiB; RSS certhub %.0f MiB (%d), kube-apiserver %.0f MiB (%d), etcd %.0f MiB (%d); replicas owned %v connected %v heap %v MiB stacks %v MiB goroutines %v CPU %v s",
		avail, rss["certhub"], n["certhub"], rss["kube-apiserver"], n["kube-apiserver"], rss["etcd"], n["etcd"], st.owned, st.connected, st.heap, st.stacks, st.goroutines, st.cpu)
	benchutil.Logf("%s", line)
	if avail >= s.minAvail {
		return nil
	}
	if len(st.owned) == len(ids) {
		if err := s.saveProfiles(ctx, ids, pprofAddrs, st.owned, fmt.Sprintf("%d-oom", clusters)); err != nil {
			benchutil.Logf("profiles: %v", err)
		}
	}
	return fmt.Errorf("stopped: the machine's memory ran out (below -min-available-mib %.0f): %s", s.minAvail, line)
}

// saveProfiles saves the heap and goroutine profiles of the replica owning
// most clusters in -profile-dir (if set), as scale-<what>-<kind>.pb.gz.
func (s scale) saveProfiles(ctx context.Context, ids []string, pprofAddrs map[string]string, owned []float64, what string) error {
	if s.profiles == "" {
		return nil
	}
	busiest := ids[slices.Index(owned, slices.Max(owned))]
	for _, kind := range []string{"heap", "goroutine"} {
		path := fmt.Sprintf("%s/scale-%s-%s.pb.gz", s.profiles, what, kind)
		if err := benchutil.Download(ctx, "http://"+pprofAddrs[busiest]+"/debug/pprof/"+kind, path); err != nil {
			return err
		}
		benchutil.Logf("%s profile of %s (%v clusters owned): %s", kind, busiest, slices.Max(owned), path)
	}
	return nil
}
