// Command scalebench is `make bench-scale`: the fleet at 1,000, 3,000 and
// 10,000 clusters (issue 34). For each size it starts a fresh bed — a hub
// and -servers downstream API servers —, registers the clusters
// namespace-scoped (one namespace each, round-robin over the servers, as a
// tenant registers its namespace), creates -certs ECDSA Certificates in
// each, starts -replicas replica processes with the shipped defaults
// (128 buckets, 15 s lease) and measures:
//
//   - every Certificate Ready and every cluster engaged, from the replicas'
//     start;
//   - RSS per replica (VmRSS, median of 5 readings) and what it holds;
//   - the hub's requests/s over -window at steady state (after -settle);
//   - SIGKILL of the busiest replica: its fences taken over, and every
//     cluster engaged again (goal: ≤ lease + 5 s);
//   - SIGTERM of the busiest replica: its fences held again (the hand-off,
//     goal ≤ 1 s), and every cluster engaged again.
//
// One row per size, so the growth of each figure with the fleet shows.
// While it waits for Ready it logs where the machine's memory goes, and
// stops a size (with the busiest replica's profiles, -profile-dir) before
// the machine runs out: on 2 cores and 24 GiB, 1,000 clusters take ~6 min,
// 3,000 ~11 min, and 10,000 (on 5 API servers, see serversAt) 66–90 min,
// 32–50 of them to Ready (docs/benchmarks.md). Not in `make bench`. Results
// are also written as JSON.
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
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	issuer      = "scale-ca"
	fencePrefix = "certhub-shard-bucket-"
	// Goals of issue 34.
	goalRSSMiB     = 2048
	goalHubReqPerS = 50
	goalTermS      = 1
)

// Row is one fleet size's numbers.
type Row struct {
	Clusters int `json:"clusters"`
	Servers  int `json:"servers"`
	Replicas int `json:"replicas"`
	// MemoryLimitMiB is the container limit the replicas ran as if under
	// (-memory-limit-mib; their GOMEMLIMIT is 90 % of it).
	MemoryLimitMiB int `json:"memoryLimitMiB"`
	Certs          int `json:"certificates"`
	// RegisterSeconds is the bench's own set-up: namespaces, RBAC, tokens,
	// cluster Secrets and Certificates, before any replica runs.
	RegisterSeconds float64 `json:"registerSeconds"`
	// ReadySeconds runs from the replicas' start to every Certificate
	// Ready; EngagedSeconds to every cluster engaged (may come first).
	ReadySeconds   float64   `json:"readySeconds"`
	EngagedSeconds float64   `json:"engagedSeconds"`
	Owned          []float64 `json:"ownedPerReplica"`
	// Connected is each replica's certhub_engaged_clusters: owned plus
	// kept warm (--shard-standby, 0 by default).
	Connected    []float64 `json:"connectedPerReplica"`
	RSSMiB       []float64 `json:"rssMiB"`
	HeapInuseMiB []float64 `json:"heapInuseMiB"`
	StackMiB     []float64 `json:"stackMiB"`
	// CPUSeconds is each replica's CPU time from its start to the end of
	// the steady-state window (its GC's share included).
	CPUSeconds []float64 `json:"cpuSeconds"`
	Goroutines []float64 `json:"goroutines"`
	// HubReqPerSec is the hub API server's request rate over the window;
	// HubReqByResource splits it.
	HubReqPerSec     float64            `json:"hubRequestsPerSecond"`
	HubReqByResource map[string]float64 `json:"hubRequestsPerSecondByResource"`
	// DownstreamWatch counts the downstream servers' open watches, less
	// those they had before any replica ran (their own).
	DownstreamWatch float64 `json:"downstreamWatches"`
	LeaseSeconds    float64 `json:"leaseSeconds"`
	KillFences      float64 `json:"sigkillFencesTakenSeconds"`
	KillEngaged     float64 `json:"sigkillEngagedSeconds"`
	KillClusters    float64 `json:"sigkillVictimClusters"`
	// KillPeakRSSMiB is each survivor's highest RSS so far (VmHWM) once
	// every cluster is engaged after the SIGKILL: with the victim's share.
	KillPeakRSSMiB []float64 `json:"sigkillSurvivorPeakRSSMiB"`
	// RestartSeconds is how long the replica restarted after the SIGKILL
	// took to own clusters again with every cluster engaged;
	// RestartTransitions how many times fences changed hands meanwhile
	// (its share, taken once, is about fences/replicas) and RestartFences
	// how many it then held.
	RestartSeconds     float64 `json:"sigkillRestartShareBackSeconds"`
	RestartTransitions float64 `json:"sigkillRestartFenceTransitions"`
	RestartFences      float64 `json:"sigkillRestartFencesHeld"`
	TermFences         float64 `json:"sigtermFencesHeldSeconds"`
	TermEngaged        float64 `json:"sigtermEngagedSeconds"`
	TermClusters       float64 `json:"sigtermVictimClusters"`
}

func main() {
	sizes := flag.String("sizes", "1000,3000,10000", "fleet sizes, one bed each (comma-separated)")
	servers := flag.Int("servers", 0, "downstream API servers the clusters share (0: as many as this machine holds at each size, see serversAt)")
	replicas := flag.Int("replicas", 5, "replica processes")
	certs := flag.Int("certs", 2, "Certificates per cluster")
	window := flag.Duration("window", 60*time.Second, "steady-state window for the hub request rate")
	settle := flag.Duration("settle", 30*time.Second, "idle time after every Certificate is Ready, before the window")
	timeout := flag.Duration("timeout", 60*time.Minute, "longest wait for every Certificate Ready, per size")
	out := flag.String("out", "", "write results as JSON here (default test/bench/results/scale-<time>.json)")
	minAvail := flag.Int("min-available-mib", 1536, "stop a size, with what the machine's memory went to, when MemAvailable falls below this while waiting for Ready (the kernel would kill a process of the bed)")
	memLimit := flag.Int("memory-limit-mib", 2048, "each replica runs as in a container with this memory limit: GOMEMLIMIT is 90 % of it, what certhub sets from its cgroup's limit (0: none)")
	profiles := flag.String("profile-dir", "", "if set, save the heap and goroutine profiles of the replica owning most clusters at steady state here (scale-<clusters>-heap.pb.gz, …-goroutine.pb.gz)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-sizes: %q is not a fleet size", f))
		}
		ns = append(ns, n)
	}
	if *profiles != "" {
		if err := os.MkdirAll(*profiles, 0o755); err != nil { // now, not when the first size is done
			fail(fmt.Errorf("-profile-dir: %w", err))
		}
	}
	dir, err := os.MkdirTemp("", "scalebench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	benchutil.Logf("building certhub")
	bin, err := benchutil.BuildCertHub(dir)
	if err != nil {
		fail(err)
	}
	s := scale{bin: bin, dir: dir, servers: *servers, replicas: *replicas, certs: *certs, window: *window, settle: *settle, timeout: *timeout,
		profiles: *profiles, memLimit: *memLimit, minAvail: float64(*minAvail)}
	var rows []Row
	for _, n := range ns {
		r, err := s.run(n)
		if err != nil {
			if len(r.RSSMiB) > 0 && len(r.HeapInuseMiB) > 0 && len(r.StackMiB) > 0 {
				rows = append(rows, r) // a failover round that missed: the row shows what was measured, and the miss
			}
			printTable(rows)
			if len(rows) > 0 {
				if path, werr := benchutil.WriteJSON("scale", *out, map[string]any{"rows": rows, "error": err.Error()}); werr == nil {
					benchutil.Logf("wrote %s", path)
				}
			}
			fail(fmt.Errorf("%d clusters: %w", n, err))
		}
		rows = append(rows, r)
		printTable(rows) // after each size: a long run that dies later keeps what it measured
	}
	path, err := benchutil.WriteJSON("scale", *out, map[string]any{"rows": rows})
	if err != nil {
		fail(err)
	}
	benchutil.Logf("wrote %s", path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scalebench:", err)
	os.Exit(1)
}

// scale holds what every size shares.
type scale struct {
	bin, dir                 string
	servers, replicas, certs int
	window, settle, timeout  time.Duration
	profiles                 string  // -profile-dir
	memLimit                 int     // -memory-limit-mib
	minAvail                 float64 // -min-available-mib
}

// replicaEnv is the replicas' GOMEMLIMIT: 90 % of -memory-limit-mib, what
// certhub sets in a container with that limit.
func (s scale) replicaEnv() []string {
	if s.memLimit <= 0 {
		return nil
	}
	return []string{fmt.Sprintf("GOMEMLIMIT=%dMiB", s.memLimit*9/10)}
}

// serversAt is how many downstream API servers a size runs on: -servers, or
// by default as many as 2 cores and 24 GiB hold beside the replicas: 10 up
// to 3,000 clusters, 5 above. At 10,000 clusters 10 servers ran the machine
// out of memory on 2026-12-05 (1,724 of 20,000 Certificates Ready); 5 held
// them in 10.4 GiB on 2026-12-06, leaving 4.1 GiB available
// (docs/benchmarks.md).
func (s scale) serversAt(clusters int) int {
	switch {
	case s.servers > 0:
		return s.servers
	case clusters <= 3000:
		return 10
	default:
		return 5
	}
}

// run measures one fleet size on a bed of its own.
func (s scale) run(clusters int) (Row, error) {
	servers := s.serversAt(clusters)
	row := Row{Clusters: clusters, Servers: servers, Replicas: s.replicas, MemoryLimitMiB: s.memLimit, Certs: clusters * s.certs, LeaseSeconds: shard.DefaultLeaseDuration.Seconds()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, args, err := benchutil.StartBed(ctx, fmt.Sprintf("%d clusters", clusters), s.dir, servers, issuer)
	if err != nil {
		return row, err
	}
	defer func() { _ = bed.Stop() }()
	t0 := time.Now()
	if err := s.register(ctx, bed, clusters); err != nil {
		return row, err
	}
	row.RegisterSeconds = time.Since(t0).Seconds()
	baseWatches, err := benchutil.DownstreamWatches(ctx, bed)
	if err != nil {
		return row, err
	}
	benchutil.Logf("%d clusters and %d Certificates registered in %.0fs", clusters, row.Certs, row.RegisterSeconds)

	procs := map[string]*fleet.Replica{}
	pprofAddrs := map[string]string{}
	ids := make([]string, s.replicas)
	for i := range ids {
		ids[i] = fmt.Sprintf("cert-hub-%d", i)
	}
	start := func(id string) error {
		addr, err := fleet.FreeAddr()
		if err != nil {
			return err
		}
		a := append(slices.Clone(args), "--metrics-bind-address", addr)
		if s.profiles != "" {
			if pprofAddrs[id], err = fleet.FreeAddr(); err != nil {
				return err
			}
			a = append(a, "--pprof-bind-address", pprofAddrs[id])
		}
		p, err := benchutil.StartReplicaEnv(s.bin, s.dir, id, s.replicaEnv(), a...)
		if err != nil {
			return err
		}
		procs[id] = p
		return nil
	}
	defer func() {
		// All at once: each may take its whole wait (60 s, then SIGKILL)
		// handing back 2,000 clusters, and one after the other that was
		// minutes of a bed idling at its largest.
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { benchutil.Stop(p, syscall.SIGTERM) })
		}
		wg.Wait()
	}()
	t0 = time.Now()
	for _, id := range ids {
		if err := start(id); err != nil {
			return row, err
		}
	}
	benchutil.Logf("%d replicas started; waiting for %d Certificates Ready and %d clusters engaged", s.replicas, row.Certs, clusters)
	engaged := func() bool { return benchutil.Owned(ctx, procs) >= clusters }
	var ready int
	// Each poll lists every Certificate and scrapes every replica: kept rare
	// enough not to load the bed it measures.
	every := max(5*time.Second, time.Duration(clusters/1000)*time.Second)
	err = wait.PollUntilContextTimeout(ctx, every, s.timeout, true, func(context.Context) (bool, error) {
		if row.EngagedSeconds == 0 && engaged() {
			row.EngagedSeconds = time.Since(t0).Seconds()
			benchutil.Logf("every cluster engaged after %.0fs", row.EngagedSeconds)
		}
		if ready, err = readyCount(ctx, bed); err != nil {
			benchutil.Logf("counting Ready Certificates: %v", err)
			return false, nil
		}
		benchutil.Logf("%d of %d Certificates Ready after %.0fs", ready, row.Certs, time.Since(t0).Seconds())
		if err := s.guard(ctx, procs, ids, pprofAddrs, clusters); err != nil {
			return false, err
		}
		return ready >= row.Certs && row.EngagedSeconds > 0, nil
	})
	if err != nil {
		return row, fmt.Errorf("after %.0fs: %d of %d Certificates Ready, %d of %d clusters engaged: %w", time.Since(t0).Seconds(), ready, row.Certs, benchutil.Owned(ctx, procs), clusters, err)
	}
	row.ReadySeconds = time.Since(t0).Seconds()
	benchutil.Logf("all Ready after %.0fs; idling %s, then counting hub requests for %s", row.ReadySeconds, s.settle, s.window)

	time.Sleep(s.settle) // the idle time before the steady state being measured
	if row.HubReqPerSec, row.HubReqByResource, err = hubRate(ctx, bed, s.window); err != nil {
		return row, err
	}
	benchutil.Logf("hub: %.1f req/s %v", row.HubReqPerSec, row.HubReqByResource)
	for _, id := range ids {
		rss, err := benchutil.RSSMedian(procs[id])
		if err != nil {
			return row, err
		}
		row.RSSMiB = append(row.RSSMiB, rss)
	}
	st, err := sample(ctx, procs, ids)
	if err != nil {
		return row, err
	}
	row.Owned, row.Connected, row.HeapInuseMiB, row.StackMiB, row.Goroutines, row.CPUSeconds = st.owned, st.connected, st.heap, st.stacks, st.goroutines, st.cpu
	watches, err := benchutil.DownstreamWatches(ctx, bed)
	if err != nil {
		return row, err
	}
	row.DownstreamWatch = watches - baseWatches
	if err := s.saveProfiles(ctx, ids, pprofAddrs, row.Owned, fmt.Sprint(clusters)); err != nil {
		return row, err
	}
	benchutil.Logf("RSS %v MiB (Go heap in use %v, stacks %v, goroutines %v), owned %v, connected %v, %v downstream watches",
		row.RSSMiB, row.HeapInuseMiB, row.StackMiB, row.Goroutines, row.Owned, row.Connected, row.DownstreamWatch)

	f := failover{ctx: ctx, bed: bed, procs: procs, ids: ids, clusters: clusters, start: start}
	row.KillFences, row.KillEngaged, row.KillClusters, err = f.round(syscall.SIGKILL)
	row.KillPeakRSSMiB = f.peaks
	row.RestartSeconds, row.RestartTransitions, row.RestartFences = f.restart.seconds, f.restart.transitions, f.restart.fences
	if err != nil {
		return row, err
	}
	if row.TermFences, row.TermEngaged, row.TermClusters, err = f.round(syscall.SIGTERM); err != nil {
		return row, err
	}
	return row, nil
}

// register creates clusters namespace-scoped registrations, round-robin over
// the downstream servers, with s.certs Certificates in each namespace.
func (s scale) register(ctx context.Context, bed *testbed.Bed, clusters int) error {
	const workersPerServer = 4
	var wg sync.WaitGroup
	servers := len(bed.Downstreams)
	errs := make(chan error, servers*workersPerServer)
	step := servers * workersPerServer
	for w := range step {
		wg.Go(func() {
			cp := bed.Downstreams[w%servers]
			for i := w; i < clusters; i += step {
				name := fmt.Sprintf("s%05d", i)
				if _, err := bed.RegisterNamespaced(ctx, cp, name, name); err != nil {
					errs <- err
					return
				}
				for j := range s.certs {
					if err := cp.Client.Create(ctx, certificate(name, fmt.Sprintf("c%d", j))); err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
				}
				if i > 0 && i%1000 == 0 {
					benchutil.Logf("registered %d of %d clusters", i, clusters)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func certificate(ns, name string) *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: ctrl.ObjectMeta{Namespace: ns, Name: name},
		Spec: cmapi.CertificateSpec{
			SecretName: name + "-tls", CommonName: name + "." + ns + ".example.com", DNSNames: []string{name + "." + ns + ".example.com"},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
			IssuerRef:  cmmeta.IssuerReference{Kind: cmapi.ClusterIssuerKind, Name: issuer, Group: "cert-manager.io"},
		},
	}
}

// readyCount lists every downstream server's Certificates (in pages) and
// counts the Ready ones.
func readyCount(ctx context.Context, bed *testbed.Bed) (int, error) {
	n := 0
	for _, cp := range bed.Downstreams {
		list := &cmapi.CertificateList{}
		for {
			if err := cp.Client.List(ctx, list, client.Limit(1000), client.Continue(list.Continue)); err != nil {
				return 0, fmt.Errorf("%s: %w", cp.Name, err)
			}
			for i := range list.Items {
				if fixture.IsReady(&list.Items[i]) {
					n++
				}
			}
			if list.Continue == "" {
				break
			}
		}
	}
	return n, nil
}

// hubRate is the hub API server's request rate over window, in all and by
// resource.
func hubRate(ctx context.Context, bed *testbed.Bed, window time.Duration) (float64, map[string]float64, error) {
	before, err := benchutil.Requests(ctx, bed.Hub.Config)
	if err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	time.Sleep(window) // the steady-state window being measured
	after, err := benchutil.Requests(ctx, bed.Hub.Config)
	if err != nil {
		return 0, nil, err
	}
	secs := time.Since(t0).Seconds()
	total, by := 0.0, map[string]float64{}
	for k, v := range benchutil.Delta(before, after) {
		total += v / secs
		by[k.Verb+" "+k.Resource] += v / secs
	}
	for k, v := range by {
		by[k] = float64(int(v*10+0.5)) / 10
	}
	return total, by, nil
}

// failover stops the busiest replica and times the take-over.
type failover struct {
	ctx      context.Context
	bed      *testbed.Bed
	procs    map[string]*fleet.Replica
	ids      []string
	clusters int
	start    func(id string) error
	peaks    []float64 // the survivors' peak RSS (MiB) after the last SIGKILL round
	restart  shareBack // the last restart's share-back
}

// shareBack is how a restarted replica took its share back.
type shareBack struct{ seconds, transitions, fences float64 }

// round sends sig to the replica holding the most fences and returns the
// seconds until its fences are held by live replicas and until every
// cluster is engaged again, and how many clusters it owned; then it starts
// the replica again and waits for the fleet to settle.
func (f *failover) round(sig syscall.Signal) (fences, engaged, owned float64, err error) {
	holders := func() (map[string]string, error) {
		return benchutil.FenceHolders(f.ctx, f.bed.Hub.Client, f.bed.HubNamespace(), fencePrefix)
	}
	live := func() map[string]bool {
		out := map[string]bool{}
		for id := range f.procs {
			out[id] = true
		}
		return out
	}
	h, err := holders()
	if err != nil {
		return 0, 0, 0, err
	}
	victim := benchutil.Busiest(h, live(), f.ids)
	var mine []string
	for b, who := range h {
		if who == victim {
			mine = append(mine, b)
		}
	}
	if m, err := f.procs[victim].Metrics(f.ctx, "certhub_shard_owned_clusters"); err == nil {
		owned = m.Sum("certhub_shard_owned_clusters", nil)
	}
	t0 := time.Now()
	benchutil.Stop(f.procs[victim], sig)
	delete(f.procs, victim)
	held := make(chan float64, 1)
	go func() {
		err := wait.PollUntilContextTimeout(f.ctx, 50*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
			h, err := holders()
			if err != nil {
				return false, nil
			}
			l := live()
			for _, b := range mine {
				if !l[h[b]] {
					return false, nil
				}
			}
			return true, nil
		})
		if f.ctx.Err() != nil {
			held <- 0
			return
		}
		if err != nil {
			held <- -1 // not within the poll's 10 minutes
			return
		}
		held <- time.Since(t0).Seconds()
	}()
	// Polled once a second: each poll asks every replica for one metric.
	if err := wait.PollUntilContextTimeout(f.ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
		return benchutil.Owned(f.ctx, f.procs) >= f.clusters, nil
	}); err != nil {
		f.notePeaks(sig)
		return <-held, -1, owned, fmt.Errorf("%s of %s: not every cluster engaged again within 10 minutes", sig, victim)
	}
	engaged = time.Since(t0).Seconds()
	fences = <-held
	f.notePeaks(sig)
	benchutil.Logf("%s of %s (%d fences, %.0f clusters): fences held again after %.1fs, every cluster engaged after %.1fs", sig, victim, len(mine), owned, fences, engaged)
	before, err := benchutil.FenceTransitions(f.ctx, f.bed.Hub.Client, f.bed.HubNamespace(), fencePrefix)
	if err != nil {
		return fences, engaged, owned, err
	}
	t1 := time.Now()
	if err := f.start(victim); err != nil {
		return fences, engaged, owned, err
	}
	// The restarted replica takes its share back; wait until it owns some
	// and every cluster is engaged, so the next round starts settled.
	err = wait.PollUntilContextTimeout(f.ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
		m, err := f.procs[victim].Metrics(f.ctx, "certhub_shard_owned_clusters")
		if err != nil || m.Sum("certhub_shard_owned_clusters", nil) == 0 {
			return false, nil
		}
		return benchutil.Owned(f.ctx, f.procs) >= f.clusters, nil
	})
	f.restart = shareBack{seconds: time.Since(t1).Seconds()}
	if after, terr := benchutil.FenceTransitions(f.ctx, f.bed.Hub.Client, f.bed.HubNamespace(), fencePrefix); terr == nil {
		f.restart.transitions = float64(after - before)
	}
	if h, herr := holders(); herr == nil {
		for _, who := range h {
			if who == victim {
				f.restart.fences++
			}
		}
	}
	benchutil.Logf("restarted %s: %.0f fence transitions until it held %.0f fences with every cluster engaged, %.1fs after its start",
		victim, f.restart.transitions, f.restart.fences, f.restart.seconds)
	if err != nil {
		return fences, engaged, owned, fmt.Errorf("restarted %s never took its share back", victim)
	}
	return fences, engaged, owned, nil
}

// notePeaks records, after a SIGKILL round, each survivor's highest RSS
// so far (VmHWM), which includes taking over the killed replica's clusters.
func (f *failover) notePeaks(sig syscall.Signal) {
	if sig != syscall.SIGKILL {
		return
	}
	f.peaks = nil
	for _, id := range f.ids {
		if p := f.procs[id]; p != nil {
			if b, err := p.PeakRSS(); err == nil {
				f.peaks = append(f.peaks, float64(b>>20))
			}
		}
	}
	benchutil.Logf("survivors' peak RSS %v MiB", f.peaks)
}

// secs prints a failover time: "–" when the round was not reached, "> 10m"
// when it missed its 10 minutes.
func secs(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 0:
		return "> 10m"
	}
	return fmt.Sprintf("%.1fs", v)
}

func mib(b float64) float64 { return float64(int(b/(1<<20)*10+0.5)) / 10 }

func printTable(rows []Row) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nSCALE (%d replicas, 128 buckets, lease %.0fs)\tSERVERS\tCERTIFICATES\tALL READY AFTER\tOWNED | CONNECTED PER REPLICA\tRSS PER REPLICA max [all] (goal ≤ %d MiB)\tHUB REQ/S (goal ≤ %d)\tSIGKILL: FENCES / ALL ENGAGED (goal ≤ %.0fs)\tSIGTERM HAND-OFF: FENCES (goal ≤ %ds) / ALL ENGAGED\tDOWNSTREAM WATCHES\tGOROUTINES PER REPLICA\tMAX HEAP / STACKS\tCPU S PER REPLICA\n",
		rows[0].Replicas, rows[0].LeaseSeconds, goalRSSMiB, goalHubReqPerS, rows[0].LeaseSeconds+5, goalTermS)
	for _, r := range rows {
		fmt.Fprintf(tw, "%d clusters\t%d\t%d\t%.0fs\t%v | %v\t%.0f MiB %v\t%.1f\t%s / %s (%.0f clusters)\t%s / %s (%.0f clusters)\t%.0f\t%v\t%.0f / %.0f MiB\t%v\n",
			r.Clusters, r.Servers, r.Certs, r.ReadySeconds, r.Owned, r.Connected, slices.Max(r.RSSMiB), r.RSSMiB, r.HubReqPerSec,
			secs(r.KillFences), secs(r.KillEngaged), r.KillClusters, secs(r.TermFences), secs(r.TermEngaged), r.TermClusters, r.DownstreamWatch, r.Goroutines,
			slices.Max(r.HeapInuseMiB), slices.Max(r.StackMiB), r.CPUSeconds)
	}
	_ = tw.Flush()
	last := rows[len(rows)-1]
	keys := slices.Sorted(maps.Keys(last.HubReqByResource))
	fmt.Printf("  hub requests/s at %d clusters by verb and resource:", last.Clusters)
	for _, k := range keys {
		fmt.Printf(" %s %.1f;", k, last.HubReqByResource[k])
	}
	fmt.Println()
	for _, r := range rows {
		if r.RestartSeconds > 0 {
			fmt.Printf("  at %d clusters, the replica restarted after the SIGKILL held %.0f fences with every cluster engaged after %.1fs; fences changed hands %.0f times meanwhile\n",
				r.Clusters, r.RestartFences, r.RestartSeconds, r.RestartTransitions)
		}
		if len(r.KillPeakRSSMiB) > 0 {
			fmt.Printf("  at %d clusters, the survivors' peak RSS once they had taken over the killed replica's clusters: %v MiB (goal ≤ %d)\n", r.Clusters, r.KillPeakRSSMiB, goalRSSMiB)
		}
	}
	if last.MemoryLimitMiB > 0 {
		fmt.Printf("  each replica ran with GOMEMLIMIT=%dMiB, what certhub sets in a container limited to %d MiB\n", last.MemoryLimitMiB*9/10, last.MemoryLimitMiB)
	}
}
