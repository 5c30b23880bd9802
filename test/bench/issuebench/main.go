// Command issuebench measures issuance on the test bed with one hub replica
// (P1 and P8 of docs/benchmarks.md): Certificate created downstream → Ready
// (median, p90, p99 over -n Certificates, created one after another) for
// ECDSA P-256 and RSA-2048 with the CA issuer; the downstream API writes per
// issued certificate, from the API server's apiserver_request_total before
// and after each latency run (less the benchmark's own creates); and the
// throughput of -burst Certificates created at once in one cluster; with
// -cases fairness alone, a quiet namespace's create→Ready beside another's
// backlog under --issuance-rate (fairness.go). It prints tables and writes
// JSON. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Result is one row of the table.
type Result struct {
	Case     string  `json:"case"`
	N        int     `json:"n"`
	MedianMS float64 `json:"medianMs,omitempty"`
	// WritesPerCert is the downstream API writes per issued certificate,
	// WritesBy the same by verb and resource.
	WritesPerCert float64            `json:"downstreamWritesPerCertificate,omitempty"`
	WritesBy      map[string]float64 `json:"downstreamWritesPerCertificateBy,omitempty"`
	// ReadsPerCert is the downstream GETs per issued certificate, ReadsBy
	// the same by resource.
	ReadsPerCert float64            `json:"downstreamReadsPerCertificate,omitempty"`
	ReadsBy      map[string]float64 `json:"downstreamReadsPerCertificateBy,omitempty"`
	P90MS        float64            `json:"p90Ms,omitempty"`
	P99MS        float64            `json:"p99Ms,omitempty"`
	WallS        float64            `json:"wallSeconds,omitempty"`
	PerSec       float64            `json:"certsPerSecond,omitempty"`
	// Tokens are the budget's tokens each namespace used (issuances made)
	// while the case was measured: the fairness row's share per tenant.
	Tokens map[string]int `json:"tokensByNamespace,omitempty"`
}

// reserve is the fairness case's --issuance-reserve; fairnessRounds how
// many times its quiet 10 are created each way.
var (
	reserve        float64
	fairnessRounds int
)

func main() {
	n := flag.Int("n", 200, "Certificates per latency case")
	burst := flag.Int("burst", 500, "Certificates created at once for the throughput case")
	out := flag.String("out", "", "JSON output (default test/bench/results/issue-<time>.json)")
	cases := flag.String("cases", "latency,policy,throughput", "Cases to run: latency (P1 per key type), policy (P1 with and without 100 IssuancePolicies, interleaved), throughput (P8); fairness alone (its hub runs with --issuance-rate)")
	flag.Float64Var(&reserve, "issuance-reserve", budget.DefaultReserve, "The fairness case's hub --issuance-reserve (0: none, to compare)")
	flag.IntVar(&fairnessRounds, "fairness-rounds", 5, "How many times the fairness case's quiet 10 are created, alone and beside the backlog (latencies pooled)")
	cpuProfile := flag.String("cpuprofile", "", "Write a CPU profile of the run (the in-process hub and the bench) to this file")
	traceOut := flag.String("trace", "", "Write an execution trace of the run to this file (go tool trace -pprof=net|sync|sched: where the reconciles wait)")
	flag.Parse()
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "issuebench:", err)
			os.Exit(1)
		}
		defer trace.Stop()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "issuebench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*n, *burst, *out, *cases); err != nil {
		fmt.Fprintln(os.Stderr, "issuebench:", err)
		pprof.StopCPUProfile()
		trace.Stop()
		os.Exit(1)
	}
}

// P1's goal for ECDSA (issue 34): p50 ≤ 10 ms, p99 ≤ 25 ms.
const p1GoalP50, p1GoalP99 = 10.0, 25.0

// p1Goal says how r stands against P1's goal, for the ECDSA row.
func p1Goal(alg string, r Result) string {
	if !strings.HasPrefix(alg, "ECDSA") {
		return ""
	}
	verdict := "met"
	if r.MedianMS > p1GoalP50 || r.P99MS > p1GoalP99 {
		verdict = "missed"
	}
	return fmt.Sprintf(" (P1 goal p50 ≤ %.0f ms, p99 ≤ %.0f ms: %s)", p1GoalP50, p1GoalP99, verdict)
}

func run(n, burst int, out, cases string) error {
	want := func(c string) bool { return strings.Contains(","+cases+",", ","+c+",") }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 1})
	if err != nil {
		return err
	}
	defer func() { _ = bed.Stop() }()
	if _, err := bed.CreateCAIssuer(ctx, "bench-ca"); err != nil {
		return err
	}
	cp := bed.Downstreams[0]
	if _, err := bed.Register(ctx, cp); err != nil {
		return err
	}
	defer benchutil.StartHub(ctx, bed, func(o *hub.Options) {
		if cases == "fairness" {
			o.IssuanceRate, o.IssuanceReserve = fairnessRate, reserve
		}
	})()

	const ns = "bench"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	w, err := benchutil.WatchReady(ctx, cp.Config, ns)
	if err != nil {
		return err
	}

	// Warm up: the first Certificate also waits for the cluster to be engaged.
	if _, err := w.CreateAndWait(ctx, cp.Client, cert(ns, "warmup", cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
		return err
	}
	var results []Result
	if cases == "fairness" {
		rs, err := fairness(ctx, cp, 1000, fairnessRounds)
		if err != nil {
			return err
		}
		return report(rs, out)
	}
	if want("policy") {
		rs, err := policySideBySide(ctx, bed, w, ns, n)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	for _, alg := range []struct {
		name string
		a    cmapi.PrivateKeyAlgorithm
		size int
	}{{"ECDSA P-256", cmapi.ECDSAKeyAlgorithm, 256}, {"RSA-2048", cmapi.RSAKeyAlgorithm, 2048}} {
		if !want("latency") {
			break
		}
		var ds []time.Duration
		before, err := benchutil.Requests(ctx, cp.Config)
		if err != nil {
			return err
		}
		for i := range n {
			d, err := w.CreateAndWait(ctx, cp.Client, cert(ns, fmt.Sprintf("lat-%s-%04d", strings.ToLower(string(alg.a)), i), alg.a, alg.size))
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		// Let the last status write and events land before counting.
		time.Sleep(2 * time.Second)
		after, err := benchutil.Requests(ctx, cp.Config)
		if err != nil {
			return err
		}
		r := Result{Case: "create→Ready, sequential, " + alg.name, N: n, MedianMS: benchutil.MS(benchutil.Quantile(ds, 0.5)),
			P90MS: benchutil.MS(benchutil.Quantile(ds, 0.9)), P99MS: benchutil.MS(benchutil.Quantile(ds, 0.99))}
		r.WritesPerCert, r.WritesBy = benchutil.WritesPerCert(benchutil.Delta(before, after), n)
		r.ReadsPerCert, r.ReadsBy = benchutil.ReadsPerCert(benchutil.Delta(before, after), n)
		benchutil.Logf("%s: median %.1f ms, p90 %.1f ms, p99 %.1f ms; %.2f downstream writes per certificate %v, %.2f GETs %v%s",
			r.Case, r.MedianMS, r.P90MS, r.P99MS, r.WritesPerCert, r.WritesBy, r.ReadsPerCert, r.ReadsBy, p1Goal(alg.name, r))
		results = append(results, r)
	}

	if !want("throughput") {
		return report(results, out)
	}
	start := time.Now()
	if err := benchutil.CreateInBatches(burst, func(i int) error {
		return cp.Client.Create(ctx, cert(ns, fmt.Sprintf("burst-%04d", i), cmapi.ECDSAKeyAlgorithm, 256))
	}); err != nil {
		return err
	}
	created := time.Since(start)
	for i := range burst {
		select {
		case <-w.Wait(ns, fmt.Sprintf("burst-%04d", i)):
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("burst Certificate %d never Ready", i)
		}
	}
	wall := time.Since(start)
	r := Result{Case: fmt.Sprintf("throughput, %d ECDSA P-256 created at once, one cluster", burst), N: burst,
		WallS: wall.Seconds(), PerSec: float64(burst) / wall.Seconds()}
	benchutil.Logf("%s: all Ready after %.1fs (creating took %.1fs): %.1f certs/s", r.Case, r.WallS, created.Seconds(), r.PerSec)
	results = append(results, r)
	return report(results, out)
}

func report(results []Result, out string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nP1/P8 CASE (1 replica, CA issuer)\tN\tMEDIAN\tP90\tP99\tWALL\tCERTS/S\tDOWNSTREAM WRITES/CERT\tGETS/CERT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Case, r.N, f(r.MedianMS, "ms"), f(r.P90MS, "ms"), f(r.P99MS, "ms"),
			f(r.WallS, "s"), f(r.PerSec, ""), f(r.WritesPerCert, ""), f(r.ReadsPerCert, ""))
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.WritesBy != nil {
			fmt.Printf("  writes per certificate, %s: %v; GETs: %v\n", r.Case, r.WritesBy, r.ReadsBy)
		}
	}
	path, err := benchutil.WriteJSON("issue", out, results)
	if err == nil {
		benchutil.Logf("wrote %s", path)
	}
	return err
}

func cert(ns, name string, alg cmapi.PrivateKeyAlgorithm, size int) *cmapi.Certificate {
	c := fixture.Certificate(ns, name, "bench-ca")
	c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: alg, Size: size}
	return c
}

func f(v float64, unit string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%s", v, unit)
}

// policySideBySide measures P1 (ECDSA P-256, sequential) with no
// IssuancePolicy and with 100 that all select the Certificates (the last,
// by name, allows them: every policy is evaluated), in 4 interleaved blocks
// per mode so machine drift hits both alike.
func policySideBySide(ctx context.Context, bed *testbed.Bed, w *benchutil.ReadyWatcher, ns string, n int) ([]Result, error) {
	var objs []*unstructured.Unstructured
	for i := range 100 {
		allowed := hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: fmt.Sprintf("*.team%d.{{cluster}}.example.com", i)},
			DNSNames: fixture.Values(fmt.Sprintf("*.team%d.{{cluster}}.example.com", i))}
		if i == 99 {
			allowed = hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.example.com"}, DNSNames: fixture.Values("*.example.com")}
		}
		objs = append(objs, fixture.PolicyObject(fixture.Policy(fmt.Sprintf("bench-%03d", i), hubapi.IssuancePolicySpec{Allowed: allowed})))
	}
	set := func(on bool) error {
		for _, o := range objs {
			var err error
			if on {
				err = bed.Hub.Client.Create(ctx, o.DeepCopy())
			} else {
				err = client.IgnoreNotFound(bed.Hub.Client.Delete(ctx, o))
			}
			if err != nil {
				return err
			}
		}
		// Each change makes the hub decide every Certificate again; measure
		// after that wave, not inside it.
		time.Sleep(10 * time.Second)
		return nil
	}
	ds := map[bool][]time.Duration{}
	for b := range 8 {
		on := b%2 == 1
		if err := set(on); err != nil {
			return nil, err
		}
		for i := range n / 4 {
			d, err := w.CreateAndWait(ctx, bed.Downstreams[0].Client, cert(ns, fmt.Sprintf("pol-%d-%d-%04d", b, btoi(on), i), cmapi.ECDSAKeyAlgorithm, 256))
			if err != nil {
				return nil, err
			}
			ds[on] = append(ds[on], d)
		}
	}
	if err := set(false); err != nil {
		return nil, err
	}
	var out []Result
	for _, on := range []bool{false, true} {
		name := "create→Ready, sequential, ECDSA P-256, no IssuancePolicy"
		if on {
			name = "create→Ready, sequential, ECDSA P-256, 100 IssuancePolicies (all evaluated)"
		}
		r := Result{Case: name, N: len(ds[on]), MedianMS: benchutil.MS(benchutil.Quantile(ds[on], 0.5)),
			P90MS: benchutil.MS(benchutil.Quantile(ds[on], 0.9)), P99MS: benchutil.MS(benchutil.Quantile(ds[on], 0.99))}
		benchutil.Logf("%s: median %.1f ms, p90 %.1f ms, p99 %.1f ms", r.Case, r.MedianMS, r.P90MS, r.P99MS)
		out = append(out, r)
	}
	benchutil.Logf("policy side by side: median ratio (100 policies / none) %.2f", out[1].MedianMS/out[0].MedianMS)
	return out, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
