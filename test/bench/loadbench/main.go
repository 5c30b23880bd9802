// Command loadbench measures certhub at scale on the test bed (P2 and P6 of
// docs/benchmarks.md) and prints one table per measurement:
//
//   - P2 throughput: -certs ECDSA Certificates created at once across
//     -clusters downstream API servers, served by 3 replica processes: wall
//     time from the first create until all are Ready, certs/s, and, in the
//     same run, the raw rate of the pki calls alone (key generation +
//     signing, one goroutine per core) so the ratio to this machine's limit
//     is visible; also the downstream API writes per issued certificate.
//   - P9 mass re-issue: after P2, the CA is rotated (one wave) and every
//     Certificate re-issued: time from the first to the last, certs/s beside
//     the same run's raw pki rate; then again with the replicas restarted
//     with --issuance-rate (-rotation-rate): the measured rate and the spread
//     of completion times.
//   - The bed's ceiling: after P9, with the replicas stopped, a minimal
//     client makes the writes certhub makes per certificate (Secret apply,
//     status update, Event) after a key generation and a signature, for
//     every Certificate, at 12 and at 32 workers: P2 and P9 are printed as
//     a fraction of the best. CPU seconds per certificate of the replicas,
//     the API servers, etcd and the bench are printed beside P9 and it.
//   - The peer: then cert-manager v1.21's own controllers, one instance per
//     cluster with a CA ClusterIssuer, issue as many Certificates created
//     at once (P2's work) and re-issue them all (`cmctl renew`, P9's work),
//     on the same bed in the same run.
//   - P6 memory: the RSS of one replica process serving 1, 10, 50 and 100
//     clusters (namespace-scoped registrations sharing two API servers), 10
//     Certificates each, all issued and idle; MiB per cluster is the slope.
//   - P6' sharded memory: -sharded-clusters namespace-scoped registrations
//     (10 Certificates each) over 4 API servers, served by 3 replica
//     processes: each replica's RSS, the clusters it is connected to, and
//     the downstream API servers' open watches in all (less the benchmark's
//     own) — each replica should hold about a third.
//
// Results are also written as JSON. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuer = "bench-ca"

// Throughput is P2's result.
type Throughput struct {
	Certs, Clusters, Replicas int
	WallSeconds               float64            `json:"wallSeconds"`
	PerSec                    float64            `json:"certsPerSecond"`
	RawPerSec                 float64            `json:"rawPkiCertsPerSecond"`
	RawSerialPerSec           float64            `json:"rawPkiCertsPerSecondOneCore"`
	RatioToRaw                float64            `json:"ratioToRaw"`
	WritesPerCert             float64            `json:"downstreamWritesPerCertificate"`
	WritesBy                  map[string]float64 `json:"downstreamWritesPerCertificateBy"`
	// CPUPerCert is the CPU seconds per certificate each kind of process
	// used from the first create until all were Ready.
	CPUPerCert map[string]float64 `json:"cpuSecondsPerCertificate"`
	// Ceiling is the bed's own rate, measured after P9 in the same run.
	Ceiling []Ceiling `json:"ceiling"`
	// Peer is cert-manager in every cluster doing P2's and P9's work, after
	// the ceiling in the same run.
	Peer *Peer `json:"peer,omitempty"`
}

// best is the highest ceiling measured (0 when none was).
func (tp Throughput) best() float64 {
	b := 0.0
	for _, c := range tp.Ceiling {
		b = max(b, c.PerSec)
	}
	return b
}

// ofCeiling is perSec as a fraction of the run's ceiling, for the tables.
func (tp Throughput) ofCeiling(perSec float64) string {
	if tp.best() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100*perSec/tp.best())
}

// Rotation is a row of P9: a CA rotation re-issuing every Certificate of P2.
type Rotation struct {
	Certs, Clusters, Replicas int
	// IssuanceRate is the replicas' --issuance-rate (0: none).
	IssuanceRate float64 `json:"issuanceRate"`
	// WallSeconds: from the first Certificate re-issued to the last;
	// FromTriggerSeconds from the rotation asked for to the last.
	WallSeconds        float64 `json:"wallSeconds"`
	FromTriggerSeconds float64 `json:"fromTriggerSeconds"`
	PerSec             float64 `json:"certsPerSecond"`
	// P50, P90, Max: completion times after the first, seconds.
	P50, P90, Max float64
	// CPUPerCert is the CPU seconds per certificate each kind of process
	// used from the rotation's start until the last was re-issued.
	CPUPerCert map[string]float64 `json:"cpuSecondsPerCertificate"`
}

// cpuKinds are the processes whose CPU the P9 and ceiling rows account.
var cpuKinds = []string{"certhub", "kube-apiserver", "etcd", "bench"}

// cpuColumn prints CPU seconds per certificate by kind, in milliseconds.
func cpuColumn(m map[string]float64) string {
	if m == nil {
		return "-"
	}
	total := 0.0
	for _, k := range cpuKinds {
		total += m[k]
	}
	return fmt.Sprintf("%.1f (hub %.1f, apiservers %.1f, etcd %.1f, bench %.1f)", 1000*total, 1000*m["certhub"], 1000*m["kube-apiserver"], 1000*m["etcd"], 1000*m["bench"])
}

// ShardedMemory is P6'.
type ShardedMemory struct {
	Clusters int `json:"clusters"`
	Certs    int `json:"certificates"`
	Replicas int `json:"replicas"`
	// RSSMiB and Connected are per replica: the median of 5 VmRSS readings
	// and certhub_engaged_clusters; Standby is --shard-standby.
	RSSMiB    []float64 `json:"rssMiB"`
	Connected []float64 `json:"connectedClusters"`
	// SteadyRSSMiB: the same readings after steadyIdle without work, once
	// the Go runtime's periodic GC (every 2 minutes when none ran) has
	// collected what the issuance burst left and the scavenger has returned
	// it: what an idle replica holds for as long as it stays idle. RSSMiB,
	// 15 s after the last Certificate became Ready, still holds the burst.
	SteadyRSSMiB []float64 `json:"steadyRssMiB"`
	// HeapInuseMiB is each replica's go_memstats_heap_inuse_bytes: what of
	// the RSS is live Go heap (the rest is GC headroom, stacks, runtime).
	HeapInuseMiB []float64 `json:"heapInuseMiB"`
	// StackMiB and Goroutines: go_memstats_stack_inuse_bytes, go_goroutines.
	StackMiB   []float64 `json:"stackInuseMiB"`
	Goroutines []float64 `json:"goroutines"`
	Standby    int       `json:"standby"`
	Buckets    int       `json:"shardBuckets"`
	// Watches are the downstream API servers' open watches that the
	// replicas hold (apiserver_longrunning_requests, less the benchmark's own).
	Watches float64 `json:"downstreamWatches"`
	// SetupSeconds: from the replicas' start until every Certificate was Ready.
	SetupSeconds float64 `json:"readySeconds"`
}

// Memory is one row of P6.
type Memory struct {
	Clusters int     `json:"clusters"`
	Certs    int     `json:"certificates"`
	RSSMiB   float64 `json:"rssMiB"`
}

func main() {
	certs := flag.Int("certs", 1000, "P2: Certificates created at once")
	clusters := flag.Int("clusters", 10, "P2: downstream clusters (one API server each)")
	steps := flag.String("memory-steps", "1,10,50,100", "P6: cluster counts (comma-separated; empty skips P6)")
	perCluster := flag.Int("memory-certs", 10, "P6: Certificates per cluster")
	only := flag.String("only", "", "run only P2 (with P9), P6 or P6s (P6', sharded)")
	sharded := flag.Int("sharded-clusters", 1000, "P6': clusters served by 3 replicas (0 skips P6')")
	standby := flag.Int("sharded-standby", 0, "P6': --shard-standby of each replica")
	shardBuckets := flag.Int("sharded-buckets", 32, "P6': --shard-buckets of each replica (0: a fence per cluster)")
	flag.StringVar(&apiserverProfiles, "apiserver-profile-dir", "", "P2, P9 (unlimited) and the ceiling: save a CPU profile of the first downstream API server, over "+profileWindow.String()+" of each run (P9's from 5 s after the rotation is asked), here")
	pprofDir := flag.String("pprof-dir", "", "P6': save each replica's heap profile (--pprof-bind-address) here after idling (go tool pprof -sample_index=inuse_space)")
	rate := flag.Float64("rotation-rate", 20, "P9: --issuance-rate of the second rotation (0 skips it)")
	out := flag.String("out", "", "JSON output (default test/bench/results/load-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	benchutil.Logf("building certhub")
	bin, err := benchutil.BuildCertHub(dir)
	if err != nil {
		fail(err)
	}
	res := map[string]any{}
	if *only == "" || *only == "P2" {
		tp, rots, err := throughput(bin, dir, *certs, *clusters, *rate)
		if err != nil {
			fail(fmt.Errorf("P2: %w", err))
		}
		res["throughput"], res["rotation"] = tp, rots
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nP2 THROUGHPUT (ECDSA P-256, CA issuer)\tCLUSTERS\tREPLICAS\tWALL\tCERTS/S\tOF THE BED'S CEILING\tRAW PKI CERTS/S (all cores | 1 core)\tRATIO TO RAW\tDOWNSTREAM WRITES/CERT\tCPU ms PER CERT")
		fmt.Fprintf(tw, "%d Certificates created at once\t%d\t%d\t%.1fs\t%.1f\t%s\t%.0f | %.0f\t%.2f\t%.2f\t%s\n", tp.Certs, tp.Clusters, tp.Replicas,
			tp.WallSeconds, tp.PerSec, tp.ofCeiling(tp.PerSec), tp.RawPerSec, tp.RawSerialPerSec, tp.RatioToRaw, tp.WritesPerCert, cpuColumn(tp.CPUPerCert))
		for _, c := range tp.Ceiling {
			fmt.Fprintf(tw, "  ceiling: the same writes by a minimal client, %d workers, no hub\t%d\t-\t-\t%.1f\t\t\t\t%.2f\t%s\n", c.Workers, tp.Clusters, c.PerSec, c.WritesPerCert, cpuColumn(c.CPUPerCert))
		}
		if pr := tp.Peer; pr != nil {
			fmt.Fprintf(tw, "  peer: cert-manager v1.21 in every cluster, %d Certificates created at once\t%d\t%d instances\t%.1fs\t%.1f\t%s\t\t\t%.2f\t%s, cert-manager in the bench process\n", pr.Certs, pr.Clusters, pr.Clusters, pr.IssueWallSeconds, pr.IssuePerSec, tp.ofCeiling(pr.IssuePerSec), pr.IssueWritesPerCert, cpuColumn(pr.IssueCPUPerCert))
		}
		_ = tw.Flush()
		fmt.Printf("  writes per certificate: %v\n", tp.WritesBy)
		tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nP9 MASS RE-ISSUE (CA rotated, one wave)\tCLUSTERS\tREPLICAS\t--issuance-rate\tWALL (first → last)\tCERTS/S\tOF THE BED'S CEILING\tASKED → LAST\tCOMPLETION p50 | p90 | max\tRAW PKI CERTS/S (same run)\tCPU ms PER CERT")
		for _, r := range rots {
			fmt.Fprintf(tw, "%d Certificates, already Ready\t%d\t%d\t%v\t%.1fs\t%.1f\t%s\t%.1fs\t%.1fs | %.1fs | %.1fs\t%.0f\t%s\n", r.Certs, r.Clusters, r.Replicas,
				r.IssuanceRate, r.WallSeconds, r.PerSec, tp.ofCeiling(r.PerSec), r.FromTriggerSeconds, r.P50, r.P90, r.Max, tp.RawPerSec, cpuColumn(r.CPUPerCert))
		}
		for _, c := range tp.Ceiling {
			fmt.Fprintf(tw, "  ceiling: the same writes by a minimal client, %d workers\t%d\t-\t-\t-\t%.1f\t\t\t\t\t%s\n", c.Workers, tp.Clusters, c.PerSec, cpuColumn(c.CPUPerCert))
		}
		if pr := tp.Peer; pr != nil {
			fmt.Fprintf(tw, "  peer: cert-manager v1.21 in every cluster, renewed (cmctl renew)\t%d\t%d instances\t-\t%.1fs\t%.1f\t%s\t%.1fs\t\t\t%s, cert-manager in the bench process\n", pr.Clusters, pr.Clusters,
				pr.RenewWallSeconds, pr.RenewPerSec, tp.ofCeiling(pr.RenewPerSec), pr.RenewFromTriggerSeconds, cpuColumn(pr.CPUPerCert))
			fmt.Printf("  peer's writes per certificate: %.2f %v (one status PUT each is the renew trigger)\n", pr.WritesPerCert, pr.WritesBy)
		}
		_ = tw.Flush()
	}
	if (*only == "" || *only == "P6") && *steps != "" {
		var ns []int
		for _, s := range splitComma(*steps) {
			var n int
			if _, err := fmt.Sscan(s, &n); err != nil {
				fail(fmt.Errorf("-memory-steps: %w", err))
			}
			ns = append(ns, n)
		}
		rows, err := memory(bin, dir, ns, *perCluster)
		if err != nil {
			fail(fmt.Errorf("P6: %w", err))
		}
		res["memory"] = rows
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nP6 MEMORY (1 replica, idle)\tCERTIFICATES\tRSS\tMiB PER CLUSTER (slope from the first row)")
		for i, r := range rows {
			per := "-"
			if i > 0 {
				per = fmt.Sprintf("%.2f", (r.RSSMiB-rows[0].RSSMiB)/float64(r.Clusters-rows[0].Clusters))
			}
			fmt.Fprintf(tw, "%d clusters\t%d\t%.1f MiB\t%s\n", r.Clusters, r.Certs, r.RSSMiB, per)
		}
		_ = tw.Flush()
	}
	if (*only == "" || *only == "P6s") && *sharded > 0 {
		m, err := memorySharded(bin, dir, *pprofDir, *sharded, *perCluster, *standby, *shardBuckets)
		if err != nil {
			fail(fmt.Errorf("P6': %w", err))
		}
		res["shardedMemory"] = m
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "\nP6' MEMORY (3 replicas, --shard-buckets=%d)\tCERTIFICATES\t--standby\tRSS PER REPLICA 15s / %s IDLE\tCONNECTED PER REPLICA\tMiB PER CLUSTER PER REPLICA (max RSS / clusters) 15s / %s\tDOWNSTREAM WATCHES\tREADY AFTER\n", m.Buckets, steadyIdle, steadyIdle)
		fmt.Fprintf(tw, "%d clusters\t%d\t%d\t%v / %v MiB\t%v\t%.2f / %.2f\t%.0f (%.2f per cluster)\t%.0fs\n", m.Clusters, m.Certs, m.Standby, m.RSSMiB, m.SteadyRSSMiB, m.Connected,
			slices.Max(m.RSSMiB)/float64(m.Clusters), slices.Max(m.SteadyRSSMiB)/float64(m.Clusters), m.Watches, m.Watches/float64(m.Clusters), m.SetupSeconds)
		_ = tw.Flush()
	}
	path, err := benchutil.WriteJSON("load", *out, res)
	if err != nil {
		fail(err)
	}
	benchutil.Logf("wrote %s", path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadbench:", err)
	os.Exit(1)
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// apiserverProfiles is -apiserver-profile-dir; profileWindow how long each
// profile runs.
var apiserverProfiles string

const profileWindow = 4 * time.Second

// profileServer starts a CPU profile of the first downstream API server
// over the next profileWindow, saved as apiserver-<what>.pb.gz in
// -apiserver-profile-dir when that is set; the returned func waits for it.
func profileServer(ctx context.Context, bed *testbed.Bed, what string) (wait func()) {
	return profileServerAfter(ctx, bed, what, 0)
}

// profileServerAfter is profileServer starting after delay.
func profileServerAfter(ctx context.Context, bed *testbed.Bed, what string, delay time.Duration) (wait func()) {
	if apiserverProfiles == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		cp := bed.Downstreams[0]
		path := filepath.Join(apiserverProfiles, "apiserver-"+what+".pb.gz")
		if err := benchutil.APIServerProfile(ctx, cp.Config, profileWindow, path); err != nil {
			benchutil.Logf("%s: no API server profile: %v", what, err)
			return
		}
		benchutil.Logf("%s: %s's CPU profile over %s: %s", what, cp.Name, profileWindow, path)
	}()
	return func() { <-done }
}

// startBed is benchutil.StartBed with the bench's CA ClusterIssuer.
func startBed(ctx context.Context, what, dir string, downstreams int) (*testbed.Bed, []string, error) {
	return benchutil.StartBed(ctx, what, dir, downstreams, issuer)
}

func throughput(bin, dir string, certs, clusters int, rate float64) (Throughput, []Rotation, error) {
	tp := Throughput{Certs: certs, Clusters: clusters, Replicas: 3}
	var rots []Rotation
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, args, err := startBed(ctx, "P2", dir, clusters)
	if err != nil {
		return tp, rots, err
	}
	defer func() { _ = bed.Stop() }()
	const ns = "load"
	watchers := make([]*benchutil.ReadyWatcher, clusters)
	for i, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			return tp, rots, err
		}
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return tp, rots, err
		}
		if watchers[i], err = benchutil.WatchReady(ctx, cp.Config, ns); err != nil {
			return tp, rots, err
		}
	}
	// CA rotations (P9) with short phases: the measurement is the re-issue.
	args = append(args, "--rotation-soak=1s", "--rotation-pause=1s", "--rotation-grace=1s", "--rotation-deadline=30m")
	var running []*fleet.Replica
	start3 := func(extra ...string) error {
		for i := range 3 {
			p, err := benchutil.StartReplica(bin, dir, fmt.Sprintf("cert-hub-%d", i), append(slices.Clone(args), extra...)...)
			if err != nil {
				return err
			}
			running = append(running, p)
		}
		return nil
	}
	defer func() {
		for _, p := range running {
			benchutil.Stop(p, syscall.SIGTERM)
		}
	}()
	if err := start3(); err != nil {
		return tp, rots, err
	}
	// Warm up: one Certificate per cluster, so every cluster is owned and engaged.
	benchutil.Logf("P2: 3 replicas started; warming up every cluster")
	for i, cp := range bed.Downstreams {
		if err := cp.Client.Create(ctx, cert(ns, "warmup", cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
			return tp, rots, err
		}
		select {
		case <-watchers[i].Wait(ns, "warmup"):
		case <-time.After(3 * time.Minute):
			return tp, rots, fmt.Errorf("warm-up Certificate in %s never Ready", cp.Name)
		}
	}
	fences, err := fleet.FenceHolders(ctx, bed.Hub.Client, bed.HubNamespace())
	if err != nil {
		return tp, rots, err
	}
	owners := map[string]string{}
	for c, f := range fences.ByKey {
		owners[c] = f.Holder
	}
	benchutil.Logf("P2: owners %v", owners)

	before := make([]map[benchutil.Request]float64, clusters)
	for i, cp := range bed.Downstreams {
		if before[i], err = benchutil.Requests(ctx, cp.Config); err != nil {
			return tp, rots, err
		}
	}
	benchutil.Logf("P2: creating %d Certificates across %d clusters", certs, clusters)
	cpuBefore, err := benchutil.CPUSeconds()
	if err != nil {
		return tp, rots, err
	}
	profiled := profileServer(ctx, bed, "p2")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, clusters)
	for i, cp := range bed.Downstreams {
		wg.Go(func() {
			for j := i; j < certs; j += clusters {
				if err := cp.Client.Create(ctx, cert(ns, fmt.Sprintf("load-%04d", j), cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return tp, rots, err
		}
	}
	created := time.Since(start)
	for j := range certs {
		select {
		case <-watchers[j%clusters].Wait(ns, fmt.Sprintf("load-%04d", j)):
		case <-time.After(10 * time.Minute):
			return tp, rots, fmt.Errorf("certificate load-%04d never Ready", j)
		}
	}
	wall := time.Since(start)
	profiled()
	tp.WallSeconds, tp.PerSec = wall.Seconds(), float64(certs)/wall.Seconds()
	if cpuAfter, err := benchutil.CPUSeconds(); err == nil {
		tp.CPUPerCert = benchutil.CPUDelta(cpuBefore, cpuAfter, certs, cpuKinds...)
	}
	benchutil.Logf("P2: all %d Ready after %.1fs (creating took %.1fs): %.1f certs/s", certs, wall.Seconds(), created.Seconds(), tp.PerSec)

	time.Sleep(2 * time.Second) // let the last status writes and events land before counting
	total := map[benchutil.Request]float64{}
	for i, cp := range bed.Downstreams {
		after, err := benchutil.Requests(ctx, cp.Config)
		if err != nil {
			return tp, rots, err
		}
		for k, v := range benchutil.Delta(before[i], after) {
			total[k] += v
		}
	}
	tp.WritesPerCert, tp.WritesBy = benchutil.WritesPerCert(total, certs)

	// The same run's physical limit: the pki calls alone, one goroutine per core.
	benchutil.Logf("P2: measuring the raw pki rate")
	tp.RawSerialPerSec, tp.RawPerSec, err = rawPKI()
	if err != nil {
		return tp, rots, err
	}
	tp.RatioToRaw = tp.PerSec / tp.RawPerSec

	// P9: every Certificate re-issued by a CA rotation, without a budget …
	r, err := rotate(ctx, bed, ns, issuer+"-2", certs, 2, 0)
	if err != nil {
		return tp, rots, fmt.Errorf("P9: %w", err)
	}
	rots = append(rots, r)
	if rate > 0 {
		// … and with --issuance-rate: the replicas restart with it.
		for _, p := range running {
			benchutil.Stop(p, syscall.SIGTERM)
		}
		running = nil
		if err := start3(fmt.Sprintf("--issuance-rate=%v", rate)); err != nil {
			return tp, rots, err
		}
		time.Sleep(5 * time.Second) // the replicas take their fences back before the rotation starts
		if r, err = rotate(ctx, bed, ns, issuer+"-3", certs, 3, rate); err != nil {
			return tp, rots, fmt.Errorf("P9 with --issuance-rate: %w", err)
		}
		rots = append(rots, r)
	}
	// The ceiling: the replicas stop, and a minimal client makes the same
	// writes against the same bed.
	for _, p := range running {
		benchutil.Stop(p, syscall.SIGTERM)
	}
	running = nil
	if tp.Ceiling, err = ceiling(ctx, bed, ns); err != nil {
		return tp, rots, fmt.Errorf("ceiling: %w", err)
	}
	pr, err := peer(ctx, bed, dir, ns, certs)
	if err != nil {
		return tp, rots, fmt.Errorf("cert-manager in every cluster: %w", err)
	}
	tp.Peer = &pr
	return tp, rots, nil
}

// rawPKI runs key generation + signing (cert-manager's pki, ECDSA P-256, a
// CA issuer's signing call) as Go benchmarks: on one goroutine, and on one
// per core. It returns certificates per second for each.
func rawPKI() (serial, parallel float64, err error) {
	caKey, ca, _, err := newCA("bench CA")
	if err != nil {
		return 0, 0, err
	}
	crt := cert("bench", "raw", cmapi.ECDSAKeyAlgorithm, 256)
	one := func() error {
		key, err := pki.GeneratePrivateKeyForCertificate(crt)
		if err != nil {
			return err
		}
		tmpl, err := pki.CertificateTemplateFromCertificate(crt)
		if err != nil {
			return err
		}
		_, _, err = pki.SignCertificate(tmpl, ca, key.Public(), caKey)
		return err
	}
	var benchErr error
	var mu sync.Mutex
	r := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			if err := one(); err != nil {
				benchErr = err
			}
		}
	})
	p := testing.Benchmark(func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(); err != nil {
					mu.Lock()
					benchErr = err
					mu.Unlock()
				}
			}
		})
	})
	perSec := func(r testing.BenchmarkResult) float64 { return float64(r.N) / r.T.Seconds() }
	return perSec(r), perSec(p), benchErr
}

func memory(bin, dir string, steps []int, perCluster int) ([]Memory, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const servers = 2
	bed, args, err := startBed(ctx, "P6", dir, servers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = bed.Stop() }()
	watchers := make([]*benchutil.ReadyWatcher, servers)
	for i, cp := range bed.Downstreams {
		if watchers[i], err = benchutil.WatchReady(ctx, cp.Config, ""); err != nil {
			return nil, err
		}
	}
	var rows []Memory
	registered := 0
	for _, n := range steps {
		for ; registered < n; registered++ {
			name := fmt.Sprintf("m%03d", registered)
			cp := bed.Downstreams[registered%servers]
			if _, err := bed.RegisterNamespaced(ctx, cp, name, name); err != nil {
				return nil, err
			}
			for j := range perCluster {
				if err := cp.Client.Create(ctx, cert(name, fmt.Sprintf("c%02d", j), cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
					return nil, err
				}
			}
		}
		p, err := benchutil.StartReplica(bin, dir, "cert-hub-0", args...)
		if err != nil {
			return nil, err
		}
		want := n * perCluster
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
			return watchers[0].Ready()+watchers[1].Ready() >= want, nil
		})
		if err != nil {
			benchutil.Stop(p, syscall.SIGTERM)
			return nil, fmt.Errorf("%d clusters: only %d of %d Certificates Ready", n, watchers[0].Ready()+watchers[1].Ready(), want)
		}
		// Idle: every Certificate issued. Let the Go runtime settle, then take
		// the median of 5 readings a second apart.
		time.Sleep(15 * time.Second)
		rss, err := benchutil.RSSReadings(p)
		benchutil.Stop(p, syscall.SIGTERM)
		if err != nil {
			return nil, err
		}
		row := Memory{Clusters: n, Certs: want, RSSMiB: benchutil.Median(rss)}
		benchutil.Logf("P6: %d clusters, %d Certificates: RSS %.1f MiB (readings %v)", n, want, row.RSSMiB, rss)
		rows = append(rows, row)
	}
	return rows, nil
}

func cert(ns, name string, alg cmapi.PrivateKeyAlgorithm, size int) *cmapi.Certificate {
	c := fixture.Certificate(ns, name, issuer)
	c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: alg, Size: size}
	return c
}

// rotate rotates the CA of issuer to a fresh key pair (one wave: no wave
// labels) and waits until every Certificate in ns but the warm-up has
// revision want and is Ready, polling their status; it returns P9's row and
// finishes the rotation as a user would (spec.ca.secretName → the new
// Secret, annotation removed), so a next rotation starts from the new CA.
func rotate(ctx context.Context, bed *testbed.Bed, ns, next string, certs, want int, rate float64) (Rotation, error) {
	r := Rotation{Certs: certs, Clusters: len(bed.Downstreams), Replicas: 3, IssuanceRate: rate}
	if _, err := bed.CreateCASecret(ctx, next, next); err != nil {
		return r, err
	}
	setIssuer := func(mutate func(*cmapi.ClusterIssuer)) error {
		ci := &cmapi.ClusterIssuer{}
		if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Name: issuer}, ci); err != nil {
			return err
		}
		patch := client.MergeFrom(ci.DeepCopy())
		mutate(ci)
		return bed.Hub.Client.Patch(ctx, ci, patch)
	}
	if err := setIssuer(func(ci *cmapi.ClusterIssuer) {
		metav1.SetMetaDataAnnotation(&ci.ObjectMeta, hubapi.NextCAAnnotation, next)
	}); err != nil {
		return r, err
	}
	triggered := time.Now()
	benchutil.Logf("P9: rotating %s to %s (--issuance-rate=%v)", issuer, next, rate)
	if rate == 0 {
		// The same writes as the ceiling's, and no Creates: the wave's
		// first re-issues come ~4 s after the ask.
		defer profileServerAfter(ctx, bed, "p9", 5*time.Second)()
	}
	cpuBefore, err := benchutil.CPUSeconds()
	if err != nil {
		return r, err
	}
	done, err := waitRevision(ctx, bed, ns, certs, want)
	if err != nil {
		return r, err
	}
	first, _ := span(done)
	var ts []time.Duration
	for _, at := range done {
		ts = append(ts, at.Sub(first))
	}
	wall := benchutil.Quantile(ts, 1)
	r.WallSeconds, r.FromTriggerSeconds = wall.Seconds(), first.Add(wall).Sub(triggered).Seconds()
	if wall > 0 {
		r.PerSec = float64(certs-1) / wall.Seconds()
	}
	r.P50, r.P90, r.Max = benchutil.Quantile(ts, 0.5).Seconds(), benchutil.Quantile(ts, 0.9).Seconds(), wall.Seconds()
	if cpuAfter, err := benchutil.CPUSeconds(); err == nil {
		r.CPUPerCert = benchutil.CPUDelta(cpuBefore, cpuAfter, certs, cpuKinds...)
	}
	benchutil.Logf("P9: %d re-issued in %.1fs after the first: %.1f certs/s", certs, wall.Seconds(), r.PerSec)
	return r, setIssuer(func(ci *cmapi.ClusterIssuer) {
		ci.Spec.CA.SecretName = next
		delete(ci.Annotations, hubapi.NextCAAnnotation)
	})
}

// memorySharded is P6': clusters namespace-scoped registrations over 4 API
// servers, perCluster Certificates each, served by 3 replica processes.
// With pprofDir, each replica's heap profile is saved there after idling.
func memorySharded(bin, dir, pprofDir string, clusters, perCluster, standby, buckets int) (ShardedMemory, error) {
	m := ShardedMemory{Clusters: clusters, Certs: clusters * perCluster, Replicas: 3, Standby: standby, Buckets: buckets}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const servers = 4
	bed, args, err := startBed(ctx, "P6'", dir, servers)
	if err != nil {
		return m, err
	}
	defer func() { _ = bed.Stop() }()
	watchers := make([]*benchutil.ReadyWatcher, servers)
	for i, cp := range bed.Downstreams {
		if watchers[i], err = benchutil.WatchReady(ctx, cp.Config, ""); err != nil {
			return m, err
		}
	}
	ready := func() int {
		n := 0
		for _, w := range watchers {
			n += w.Ready()
		}
		return n
	}
	benchutil.Logf("P6': registering %d namespace-scoped clusters with %d Certificates each", clusters, perCluster)
	var wg sync.WaitGroup
	errs := make(chan error, servers)
	for s := range servers {
		wg.Go(func() {
			cp := bed.Downstreams[s]
			for i := s; i < clusters; i += servers {
				name := fmt.Sprintf("m%04d", i)
				if _, err := bed.RegisterNamespaced(ctx, cp, name, name); err != nil {
					errs <- err
					return
				}
				for j := range perCluster {
					if err := cp.Client.Create(ctx, cert(name, fmt.Sprintf("c%02d", j), cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return m, err
	}
	watches := func() (float64, error) { return benchutil.DownstreamWatches(ctx, bed) }
	base, err := watches()
	if err != nil {
		return m, err
	}
	var procs []*fleet.Replica
	var pprofAddrs []string
	defer func() {
		for _, p := range procs {
			benchutil.Stop(p, syscall.SIGTERM)
		}
	}()
	t0 := time.Now()
	for i := range m.Replicas {
		addr, err := fleet.FreeAddr()
		if err != nil {
			return m, err
		}
		a := append(slices.Clone(args), "--metrics-bind-address", addr, "--shard-standby", fmt.Sprint(standby), "--shard-buckets", fmt.Sprint(buckets))
		if pprofDir != "" {
			pa, err := fleet.FreeAddr()
			if err != nil {
				return m, err
			}
			pprofAddrs = append(pprofAddrs, pa)
			a = append(a, "--pprof-bind-address", pa)
		}
		p, err := benchutil.StartReplica(bin, dir, fmt.Sprintf("cert-hub-%d", i), a...)
		if err != nil {
			return m, err
		}
		procs = append(procs, p)
	}
	benchutil.Logf("P6': 3 replicas started; waiting for %d Certificates", m.Certs)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Minute, true, func(context.Context) (bool, error) {
		return ready() >= m.Certs, nil
	}); err != nil {
		return m, fmt.Errorf("only %d of %d Certificates Ready", ready(), m.Certs)
	}
	m.SetupSeconds = time.Since(t0).Seconds()
	readyAt := time.Now()
	benchutil.Logf("P6': all Ready after %.0fs; idling", m.SetupSeconds)
	time.Sleep(15 * time.Second)
	for _, p := range procs {
		rss, err := benchutil.RSSMedian(p)
		if err != nil {
			return m, err
		}
		m.RSSMiB = append(m.RSSMiB, rss)
		sm, err := p.Metrics(ctx)
		if err != nil {
			return m, err
		}
		m.Connected = append(m.Connected, sm.Sum("certhub_engaged_clusters", nil))
		m.HeapInuseMiB = append(m.HeapInuseMiB, float64(int(sm.Sum("go_memstats_heap_inuse_bytes", nil)/(1<<20)*10+0.5))/10)
		m.StackMiB = append(m.StackMiB, float64(int(sm.Sum("go_memstats_stack_inuse_bytes", nil)/(1<<20)*10+0.5))/10)
		m.Goroutines = append(m.Goroutines, sm.Sum("go_goroutines", nil))
	}
	for i, pa := range pprofAddrs {
		path := filepath.Join(pprofDir, fmt.Sprintf("heap-%s.pb.gz", procs[i].ID))
		if err := benchutil.Download(ctx, "http://"+pa+"/debug/pprof/heap", path); err != nil {
			return m, err
		}
		if err := benchutil.Download(ctx, "http://"+pa+"/debug/pprof/goroutine?debug=1", filepath.Join(pprofDir, fmt.Sprintf("goroutines-%s.txt", procs[i].ID))); err != nil {
			return m, err
		}
		benchutil.Logf("P6': %s's heap profile and goroutines: %s", procs[i].ID, path)
	}
	after, err := watches()
	if err != nil {
		return m, err
	}
	m.Watches = after - base
	if wait := time.Until(readyAt.Add(steadyIdle)); wait > 0 {
		benchutil.Logf("P6': idling %s more for the steady-state reading", wait.Round(time.Second))
		time.Sleep(wait)
	}
	for _, p := range procs {
		rss, err := benchutil.RSSMedian(p)
		if err != nil {
			return m, err
		}
		m.SteadyRSSMiB = append(m.SteadyRSSMiB, rss)
	}
	benchutil.Logf("P6': RSS after %s idle %v MiB", steadyIdle, m.SteadyRSSMiB)
	benchutil.Logf("P6': RSS %v MiB (Go heap in use %v, stacks %v, goroutines %v), connected %v, %v downstream watches", m.RSSMiB, m.HeapInuseMiB, m.StackMiB, m.Goroutines, m.Connected, m.Watches)
	return m, nil
}

// steadyIdle is how long P6' idles before its steady-state RSS reading:
// past the Go runtime's forced GC period (2 minutes) and a scavenger pass.
const steadyIdle = 150 * time.Second
