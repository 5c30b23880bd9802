// Command discobench measures discovery (issue 35's row of
// docs/benchmarks.md) on one downstream API server holding -n
// kubernetes.io/tls Secrets: the time and requests its first read takes,
// its heap per 1,000 Secrets beside a plain informer caching the same
// Secrets whole (what a full Secret cache would hold), its requests per
// second at rest, and the reads -churn changed Secrets cost. `make bench`
// runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Result is the row of the table.
type Result struct {
	Secrets             int     `json:"secrets"`
	FirstReadSeconds    float64 `json:"firstReadSeconds"`
	FirstReadRequests   int64   `json:"firstReadRequests"`
	HeapPer1000KiB      float64 `json:"heapPer1000KiB"`
	FullCachePer1000KiB float64 `json:"fullCachePer1000KiB"`
	RestRequestsPerSec  float64 `json:"restRequestsPerSec"`
	Churn               int     `json:"churn"`
	ChurnSeconds        float64 `json:"churnSeconds"`
	ChurnRequests       int64   `json:"churnRequests"`
	ReadQPS             float64 `json:"readQPS"`
}

func main() {
	n := flag.Int("n", 3000, "kubernetes.io/tls Secrets in the cluster")
	churn := flag.Int("churn", 100, "Secrets changed after the first read")
	rest := flag.Duration("rest", 30*time.Second, "Window at rest over which requests are counted")
	qps := flag.Float64("qps", discovery.DefaultReadQPS, "Discovery's --discovery-read-qps")
	profile := flag.String("heapprofile", "", "Write a heap profile here once discovery has read every Secret")
	out := flag.String("out", "", "JSON output (default test/bench/results/discovery-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if *profile != "" {
		runtime.MemProfileRate = 512 // fine enough to attribute records
	}
	if err := run(*n, *churn, *rest, *qps, *out, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "discobench:", err)
		os.Exit(1)
	}
}

// counter counts the requests a client makes (watches included, once).
type counter struct{ n atomic.Int64 }

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		c.n.Add(1)
		return rt.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func run(n, churn int, restWindow time.Duration, qps float64, out, profile string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 1})
	if err != nil {
		return err
	}
	defer func() { _ = bed.Stop() }()
	cp := bed.Downstreams[0]
	const namespaces = 10
	for i := range namespaces {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("apps-%d", i)}}); err != nil {
			return err
		}
	}
	benchutil.Logf("creating %d TLS Secrets", n)
	secrets := make([]*corev1.Secret, n)
	if err := benchutil.CreateInBatches(n, func(i int) error {
		s, err := fixture.NewTLSSecret(fmt.Sprintf("apps-%d", i%namespaces), fmt.Sprintf("tls-%05d", i))
		if err != nil {
			return err
		}
		secrets[i] = s
		return cp.Client.Create(ctx, s)
	}); err != nil {
		return err
	}

	var reqs counter
	cfg := rest.CopyConfig(cp.Config)
	cfg.Wrap(reqs.wrap)
	cl, err := cluster.New(cfg, func(o *cluster.Options) { o.Scheme = testbed.Scheme() })
	if err != nil {
		return err
	}
	go func() { _ = cl.Start(ctx) }()
	reg := prometheus.NewRegistry()
	d, err := discovery.New(discovery.Options{Namespace: bed.HubNamespace(), Hub: bed.Hub.Client, ReadQPS: float32(qps), Registerer: reg})
	if err != nil {
		return err
	}
	found := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			return -1
		}
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() == discovery.MetricCertificates {
				for _, m := range mf.GetMetric() {
					total += m.GetGauge().GetValue()
				}
			}
		}
		return int(total)
	}
	before := heap()
	start := time.Now()
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := d.Engage(dctx, "bench", cl); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return found() >= n, nil
	}); err != nil {
		return fmt.Errorf("discovery found %d of %d: %w", found(), n, err)
	}
	res := Result{Secrets: n, Churn: churn, ReadQPS: qps, FirstReadSeconds: time.Since(start).Seconds(), FirstReadRequests: reqs.n.Load()}
	after := heap()
	res.HeapPer1000KiB = float64(after-before) / float64(n) * 1000 / 1024
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		_ = f.Close()
	}
	runtime.KeepAlive(d)

	// At rest: only the watches stay open.
	r0 := reqs.n.Load()
	time.Sleep(restWindow)
	res.RestRequestsPerSec = float64(reqs.n.Load()-r0) / restWindow.Seconds()

	// Churn: each changed Secret is read once.
	r0 = reqs.n.Load()
	start = time.Now()
	for i := range churn {
		s := secrets[i]
		s.Labels = map[string]string{"rotated": "yes"}
		if err := cp.Client.Update(ctx, s); err != nil {
			return err
		}
	}
	reads := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == discovery.MetricReads {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "result" && l.GetValue() == "Read" {
							return m.GetCounter().GetValue()
						}
					}
				}
			}
		}
		return 0
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return reads() >= float64(churn), nil
	}); err != nil {
		return fmt.Errorf("discovery read %v of %d changed Secrets: %w", reads(), churn, err)
	}
	res.ChurnSeconds, res.ChurnRequests = time.Since(start).Seconds(), reqs.n.Load()-r0
	stop()

	// Beside it: an informer caching the same Secrets whole.
	full, err := cache.New(cp.Config, cache.Options{Scheme: testbed.Scheme(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return err
	}
	before = heap()
	if _, err := full.GetInformer(ctx, &corev1.Secret{}); err != nil {
		return err
	}
	fctx, fstop := context.WithCancel(ctx)
	go func() { _ = full.Start(fctx) }()
	if !full.WaitForCacheSync(fctx) {
		fstop()
		return fmt.Errorf("the full Secret cache never synced")
	}
	list := &corev1.SecretList{}
	if err := full.List(ctx, list); err != nil {
		fstop()
		return err
	}
	after = heap()
	res.FullCachePer1000KiB = float64(after-before) / float64(len(list.Items)) * 1000 / 1024
	runtime.KeepAlive(full)
	fstop()

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nDISCOVERY (one cluster)\tSECRETS\tFIRST READ\tREQUESTS\tHEAP / 1,000 SECRETS\tFULL SECRET CACHE / 1,000\tAT REST\tCHURN")
	fmt.Fprintf(tw, "metadata watch + paged first read (%.0f reads/s)\t%d\t%.1f s\t%d\t%.0f KiB\t%.0f KiB\t%.2f req/s\t%d changed: %.1f s, %d requests\n",
		res.ReadQPS, res.Secrets, res.FirstReadSeconds, res.FirstReadRequests, res.HeapPer1000KiB, res.FullCachePer1000KiB, res.RestRequestsPerSec,
		res.Churn, res.ChurnSeconds, res.ChurnRequests)
	_ = tw.Flush()
	path, err := benchutil.WriteJSON("discovery", out, res)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}
