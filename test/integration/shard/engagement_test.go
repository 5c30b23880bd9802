package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// connections is who is connected to which cluster, as each replica's
// metrics say (a cluster with open watches) and as each downstream API
// server counts the Certificate watches it serves.
type connections struct {
	owner     map[string]string          // cluster → fence holder
	connected map[string]map[string]bool // replica → clusters it watches
	standby   map[string]float64         // replica → certhub_shard_standby_clusters
	watches   map[string]float64         // cluster → Certificate watches at its API server
}

func observeConnections(ctx context.Context, rs map[string]*fleet.Replica) (*connections, error) {
	c := &connections{connected: map[string]map[string]bool{}, standby: map[string]float64{}, watches: map[string]float64{}}
	var err error
	if c.owner, err = fenceHolders(ctx); err != nil {
		return nil, err
	}
	for id, r := range rs {
		m, err := r.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		c.connected[id] = map[string]bool{}
		for cl, n := range m.ByLabel("certhub_cluster_watches", "cluster") {
			if n > 0 {
				c.connected[id][cl] = true
			}
		}
		if engaged := m.Sum("certhub_engaged_clusters", nil); int(engaged) != len(c.connected[id]) {
			return nil, fmt.Errorf("%s: certhub_engaged_clusters %v, but it watches %d clusters", id, engaged, len(c.connected[id]))
		}
		c.standby[id] = m.Sum("certhub_shard_standby_clusters", nil)
	}
	for _, cp := range bed.Downstreams {
		m, err := fleet.APIServerMetrics(ctx, cp.Config)
		if err != nil {
			return nil, err
		}
		c.watches[cp.Name] = m.Watches("certificates")
	}
	return c, nil
}

// check returns what is wrong: every cluster owned by a running replica and
// connected there; with standby 0 connected nowhere else; otherwise at most
// as many other connections as the replicas' standby counts; and the API
// server's count equal to the replicas' own.
func (c *connections) check(rs map[string]*fleet.Replica, standby int) error {
	for _, cp := range bed.Downstreams {
		owner := c.owner[cp.Name]
		if rs[owner] == nil {
			return fmt.Errorf("%s owned by %q, not a running replica", cp.Name, owner)
		}
		if !c.connected[owner][cp.Name] {
			return fmt.Errorf("%s: its owner %s has no watch on it", cp.Name, owner)
		}
		n := 0
		for _, set := range c.connected {
			if set[cp.Name] {
				n++
			}
		}
		if standby == 0 && n != 1 {
			return fmt.Errorf("%s is watched by %d replicas, want its owner only", cp.Name, n)
		}
		if float64(n) != c.watches[cp.Name] {
			return fmt.Errorf("%s: %d replicas say they watch it, its API server serves %v Certificate watches", cp.Name, n, c.watches[cp.Name])
		}
	}
	for id, set := range c.connected {
		others := 0
		for cl := range set {
			if c.owner[cl] != id {
				others++
			}
		}
		if float64(others) != c.standby[id] || others > standby {
			return fmt.Errorf("%s watches %d clusters it does not own, reports %v standbys (--shard-standby=%d)", id, others, c.standby[id], standby)
		}
	}
	return nil
}

// waitConnections polls until check passes and returns what it saw.
func waitConnections(t testing.TB, rs map[string]*fleet.Replica, standby int) *connections {
	t.Helper()
	var (
		last    *connections
		lastErr error
	)
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := observeConnections(ctx, rs)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, lastErr = c, c.check(rs, standby)
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("connections never followed ownership: %v", lastErr)
	}
	return last
}

// killAndProbe SIGKILLs victim (removing it from running) and fails the
// test unless its clusters issue again within bound.
func killAndProbe(t testing.TB, running map[string]*fleet.Replica, victim *fleet.Replica, lost []*testbed.ControlPlane, tag string, bound time.Duration) {
	t.Helper()
	delete(running, victim.ID)
	_ = victim.Stop(syscall.SIGKILL)
	took := probe(t, lost, tag)
	t.Logf("SIGKILL of %s (held %d clusters, %s elsewhere): issuing again after %s", victim.ID, len(lost), tag, took.Round(10*time.Millisecond))
	if took > bound {
		t.Errorf("%s failover took %s, want <= %s (the lease duration + %s)", tag, took, bound, bound-fleet.FastTimings.LeaseDuration)
	}
}

func startReplicas(t testing.TB, cfg fleet.Config, ids ...string) map[string]*fleet.Replica {
	t.Helper()
	out := map[string]*fleet.Replica{}
	for _, id := range ids {
		out[id] = cfg.Start(t, id)
	}
	for _, r := range out {
		if err := r.WaitReady(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Each downstream cluster is connected to — cached and watched — by exactly
// its owner: every replica's metrics and every API server's own count of
// Certificate watches agree. A SIGKILLed replica's clusters, cold
// elsewhere, issue again within the lease duration + 5 s; scaling 3→4→3
// keeps every cluster owned and watched by its owner only.
func TestConnectionsFollowOwnership(tt *testing.T) {
	t := fleet.RecordFailures(tt) // the reasons again after the replicas' logs
	_, cfg := prepare(t)
	lease := fleet.FastTimings.LeaseDuration
	running := startReplicas(t, cfg, "conn-0", "conn-1", "conn-2")
	waitConverged(t, running)
	c := waitConnections(t, running, 0)
	t.Logf("owners %v; Certificate watches per cluster %v", c.owner, c.watches)

	victim := busiest(t, running)
	lost := clustersHeldBy(t, victim.ID)
	killAndProbe(t, running, victim, lost, "cold", lease+5*time.Second)
	waitConverged(t, running)
	waitConnections(t, running, 0)

	// 3 → 4 → 3, every cluster owned throughout: a handoff leaves a
	// cluster unowned only between the release and the next owner's claim.
	var mu sync.Mutex
	live := map[string]bool{}
	for id := range running {
		live[id] = true
	}
	liveSet := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(live)
	}
	sampler := fleet.SampleOwnership(bed.Hub.Client, bed.HubNamespace(), liveSet)
	for _, id := range []string{victim.ID, "conn-3"} {
		r := cfg.Start(t, id)
		mu.Lock()
		live[id] = true
		mu.Unlock()
		if err := r.WaitReady(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		running[id] = r
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return len(clustersHeldBy(t, "conn-3")) > 0 && len(clustersHeldBy(t, victim.ID)) > 0, nil
	})
	if err != nil {
		t.Fatal("the 4th replica (or the restarted one) never got clusters")
	}
	c = waitConnections(t, running, 0)
	t.Logf("4 replicas: owners %v", c.owner)
	if err := running["conn-3"].Stop(syscall.SIGTERM); err != nil {
		t.Errorf("conn-3: %v", err)
	}
	mu.Lock()
	delete(live, "conn-3") // exited: it holds nothing any more
	mu.Unlock()
	delete(running, "conn-3")
	waitConverged(t, running)
	c = waitConnections(t, running, 0)
	t.Logf("back to 3 replicas: owners %v", c.owner)
	samples := sampler.Finish()
	var names []string
	for _, cp := range bed.Downstreams {
		names = append(names, cp.Name)
	}
	longest := time.Duration(0)
	for _, g := range fleet.Gaps(samples, names) {
		longest = max(longest, g.Length())
		if g.Length() > 2*time.Second {
			t.Errorf("%s unowned for %s while scaling (%s → %s)", g.Key, g.Length(), g.From.Format("15:04:05.000"), g.To.Format("15:04:05.000"))
		}
	}
	t.Logf("scaling 3→4→3: %d ownership samples, longest unowned stretch %s", len(samples), longest)
	probe(t, bed.Downstreams, "after-scale")
}

// With --shard-standby, each replica also keeps warm the clusters it would take
// over first; after a SIGKILL those clusters issue again within the lease
// duration + 2 s, taken over by a replica that was already connected.
func TestWarmStandbyTakesOver(tt *testing.T) {
	t := fleet.RecordFailures(tt) // the reasons again after the replicas' logs
	_, cfg := prepare(t)
	standby := len(bed.Downstreams)
	cfg.Args = []string{"--shard-standby", fmt.Sprint(standby)}
	lease := fleet.FastTimings.LeaseDuration
	running := startReplicas(t, cfg, "warm-0", "warm-1", "warm-2")
	waitConverged(t, running)
	before := waitConnections(t, running, standby)

	victim := busiest(t, running)
	lost := clustersHeldBy(t, victim.ID)
	for _, cp := range lost {
		var warm []string
		for id, set := range before.connected {
			if id != victim.ID && set[cp.Name] {
				warm = append(warm, id)
			}
		}
		if len(warm) == 0 {
			t.Fatalf("%s (owned by %s) is warm nowhere else: %v", cp.Name, victim.ID, before.connected)
		}
		t.Logf("%s: owned by %s, warm on %v", cp.Name, victim.ID, warm)
	}
	killAndProbe(t, running, victim, lost, "warm", lease+2*time.Second)
	after := waitConnections(t, running, standby)
	for _, cp := range lost {
		if owner := after.owner[cp.Name]; !before.connected[owner][cp.Name] {
			t.Errorf("%s was taken over by %s, which was not warm for it (warm before: %v)", cp.Name, owner, before.connected)
		}
	}
	ids := slices.Sorted(maps.Keys(running))
	t.Logf("after the failover: owners %v, watched by %v (%v)", after.owner, after.connected, ids)
}
