// Command acmebench measures ACME issuance from the hub (issue 16's
// benchmark in docs/benchmarks.md) on the offline bed: Pebble
// (PEBBLE_VA_NOSLEEP=1, no nonce rejection) + BIND with an rfc2136 solver,
// one hub and -clusters downstream API servers, -replicas replica
// processes. Cases:
//
//   - serial: -serial Certificates created one after another (spread over
//     the clusters), each create → Ready;
//   - burst: -n Certificates created at once over the clusters: create →
//     Ready p50/p99, wall time and certificates per second;
//   - shared: the same burst through a ClusterIssuer that shares identical
//     requests (certhub.io/share-identical-requests), one name per 4
//     Certificates (one in each cluster).
//
// For each case it reports orders per certificate and ACME requests per
// certificate, from the replicas' certhub_acme_orders_total and
// certhub_acme_request_duration_seconds. Propagation is verified on BIND,
// the zone's only nameserver (--acme-dns01-recursive-nameservers-only), with no
// settle delay. It prints a table and writes JSON. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"text/tabwriter"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
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
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// Result is one row of the table.
type Result struct {
	Case            string  `json:"case"`
	N               int     `json:"n"`
	P50MS           float64 `json:"p50Ms"`
	P99MS           float64 `json:"p99Ms"`
	WallS           float64 `json:"wallSeconds,omitempty"`
	PerSec          float64 `json:"certsPerSecond,omitempty"`
	OrdersPerCert   float64 `json:"ordersPerCertificate"`
	RequestsPerCert float64 `json:"acmeRequestsPerCertificate"`
}

const ns = "bench"

func main() {
	serial := flag.Int("serial", 30, "Certificates created one after another")
	n := flag.Int("n", 200, "Certificates created at once (burst and shared cases)")
	clusters := flag.Int("clusters", 4, "downstream API servers")
	replicas := flag.Int("replicas", 3, "hub replica processes")
	out := flag.String("out", "", "JSON output (default test/bench/results/acme-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*serial, *n, *clusters, *replicas, *out); err != nil {
		fmt.Fprintln(os.Stderr, "acmebench:", err)
		os.Exit(1)
	}
}

// bench is the running bed.
type bench struct {
	bed      *testbed.Bed
	ca       *acmebed.Bed
	replicas []*fleet.Replica
	watchers []*benchutil.ReadyWatcher
}

func run(serial, n, clusters, replicas int, out string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "acmebench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	b, stop, err := start(ctx, dir, clusters, replicas)
	defer stop()
	if err != nil {
		return err
	}
	var results []Result
	if _, err := b.createAndWait(ctx, 0, cert("warmup", "warmup."+b.ca.Zone, "pebble")); err != nil {
		return err
	}
	r, err := b.measure(ctx, fmt.Sprintf("serial create→Ready, %d clusters, %d replicas", clusters, replicas), serial, func() ([]time.Duration, error) {
		var ds []time.Duration
		for i := range serial {
			d, err := b.createAndWait(ctx, i%clusters, cert(fmt.Sprintf("serial-%04d", i), fmt.Sprintf("serial-%04d.%s", i, b.ca.Zone), "pebble"))
			if err != nil {
				return nil, err
			}
			ds = append(ds, d)
		}
		return ds, nil
	})
	if err != nil {
		return err
	}
	results = append(results, r)
	for _, c := range []struct {
		name, issuer string
		names        int // distinct names: n (none shared) or n/clusters (each in every cluster)
	}{
		{fmt.Sprintf("burst of %d over %d clusters, %d replicas", n, clusters, replicas), "pebble", n},
		{fmt.Sprintf("burst of %d, identical in each cluster, shared (opt-in)", n), "pebble-shared", n / clusters},
	} {
		r, err := b.measure(ctx, c.name, n, func() ([]time.Duration, error) {
			return b.burst(ctx, n, func(i int) *cmapi.Certificate {
				name := fmt.Sprintf("%s-%04d", c.issuer, i)
				return cert(name, fmt.Sprintf("%s-%04d.%s", c.issuer, i%c.names, b.ca.Zone), c.issuer)
			})
		})
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	return report(results, out)
}

// start brings up the bed: API servers, Pebble + BIND, the ClusterIssuers,
// the replicas, and a Ready watcher per cluster. stop tears it down.
func start(ctx context.Context, dir string, clusters, replicas int) (*bench, func(), error) {
	b := &bench{}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: clusters})
	if err != nil {
		return nil, stop, err
	}
	b.bed = bed
	stops = append(stops, func() { _ = bed.Stop() })
	for _, cp := range bed.Downstreams {
		if _, err := bed.Register(ctx, cp); err != nil {
			return nil, stop, err
		}
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, stop, err
		}
		w, err := benchutil.WatchReady(ctx, cp.Config, ns)
		if err != nil {
			return nil, stop, err
		}
		b.watchers = append(b.watchers, w)
	}
	ca, err := acmebed.Start(ctx, acmebed.Options{Env: []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}})
	if err != nil {
		return nil, stop, err
	}
	b.ca = ca
	stops = append(stops, func() { _ = ca.Stop() })
	hub := bed.Hub.Client
	if err := hub.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: bed.HubNamespace(), Name: "tsig"},
		Data: map[string][]byte{fixture.TSIGSecretKey: []byte(ca.TSIGSecret)}}); err != nil {
		return nil, stop, err
	}
	solver := fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig")
	shared := fixture.ACMEClusterIssuer("pebble-shared", ca.DirectoryURL, ca.ServerCAs, "pebble-account", solver)
	shared.Annotations = map[string]string{hubapi.ShareIdenticalRequestsAnnotation: "true"}
	for _, ci := range []*cmapi.ClusterIssuer{fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account", solver), shared} {
		if err := hub.Create(ctx, ci); err != nil {
			return nil, stop, err
		}
	}

	bin, err := benchutil.BuildCertHub(dir)
	if err != nil {
		return nil, stop, err
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(dir)
	if err != nil {
		return nil, stop, err
	}
	for i := range replicas {
		metrics, err := fleet.FreeAddr()
		if err != nil {
			return nil, stop, err
		}
		r, err := benchutil.StartReplica(bin, dir, fmt.Sprintf("acme-hub-%d", i), "--kubeconfig", kubeconfig,
			"--namespace", bed.HubNamespace(), "--cluster-secret-namespace", bed.ArgoNamespace(),
			"--metrics-bind-address", metrics, "--health-probe-bind-address", "0",
			"--acme-dns01-recursive-nameservers", ca.Nameserver, "--acme-dns01-recursive-nameservers-only")
		if err != nil {
			return nil, stop, err
		}
		b.replicas = append(b.replicas, r)
		stops = append(stops, func() { benchutil.Stop(r, syscall.SIGTERM) })
	}
	for _, name := range []string{"pebble", "pebble-shared"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ci := &cmapi.ClusterIssuer{}
			if err := hub.Get(ctx, client.ObjectKey{Name: name}, ci); err != nil {
				return false, nil
			}
			c := fixture.IssuerReady(ci)
			return c != nil && c.Status == cmmeta.ConditionTrue, nil
		})
		if err != nil {
			return nil, stop, fmt.Errorf("ClusterIssuer %s never Ready: %w", name, err)
		}
	}
	benchutil.Logf("bed up: %d clusters, %d replicas, Pebble %s, BIND %s", clusters, replicas, ca.DirectoryURL, ca.Nameserver)
	return b, stop, nil
}

// measure runs f and adds what the replicas' ACME metrics counted meanwhile.
func (b *bench) measure(ctx context.Context, name string, n int, f func() ([]time.Duration, error)) (Result, error) {
	before, err := b.acmeCounts(ctx)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	ds, err := f()
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	wall := time.Since(start)
	time.Sleep(2 * time.Second) // the orders' last steps (TXT clean-up) land in the counts
	after, err := b.acmeCounts(ctx)
	if err != nil {
		return Result{}, err
	}
	r := Result{Case: name, N: n, P50MS: benchutil.MS(benchutil.Quantile(ds, 0.5)), P99MS: benchutil.MS(benchutil.Quantile(ds, 0.99)),
		WallS: wall.Seconds(), PerSec: float64(n) / wall.Seconds(),
		OrdersPerCert: (after[0] - before[0]) / float64(n), RequestsPerCert: (after[1] - before[1]) / float64(n)}
	benchutil.Logf("%s: p50 %.0f ms, p99 %.0f ms, %.1f s, %.2f certs/s, %.2f orders and %.1f ACME requests per certificate",
		r.Case, r.P50MS, r.P99MS, r.WallS, r.PerSec, r.OrdersPerCert, r.RequestsPerCert)
	return r, nil
}

// acmeCounts sums, over the replicas, the orders created and the ACME requests made.
func (b *bench) acmeCounts(ctx context.Context) ([2]float64, error) {
	var c [2]float64
	for _, r := range b.replicas {
		s, err := r.Metrics(ctx)
		if err != nil {
			return c, err
		}
		c[0] += s.Sum("certhub_acme_orders_total", map[string]string{"result": "created"})
		c[1] += s.Sum("certhub_acme_request_duration_seconds", nil)
	}
	return c, nil
}

// burst creates n Certificates at once, the i-th in cluster i % clusters,
// and returns each one's create → Ready.
func (b *bench) burst(ctx context.Context, n int, mk func(i int) *cmapi.Certificate) ([]time.Duration, error) {
	created := make([]time.Time, n)
	crts := make([]*cmapi.Certificate, n)
	for i := range n {
		crts[i] = mk(i)
	}
	if err := benchutil.CreateInBatches(n, func(i int) error {
		created[i] = time.Now()
		return b.bed.Downstreams[i%len(b.bed.Downstreams)].Client.Create(ctx, crts[i])
	}); err != nil {
		return nil, err
	}
	var ds []time.Duration
	for i, crt := range crts {
		w := b.watchers[i%len(b.watchers)]
		select {
		case <-w.Wait(ns, crt.Name):
		case <-time.After(10 * time.Minute):
			return nil, fmt.Errorf("%s never Ready", crt.Name)
		}
		at, _ := w.ReadyAt(ns, crt.Name)
		ds = append(ds, at.Sub(created[i]))
	}
	return ds, nil
}

// createAndWait creates crt in cluster i and waits until it is Ready.
func (b *bench) createAndWait(ctx context.Context, i int, crt *cmapi.Certificate) (time.Duration, error) {
	return b.watchers[i].CreateAndWait(ctx, b.bed.Downstreams[i].Client, crt)
}

func cert(name, dnsName, issuer string) *cmapi.Certificate {
	c := fixture.Certificate(ns, name, issuer, fixture.WithNames("", dnsName))
	c.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256}
	return c
}

func report(results []Result, out string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nACME CASE (Pebble + BIND, rfc2136)\tN\tP50\tP99\tWALL\tCERTS/S\tORDERS/CERT\tACME REQUESTS/CERT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.0fms\t%.0fms\t%.1fs\t%.2f\t%.2f\t%.1f\n", r.Case, r.N, r.P50MS, r.P99MS, r.WallS, r.PerSec, r.OrdersPerCert, r.RequestsPerCert)
	}
	_ = tw.Flush()
	path, err := benchutil.WriteJSON("acme", out, results)
	if err == nil {
		benchutil.Logf("wrote %s", path)
	}
	return err
}
