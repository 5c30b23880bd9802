// Command shardbench runs multicluster-runtime's experimental
// coordinator/sharded and certhub's internal/shard side by side on the same
// bed — one hub, the same registered clusters, three replica processes named
// like StatefulSet pods — and prints a table: ownership split, SIGKILL
// failover time, SIGTERM handoff time and the hub API request rate at steady
// state. Results are also written as JSON. `make bench` runs it.
//
// Each coordinator runs with its own default timings: certhub's fence Lease
// is 15s/10s/2s (renew every 5s); upstream's is 20s/10s with a hard-coded
// 30s peer TTL.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap/zapcore"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/internal/testbed"
)

// mode is one coordinator configuration under test.
type mode struct {
	Name        string   `json:"name"`
	Args        []string `json:"args"`
	FencePrefix string   `json:"fencePrefix"`
	Failover    bool     `json:"-"` // measure kills (per-cluster fences only)
}

// Result is one mode's numbers.
type Result struct {
	Mode           string             `json:"mode"`
	Clusters       int                `json:"clusters"`
	Split          []int              `json:"split"`
	SplitRatio     float64            `json:"splitMaxOverMin"`
	KillSeconds    []float64          `json:"sigkillFailoverSeconds,omitempty"`
	TermSeconds    []float64          `json:"sigtermHandoffSeconds,omitempty"`
	LeaseReqPerSec float64            `json:"hubLeaseRequestsPerSecond"`
	TotalReqPerSec float64            `json:"hubRequestsPerSecond"`
	RatePerVerb    map[string]float64 `json:"hubLeaseRequestsPerSecondByVerb"`
}

func main() {
	clusters := flag.Int("clusters", 30, "registered clusters (sharing -servers downstream API servers)")
	servers := flag.Int("servers", 3, "downstream API servers")
	kills := flag.Int("kills", 3, "SIGKILL and SIGTERM rounds per coordinator")
	window := flag.Duration("window", 30*time.Second, "steady-state window for the hub request rate")
	out := flag.String("out", "", "write results as JSON here (default test/bench/results/shard-<time>.json)")
	only := flag.String("only", "", "run only the modes whose names contain this")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))

	if err := run(*clusters, *servers, *kills, *window, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "shardbench:", err)
		os.Exit(1)
	}
}

func run(clusters, servers, kills int, window time.Duration, out, only string) error {
	dir, err := os.MkdirTemp("", "shardbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "certhub")
	logf("building certhub")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v: %s", err, b)
	}
	modes := []mode{
		{Name: "upstream coordinator/sharded", Args: []string{"--coordinator=upstream"}, FencePrefix: "mcr-shard-", Failover: true},
		{Name: "certhub shard", Args: []string{"--coordinator=certhub"}, FencePrefix: "certhub-shard-", Failover: true},
		{Name: "certhub shard, 8 buckets", Args: []string{"--coordinator=certhub", "--shard-buckets=8"}, FencePrefix: "certhub-shard-bucket-"},
	}
	var results []Result
	for _, m := range modes {
		if only != "" && !strings.Contains(m.Name, only) {
			continue
		}
		r, err := runMode(m, bin, dir, clusters, servers, kills, window)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		results = append(results, r)
	}
	printTable(results)
	if out == "" {
		out = filepath.Join("test", "bench", "results", "shard-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(map[string]any{"clusters": clusters, "servers": servers, "replicas": 3, "results": results}, "", "  ")
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return err
	}
	logf("wrote %s", out)
	return nil
}

type proc struct {
	id   string
	cmd  *exec.Cmd
	done chan error
}

func runMode(m mode, bin, dir string, clusters, servers, kills int, window time.Duration) (Result, error) {
	res := Result{Mode: m.Name, Clusters: clusters}
	ctx := context.Background()
	logf("[%s] starting hub + %d downstream API servers", m.Name, servers)
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
	procs := map[string]*proc{}
	start := func(id string) (*proc, error) {
		logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano()))
		lf, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		args := append([]string{"run", "--kubeconfig", kubeconfig, "--namespace", bed.HubNamespace(),
			"--cluster-secret-namespace", bed.ArgoNamespace(), "--identity", id,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, m.Args...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &proc{id: id, cmd: cmd, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait(); lf.Close() }()
		procs[id] = p
		return p, nil
	}
	stop := func(p *proc, sig syscall.Signal) {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		delete(procs, p.id)
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
	holders := func() (map[string]string, error) { return fenceHolders(ctx, hub, bed.HubNamespace(), m.FencePrefix) }
	// converged waits until every fence is held by a running replica and the
	// holders have not changed for settle (cold-start and rebalancing churn
	// over), so every mode is measured in its steady state.
	const settle = 20 * time.Second
	converged := func(timeout time.Duration) (map[string]string, error) {
		var h, prev map[string]string
		var since time.Time
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
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
	logf("[%s] 3 replicas started; waiting for every fence to be held", m.Name)
	h, err := converged(3 * time.Minute)
	if err != nil {
		return res, fmt.Errorf("fences never converged: %v", h)
	}
	if res.Split, err = split(ctx, m, h, ids, bed, clusters); err != nil {
		return res, err
	}
	res.SplitRatio = ratio(res.Split)
	logf("[%s] split %v (max/min %.2f); measuring hub requests for %s", m.Name, res.Split, res.SplitRatio, window)

	cs, err := kubernetes.NewForConfig(bed.Hub.Config)
	if err != nil {
		return res, err
	}
	before, err := hubRequests(ctx, cs)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(window)
	after, err := hubRequests(ctx, cs)
	if err != nil {
		return res, err
	}
	secs := time.Since(t0).Seconds()
	res.RatePerVerb = map[string]float64{}
	for k, v := range after {
		d := (v - before[k]) / secs
		if k == "*" {
			res.TotalReqPerSec = d
			continue
		}
		res.LeaseReqPerSec += d
		res.RatePerVerb[k] = d
	}
	logf("[%s] hub: %.1f lease req/s (%v), %.1f req/s in all", m.Name, res.LeaseReqPerSec, res.RatePerVerb, res.TotalReqPerSec)

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
		victim := busiest(h, live())
		var fences []string
		for f, who := range h {
			if who == victim {
				fences = append(fences, f)
			}
		}
		t0 := time.Now()
		stop(procs[victim], sig)
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
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
		logf("[%s] %s of %s (%d fences): taken over after %.1fs", m.Name, sig, victim, len(fences), took)
		if sig == syscall.SIGKILL {
			res.KillSeconds = append(res.KillSeconds, took)
		} else {
			res.TermSeconds = append(res.TermSeconds, took)
		}
		if _, err := start(victim); err != nil {
			return res, err
		}
		// Wait for the restarted replica to get its share back before the next round.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
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

// fenceHolders maps each fence Lease (name without prefix) to its holder ("" if released).
func fenceHolders(ctx context.Context, c client.Client, ns, prefix string) (map[string]string, error) {
	list := &coordinationv1.LeaseList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list.Items {
		if !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		who := ""
		if l.Spec.HolderIdentity != nil {
			who = *l.Spec.HolderIdentity
		}
		out[strings.TrimPrefix(l.Name, prefix)] = who
	}
	return out, nil
}

func busiest(h map[string]string, live map[string]bool) string {
	n := map[string]int{}
	for _, who := range h {
		if live[who] {
			n[who]++
		}
	}
	best, bestN := "", -1
	for _, id := range []string{"cert-hub-0", "cert-hub-1", "cert-hub-2"} {
		if live[id] && n[id] > bestN {
			best, bestN = id, n[id]
		}
	}
	return best
}

// split counts clusters per replica: from per-cluster fences, or, with
// buckets, from each cluster's bucket fence (shard.FenceKey).
func split(ctx context.Context, m mode, h map[string]string, ids []string, bed *testbed.Bed, clusters int) ([]int, error) {
	per := map[string]int{}
	if m.FencePrefix == "certhub-shard-bucket-" {
		// Bucket fences carry the key; clusters map to buckets the way internal/shard does.
		for i := range clusters {
			per[h[strings.TrimPrefix(shard.FenceKey(fmt.Sprintf("c%03d", i), 8), "bucket-")]]++
		}
	} else {
		for _, who := range h {
			per[who]++
		}
	}
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		out = append(out, per[id])
	}
	return out, nil
}

func ratio(split []int) float64 {
	lo, hi := slices.Min(split), slices.Max(split)
	if lo == 0 {
		return float64(hi)
	}
	return float64(hi) / float64(lo)
}

// hubRequests sums the hub API server's apiserver_request_total: by verb for
// Leases, and "*" for everything.
func hubRequests(ctx context.Context, cs *kubernetes.Clientset) (map[string]float64, error) {
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to scrape hub metrics: %w", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		labels := line[:sp]
		out["*"] += v
		if strings.Contains(labels, `resource="leases"`) {
			out[label(labels, "verb")] += v
		}
	}
	return out, sc.Err()
}

func label(s, name string) string {
	i := strings.Index(s, name+`="`)
	if i < 0 {
		return ""
	}
	s = s[i+len(name)+2:]
	return s[:strings.IndexByte(s, '"')]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func printTable(rs []Result) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COORDINATOR\tSPLIT (3 replicas)\tMAX/MIN\tSIGKILL FAILOVER median [all]\tSIGTERM HANDOFF median [all]\tHUB LEASE REQ/S\tHUB REQ/S")
	for _, r := range rs {
		kill, term := "-", "-"
		if len(r.KillSeconds) > 0 {
			kill = fmt.Sprintf("%.1fs %v", median(r.KillSeconds), round(r.KillSeconds))
		}
		if len(r.TermSeconds) > 0 {
			term = fmt.Sprintf("%.1fs %v", median(r.TermSeconds), round(r.TermSeconds))
		}
		fmt.Fprintf(tw, "%s\t%v\t%.2f\t%s\t%s\t%.1f\t%.1f\n", r.Mode, r.Split, r.SplitRatio, kill, term, r.LeaseReqPerSec, r.TotalReqPerSec)
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

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
