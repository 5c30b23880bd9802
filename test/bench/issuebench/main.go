// Command issuebench measures issuance on the test bed with one hub replica:
// Certificate created downstream → Ready (median, p90, p99 over -n
// Certificates, created one after another) for ECDSA P-256 and RSA-2048 with
// the CA issuer, and the throughput of -burst Certificates created at once in
// one cluster. It prints a table and writes JSON. `make bench` runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
)

// Result is one row of the table.
type Result struct {
	Case     string  `json:"case"`
	N        int     `json:"n"`
	MedianMS float64 `json:"medianMs,omitempty"`
	P90MS    float64 `json:"p90Ms,omitempty"`
	P99MS    float64 `json:"p99Ms,omitempty"`
	WallS    float64 `json:"wallSeconds,omitempty"`
	PerSec   float64 `json:"certsPerSecond,omitempty"`
}

func main() {
	n := flag.Int("n", 200, "Certificates per latency case")
	burst := flag.Int("burst", 500, "Certificates created at once for the throughput case")
	out := flag.String("out", "", "JSON output (default test/bench/results/issue-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*n, *burst, *out); err != nil {
		fmt.Fprintln(os.Stderr, "issuebench:", err)
		os.Exit(1)
	}
}

// readyWatcher records when each Certificate is first seen Ready.
type readyWatcher struct {
	mu      sync.Mutex
	readyAt map[string]time.Time
	waiters map[string]chan struct{}
}

func (w *readyWatcher) wait(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.readyAt[name]; ok {
		c := make(chan struct{})
		close(c)
		return c
	}
	c := make(chan struct{})
	w.waiters[name] = c
	return c
}

func (w *readyWatcher) run(ctx context.Context, c client.WithWatch, ns string) error {
	wi, err := c.Watch(ctx, &cmapi.CertificateList{}, client.InNamespace(ns))
	if err != nil {
		return err
	}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			crt, ok := ev.Object.(*cmapi.Certificate)
			if !ok || ev.Type == watch.Deleted || !testbed.IsReady(crt) {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if _, seen := w.readyAt[crt.Name]; !seen {
				w.readyAt[crt.Name] = now
				if ch := w.waiters[crt.Name]; ch != nil {
					close(ch)
					delete(w.waiters, crt.Name)
				}
			}
			w.mu.Unlock()
		}
	}()
	return nil
}

func run(n, burst int, out string) error {
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
	o := app.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = bed.HubNamespace(), bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "bench-0"
	hubDone := make(chan error, 1)
	hubCtx, stopHub := context.WithCancel(ctx)
	go func() { hubDone <- app.Run(hubCtx, bed.Hub.Config, o) }()
	defer func() { stopHub(); <-hubDone }()

	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: testbed.Scheme()})
	if err != nil {
		return err
	}
	const ns = "bench"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	w := &readyWatcher{readyAt: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
	if err := w.run(ctx, wc, ns); err != nil {
		return err
	}

	// Warm up: the first Certificate also waits for the cluster to be engaged.
	if _, err := createAndWait(ctx, cp.Client, w, cert(ns, "warmup", cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
		return err
	}
	var results []Result
	for _, alg := range []struct {
		name string
		a    cmapi.PrivateKeyAlgorithm
		size int
	}{{"ECDSA P-256", cmapi.ECDSAKeyAlgorithm, 256}, {"RSA-2048", cmapi.RSAKeyAlgorithm, 2048}} {
		var ds []time.Duration
		for i := range n {
			d, err := createAndWait(ctx, cp.Client, w, cert(ns, fmt.Sprintf("lat-%s-%04d", strings.ToLower(string(alg.a)), i), alg.a, alg.size))
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		r := Result{Case: "create→Ready, sequential, " + alg.name, N: n, MedianMS: ms(ds[len(ds)/2]),
			P90MS: ms(ds[len(ds)*90/100]), P99MS: ms(ds[len(ds)*99/100])}
		logf("%s: median %.1f ms, p90 %.1f ms, p99 %.1f ms", r.Case, r.MedianMS, r.P90MS, r.P99MS)
		results = append(results, r)
	}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		wg.Go(func() {
			if err := cp.Client.Create(ctx, cert(ns, fmt.Sprintf("burst-%04d", i), cmapi.ECDSAKeyAlgorithm, 256)); err != nil {
				errs <- err
			}
		})
		if i%8 == 7 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	created := time.Since(start)
	for i := range burst {
		select {
		case <-w.wait(fmt.Sprintf("burst-%04d", i)):
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("burst Certificate %d never Ready", i)
		}
	}
	wall := time.Since(start)
	r := Result{Case: fmt.Sprintf("throughput, %d ECDSA P-256 created at once, one cluster", burst), N: burst,
		WallS: wall.Seconds(), PerSec: float64(burst) / wall.Seconds()}
	logf("%s: all Ready after %.1fs (creating took %.1fs): %.1f certs/s", r.Case, r.WallS, created.Seconds(), r.PerSec)
	results = append(results, r)

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCASE\tN\tMEDIAN\tP90\tP99\tWALL\tCERTS/S")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Case, r.N, f(r.MedianMS, "ms"), f(r.P90MS, "ms"), f(r.P99MS, "ms"), f(r.WallS, "s"), f(r.PerSec, ""))
	}
	_ = tw.Flush()
	if out == "" {
		out = filepath.Join("test", "bench", "results", "issue-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(results, "", "  ")
	return os.WriteFile(out, raw, 0o644)
}

func createAndWait(ctx context.Context, c client.Client, w *readyWatcher, crt *cmapi.Certificate) (time.Duration, error) {
	ready := w.wait(crt.Name)
	start := time.Now()
	if err := c.Create(ctx, crt); err != nil {
		return 0, err
	}
	select {
	case <-ready:
		w.mu.Lock()
		at := w.readyAt[crt.Name]
		w.mu.Unlock()
		return at.Sub(start), nil
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%s never Ready", crt.Name)
	}
}

func cert(ns, name string, alg cmapi.PrivateKeyAlgorithm, size int) *cmapi.Certificate {
	c := testbed.ValidCertificate(ns, name, "bench-ca")
	c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: alg, Size: size}
	return c
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func f(v float64, unit string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%s", v, unit)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
