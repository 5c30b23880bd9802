// Command shardbench runs multicluster-runtime's experimental
// coordinator/sharded and certhub's internal/shard side by side on the same
// bed — one hub, the same registered clusters, three replica processes named
// like StatefulSet pods — and prints a table: ownership split, SIGKILL
// failover time, SIGTERM handoff time and the hub API request rate at steady
// state (P3, P4, P5, P7 of docs/benchmarks.md), and the share of clusters
// that move when a fourth replica joins and leaves again (3→4→3). Results
// are also written as JSON. `make bench` runs it.
//
// Each coordinator runs with its own default timings: certhub's fence Lease
// is 15s/10s/2s (renew every 5s); upstream's is 20s/10s with a hard-coded
// 30s peer TTL.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// buckets is the bucket count of the bucketed modes: the default.
const buckets = shard.DefaultBuckets

// mode is one coordinator configuration under test.
type mode struct {
	Name        string   `json:"name"`
	Args        []string `json:"args"`
	FencePrefix string   `json:"fencePrefix"`
	Failover    bool     `json:"-"`    // measure kills (per-cluster fences only)
	Warm        bool     `json:"warm"` // --shard-standby=<clusters>: every replica keeps warm all it would take over
}

// Result is one mode's numbers.
type Result struct {
	Mode        string    `json:"mode"`
	Clusters    int       `json:"clusters"`
	Split       []int     `json:"split"`
	SplitRatio  float64   `json:"splitMaxOverMin"`
	KillSeconds []float64 `json:"sigkillFailoverSeconds,omitempty"`
	// KillEngagedSeconds runs from the SIGKILL until every cluster is
	// engaged again (connected and fenced) by a live replica, from the
	// replicas' certhub_shard_owned_clusters.
	KillEngagedSeconds []float64 `json:"sigkillEngagedSeconds,omitempty"`
	// Connected is the sum of the replicas' certhub_engaged_clusters at
	// steady state; Watches the downstream API servers' open watches.
	Connected      float64            `json:"connectedClusters"`
	Watches        float64            `json:"downstreamWatches"`
	TermSeconds    []float64          `json:"sigtermHandoffSeconds,omitempty"`
	LeaseReqPerSec float64            `json:"hubLeaseRequestsPerSecond"`
	TotalReqPerSec float64            `json:"hubRequestsPerSecond"`
	RatePerVerb    map[string]float64 `json:"hubLeaseRequestsPerSecondByVerb"`
	// MovedJoin and MovedLeave are the shares of clusters whose owner
	// changed when a 4th replica joined, and when it left again.
	MovedJoin  float64 `json:"movedOn3to4"`
	MovedLeave float64 `json:"movedOn4to3"`
}

func main() {
	clusters := flag.Int("clusters", 150, "registered clusters (sharing -servers downstream API servers)")
	servers := flag.Int("servers", 3, "downstream API servers")
	kills := flag.Int("kills", 5, "SIGKILL and SIGTERM rounds per coordinator")
	window := flag.Duration("window", 30*time.Second, "steady-state window for the hub request rate")
	out := flag.String("out", "", "write results as JSON here (default test/bench/results/shard-<time>.json)")
	only := flag.String("only", "", "run only the modes whose names contain this")
	modes := flag.String("modes", "", "run only these modes (exact names, separated by semicolons: the names hold commas)")
	sizes := flag.String("assignment-sizes", "", "first print the fence layouts' balance and movement, computed, at these fleet sizes (comma-separated)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))

	if *sizes != "" {
		var ns []int
		for _, f := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "shardbench: -assignment-sizes: %q is not a fleet size\n", f)
				os.Exit(2)
			}
			ns = append(ns, n)
		}
		printAssignment(os.Stdout, assignment(ns))
	}
	if err := run(*clusters, *servers, *kills, *window, *out, *only, *modes); err != nil {
		fmt.Fprintln(os.Stderr, "shardbench:", err)
		os.Exit(1)
	}
}

func run(clusters, servers, kills int, window time.Duration, out, only, exact string) error {
	dir, err := os.MkdirTemp("", "shardbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	benchutil.Logf("building certhub")
	bin, err := benchutil.BuildCertHub(dir)
	if err != nil {
		return err
	}
	modes := []mode{
		{Name: "upstream coordinator/sharded", Args: []string{"--shard-coordinator=upstream"}, FencePrefix: "mcr-shard-", Failover: true},
		{Name: "certhub shard, per-cluster fences", Args: []string{"--shard-coordinator=certhub", "--shard-buckets=0"}, FencePrefix: "certhub-shard-", Failover: true},
		{Name: "certhub shard, per-cluster fences, warm standbys", Args: []string{"--shard-coordinator=certhub", "--shard-buckets=0"}, FencePrefix: "certhub-shard-", Failover: true, Warm: true},
		{Name: "certhub shard, " + strconv.Itoa(buckets) + " buckets (default)", Args: []string{"--shard-coordinator=certhub", "--shard-buckets=" + strconv.Itoa(buckets)}, FencePrefix: "certhub-shard-bucket-", Failover: true},
		{Name: "certhub shard, " + strconv.Itoa(buckets) + " buckets (default), warm standbys", Args: []string{"--shard-coordinator=certhub", "--shard-buckets=" + strconv.Itoa(buckets)}, FencePrefix: "certhub-shard-bucket-", Failover: true, Warm: true},
	}
	var results []Result
	for _, m := range modes {
		if only != "" && !strings.Contains(m.Name, only) {
			continue
		}
		if exact != "" && !slices.Contains(strings.Split(exact, ";"), m.Name) {
			continue
		}
		r, err := runMode(m, bin, dir, clusters, servers, kills, window)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		results = append(results, r)
	}
	printTable(results)
	path, err := benchutil.WriteJSON("shard", out, map[string]any{"clusters": clusters, "servers": servers, "replicas": 3, "results": results})
	if err != nil {
		return err
	}
	benchutil.Logf("wrote %s", path)
	return nil
}

func runMode(m mode, bin, dir string, clusters, servers, kills int, window time.Duration) (Result, error) {
	res := Result{Mode: m.Name, Clusters: clusters}
	ctx := context.Background()
	benchutil.Logf("[%s] starting hub + %d downstream API servers", m.Name, servers)
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: servers})
	if err != nil {
		return res, err
	}
	defer func() { _ = bed.Stop() }()
	for i := range clusters {
		if _, err := bed.RegisterAs(ctx, bed.Downstreams[i%servers], fmt.Sprintf("c%03d", i)); err != nil {
			return res, err
		}
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(dir)
	if err != nil {
		return res, err
	}
	procs := map[string]*fleet.Replica{}
	args := slices.Clone(m.Args)
	if m.Warm {
		args = append(args, "--shard-standby="+strconv.Itoa(clusters))
	}
	start := func(id string) (*fleet.Replica, error) {
		metrics, err := fleet.FreeAddr()
		if err != nil {
			return nil, err
		}
		p, err := benchutil.StartReplica(bin, dir, id, append([]string{"--kubeconfig", kubeconfig, "--namespace", bed.HubNamespace(),
			"--cluster-secret-namespace", bed.ArgoNamespace(),
			"--metrics-bind-address", metrics, "--health-probe-bind-address", "0"}, args...)...)
		if err != nil {
			return nil, err
		}
		procs[id] = p
		return p, nil
	}
	stop := func(p *fleet.Replica, sig syscall.Signal) {
		benchutil.Stop(p, sig)
		delete(procs, p.ID)
	}
	defer func() {
		for _, p := range procs {
			stop(p, syscall.SIGTERM)
		}
	}()
	ids := []string{"cert-hub-0", "cert-hub-1", "cert-hub-2"}
	for _, id := range ids {
		if _, err := start(id); err != nil {
			return res, err
		}
	}
	live := func() map[string]bool {
		out := map[string]bool{}
		for id := range procs {
			out[id] = true
		}
		return out
	}
	hub := bed.Hub.Client
	holders := func() (map[string]string, error) {
		return benchutil.FenceHolders(ctx, hub, bed.HubNamespace(), m.FencePrefix)
	}
	// converged waits until every fence is held by a running replica and the
	// holders have not changed for settle (cold-start and rebalancing churn
	// over), so every mode is measured in its steady state.
	const settle = 20 * time.Second
	converged := func(timeout time.Duration) (map[string]string, error) {
		var h, prev map[string]string
		var since time.Time
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			var err error
			if h, err = holders(); err != nil || len(h) == 0 {
				return false, nil
			}
			l := live()
			for _, who := range h {
				if !l[who] {
					prev = nil
					return false, nil
				}
			}
			if m.FencePrefix != "certhub-shard-bucket-" && len(h) != clusters {
				return false, nil
			}
			if !maps.Equal(h, prev) {
				prev, since = h, time.Now()
				return false, nil
			}
			return time.Since(since) >= settle, nil
		})
		return h, err
	}
	benchutil.Logf("[%s] 3 replicas started; waiting for every fence to be held", m.Name)
	h, err := converged(3 * time.Minute)
	if err != nil {
		return res, fmt.Errorf("fences never converged: %v", h)
	}
	own := owners(m, h, clusters)
	res.Split = split(own, ids)
	res.SplitRatio = ratio(res.Split)
	certhub := strings.HasPrefix(m.Name, "certhub")
	if certhub {
		// Connections settle after the fences (a cold cluster connects after its fence is taken).
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
			return benchutil.Owned(ctx, procs) >= clusters, nil
		}); err != nil {
			return res, fmt.Errorf("clusters never all engaged")
		}
	}
	res.Connected = benchutil.SumMetric(ctx, procs, "certhub_engaged_clusters")
	for _, cp := range bed.Downstreams {
		if sm, err := fleet.APIServerMetrics(ctx, cp.Config); err == nil {
			res.Watches += sm.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH"})
		}
	}
	benchutil.Logf("[%s] split %v (max/min %.2f); %v cluster connections in all, %v downstream watches; measuring hub requests for %s",
		m.Name, res.Split, res.SplitRatio, res.Connected, res.Watches, window)

	before, err := benchutil.Requests(ctx, bed.Hub.Config)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(window) // the steady-state window being measured
	after, err := benchutil.Requests(ctx, bed.Hub.Config)
	if err != nil {
		return res, err
	}
	secs := time.Since(t0).Seconds()
	res.RatePerVerb = map[string]float64{}
	for k, v := range benchutil.Delta(before, after) {
		d := v / secs
		res.TotalReqPerSec += d
		if k.Resource == "leases" {
			res.LeaseReqPerSec += d
			res.RatePerVerb[k.Verb] += d
		}
	}
	benchutil.Logf("[%s] hub: %.1f lease req/s (%v), %.1f req/s in all", m.Name, res.LeaseReqPerSec, res.RatePerVerb, res.TotalReqPerSec)

	// P5 movement: a fourth replica joins, then leaves (SIGTERM).
	if _, err := start("cert-hub-3"); err != nil {
		return res, err
	}
	h4, err := converged(3 * time.Minute)
	if err != nil {
		return res, fmt.Errorf("fences never converged on 4 replicas: %v", h4)
	}
	own4 := owners(m, h4, clusters)
	res.MovedJoin = moved(own, own4)
	stop(procs["cert-hub-3"], syscall.SIGTERM)
	h3, err := converged(3 * time.Minute)
	if err != nil {
		return res, fmt.Errorf("fences never converged back on 3 replicas: %v", h3)
	}
	res.MovedLeave = moved(own4, owners(m, h3, clusters))
	benchutil.Logf("[%s] 3→4 moved %.0f%% of clusters (split %v), 4→3 moved %.0f%%", m.Name, 100*res.MovedJoin,
		split(own4, append(slices.Clone(ids), "cert-hub-3")), 100*res.MovedLeave)

	if !m.Failover {
		return res, nil
	}
	for round := range 2 * kills {
		sig := syscall.SIGKILL
		if round >= kills {
			sig = syscall.SIGTERM
		}
		h, err := holders()
		if err != nil {
			return res, err
		}
		victim := benchutil.Busiest(h, live(), ids)
		var fences []string
		for f, who := range h {
			if who == victim {
				fences = append(fences, f)
			}
		}
		t0 := time.Now()
		stop(procs[victim], sig)
		engaged := make(chan float64, 1)
		if certhub && sig == syscall.SIGKILL {
			go func() {
				_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
					return benchutil.Owned(ctx, procs) >= clusters, nil
				})
				engaged <- time.Since(t0).Seconds()
			}()
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			h, err := holders()
			if err != nil {
				return false, nil
			}
			l := live()
			for _, f := range fences {
				if !l[h[f]] {
					return false, nil
				}
			}
			return true, nil
		})
		took := time.Since(t0).Seconds()
		if err != nil {
			return res, fmt.Errorf("%s of %s: its %d fences were never taken over", sig, victim, len(fences))
		}
		benchutil.Logf("[%s] %s of %s (%d fences): taken over after %.1fs", m.Name, sig, victim, len(fences), took)
		if sig == syscall.SIGKILL {
			res.KillSeconds = append(res.KillSeconds, took)
			if certhub {
				e := <-engaged
				res.KillEngagedSeconds = append(res.KillEngagedSeconds, e)
				benchutil.Logf("[%s] SIGKILL of %s: every cluster engaged again after %.1fs", m.Name, victim, e)
			}
		} else {
			res.TermSeconds = append(res.TermSeconds, took)
		}
		if _, err := start(victim); err != nil {
			return res, err
		}
		// Wait for the restarted replica to get its share back before the next round.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			h, err := holders()
			if err != nil {
				return false, nil
			}
			n := 0
			for _, who := range h {
				if who == victim {
					n++
				}
			}
			return n > 0, nil
		}); err != nil {
			return res, fmt.Errorf("restarted %s never got fences back", victim)
		}
		if _, err := converged(3 * time.Minute); err != nil {
			return res, err
		}
	}
	return res, nil
}

// owners maps each cluster to its owner: from its per-cluster fence, or,
// with buckets, from its bucket's fence (shard.FenceKey).
func owners(m mode, h map[string]string, clusters int) map[string]string {
	out := map[string]string{}
	for i := range clusters {
		c := fmt.Sprintf("c%03d", i)
		if m.FencePrefix == "certhub-shard-bucket-" {
			out[c] = h[strings.TrimPrefix(shard.FenceKey(c, buckets), "bucket-")]
		} else {
			out[c] = h[c]
		}
	}
	return out
}

// split counts clusters per replica, in the order of ids.
func split(own map[string]string, ids []string) []int {
	per := map[string]int{}
	for _, who := range own {
		per[who]++
	}
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		out = append(out, per[id])
	}
	return out
}

// moved is the share of clusters whose owner differs between a and b.
func moved(a, b map[string]string) float64 {
	n := 0
	for c, who := range a {
		if b[c] != who {
			n++
		}
	}
	return float64(n) / float64(max(len(a), 1))
}

func ratio(split []int) float64 {
	lo, hi := slices.Min(split), slices.Max(split)
	if lo == 0 {
		return float64(hi)
	}
	return float64(hi) / float64(lo)
}

func printTable(rs []Result) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COORDINATOR\tSPLIT (3 replicas)\tMAX/MIN\tMOVED 3→4\tMOVED 4→3\tSIGKILL FAILOVER median [all]\tENGAGED AFTER SIGKILL median [all]\tSIGTERM HANDOFF median [all]\tCONNECTIONS\tDOWNSTREAM WATCHES\tHUB LEASE REQ/S\tHUB REQ/S")
	for _, r := range rs {
		kill, engaged, term := "-", "-", "-"
		if len(r.KillSeconds) > 0 {
			kill = fmt.Sprintf("%.1fs %v", benchutil.Median(r.KillSeconds), round(r.KillSeconds))
		}
		if len(r.KillEngagedSeconds) > 0 {
			engaged = fmt.Sprintf("%.1fs %v", benchutil.Median(r.KillEngagedSeconds), round(r.KillEngagedSeconds))
		}
		if len(r.TermSeconds) > 0 {
			term = fmt.Sprintf("%.1fs %v", benchutil.Median(r.TermSeconds), round(r.TermSeconds))
		}
		fmt.Fprintf(tw, "%s\t%v\t%.2f\t%.0f%%\t%.0f%%\t%s\t%s\t%s\t%.0f\t%.0f\t%.1f\t%.1f\n", r.Mode, r.Split, r.SplitRatio, 100*r.MovedJoin, 100*r.MovedLeave, kill, engaged, term, r.Connected, r.Watches, r.LeaseReqPerSec, r.TotalReqPerSec)
	}
	_ = tw.Flush()
	fmt.Println()
}

func round(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(int(x*10+0.5)) / 10
	}
	return out
}
