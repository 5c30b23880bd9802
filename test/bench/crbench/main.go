// Command crbench measures external issuer mode (issue 32's row of
// docs/benchmarks.md): CertificateRequest create → Ready=True, ECDSA P-256,
// CA issuer, one downstream cluster that runs cert-manager v1.21's own
// controllers (test/fixture/cmrunner, approver included) and is registered
// with the hub in mode external. Requests naming the hub's ClusterIssuer
// (group certhub.io) and requests naming cert-manager's own CA
// ClusterIssuer (same CA key pair) are created alternately, each after the
// previous is Ready, in one run: p50/p99 side by side. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const ns = "bench"

// Result is one row of the table.
type Result struct {
	Case  string  `json:"case"`
	N     int     `json:"n"`
	P50MS float64 `json:"p50Ms"`
	P99MS float64 `json:"p99Ms"`
}

func main() {
	n := flag.Int("n", 200, "CertificateRequests per issuer")
	out := flag.String("out", "", "JSON output (default test/bench/results/crsign-<time>.json)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(*n, *out); err != nil {
		fmt.Fprintln(os.Stderr, "crbench:", err)
		os.Exit(1)
	}
}

func run(n int, out string) error {
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
	caSecret := &corev1.Secret{}
	if err := bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: "bench-ca-ca"}, caSecret); err != nil {
		return err
	}
	cp := bed.Downstreams[0]
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "cm-ca"}, Type: corev1.SecretTypeTLS, Data: caSecret.Data},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cm-ca"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "cm-ca"}}}},
	} {
		if err := cp.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "crbench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig, err := cp.WriteKubeconfig(dir)
	if err != nil {
		return err
	}
	cm, err := cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig})
	if err != nil {
		return err
	}
	defer func() { _ = cm.Stop() }()
	if _, err := bed.RegisterLabelled(ctx, cp, map[string]string{hubapi.ModeLabel: hubapi.ModeExternal}); err != nil {
		return err
	}
	defer benchutil.StartHub(ctx, bed, nil)()

	w, err := watchReady(ctx, cp)
	if err != nil {
		return err
	}
	refs := []struct {
		name string
		ref  cmmeta.IssuerReference
	}{
		{"certhub (external issuer, hub CA)", cmmeta.IssuerReference{Name: "bench-ca", Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}},
		{"cert-manager's CA issuer (same CA)", cmmeta.IssuerReference{Name: "cm-ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}},
	}
	// Warm up: the first request also waits for the cluster to be engaged.
	for j, r := range refs {
		if _, err := w.createAndWait(ctx, cp.Client, fmt.Sprintf("warmup-%d", j), r.ref); err != nil {
			return err
		}
	}
	ds := make([][]time.Duration, len(refs))
	for i := range n {
		for j, r := range refs {
			d, err := w.createAndWait(ctx, cp.Client, fmt.Sprintf("r%d-%04d", j, i), r.ref)
			if err != nil {
				return err
			}
			ds[j] = append(ds[j], d)
		}
	}
	var results []Result
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCERTIFICATEREQUEST create→Ready (ECDSA P-256, sequential, interleaved)\tN\tP50\tP99")
	for j, r := range refs {
		res := Result{Case: r.name, N: n, P50MS: benchutil.MS(benchutil.Quantile(ds[j], 0.5)), P99MS: benchutil.MS(benchutil.Quantile(ds[j], 0.99))}
		results = append(results, res)
		fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%.1f ms\n", res.Case, res.N, res.P50MS, res.P99MS)
	}
	_ = tw.Flush()
	fmt.Printf("p50 ratio certhub / cert-manager: %.2f\n", results[0].P50MS/results[1].P50MS)
	path, err := benchutil.WriteJSON("crsign", out, results)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// readyWatcher records when each CertificateRequest in ns turned Ready.
type readyWatcher struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
	readyAt map[string]time.Time
}

func watchReady(ctx context.Context, cp *testbed.ControlPlane) (*readyWatcher, error) {
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: testbed.Scheme()})
	if err != nil {
		return nil, err
	}
	wi, err := c.Watch(ctx, &cmapi.CertificateRequestList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	w := &readyWatcher{waiters: map[string]chan struct{}{}, readyAt: map[string]time.Time{}}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			cr, ok := ev.Object.(*cmapi.CertificateRequest)
			if !ok || ev.Type == watch.Deleted || apiutil.CertificateRequestReadyReason(cr) != cmapi.CertificateRequestReasonIssued {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if _, seen := w.readyAt[cr.Name]; !seen {
				w.readyAt[cr.Name] = now
				if ch := w.waiters[cr.Name]; ch != nil {
					close(ch)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// createAndWait creates a request named name for ref, with a CSR of a
// fresh key made beforehand, and returns create → Ready.
func (w *readyWatcher) createAndWait(ctx context.Context, c client.Client, name string, ref cmmeta.IssuerReference) (time.Duration, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return 0, err
	}
	crt := fixture.Certificate(ns, name, ref.Name, fixture.WithNames("", name+".bench.example.com"), fixture.WithIssuer(ref),
		fixture.WithDuration(24*time.Hour))
	cr, err := fixture.CertificateRequest(crt, name, key)
	if err != nil {
		return 0, err
	}
	ch := make(chan struct{})
	w.mu.Lock()
	w.waiters[name] = ch
	w.mu.Unlock()
	start := time.Now()
	if err := c.Create(ctx, cr); err != nil {
		return 0, err
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("CertificateRequest %s never Ready", name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readyAt[name].Sub(start), nil
}
