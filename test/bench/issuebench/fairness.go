package main

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/test/bench/internal/benchutil"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// fairnessRate is --issuance-rate for the fairness case: the budget the
// two tenants share.
const fairnessRate = 20

// fairness is the issue-30 row: a quiet namespace's 10 Certificates,
// created at once, first alone (idle) and then while another namespace's
// backlog of flood Certificates waits for the same --issuance-rate. It
// reports the quiet tenant's create→Ready p50/p99 both ways, their ratio
// (goal ≤ 2), and the issuances each tenant got while the quiet one
// waited (its tokens).
func fairness(ctx context.Context, cp *testbed.ControlPlane, w *benchutil.ReadyWatcher, flood int) ([]Result, error) {
	for _, ns := range []string{"quiet", "flood"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	burst := func(ns, prefix string, n int) (time.Time, error) {
		start := time.Now()
		return start, benchutil.CreateInBatches(n, func(i int) error {
			return cp.Client.Create(ctx, cert(ns, fmt.Sprintf("%s-%04d", prefix, i), cmapi.ECDSAKeyAlgorithm, 256))
		})
	}
	quietRun := func(prefix string) ([]time.Duration, time.Time, time.Time, error) {
		start, err := burst("quiet", prefix, 10)
		if err != nil {
			return nil, start, start, err
		}
		var ds []time.Duration
		last := start
		for i := range 10 {
			name := fmt.Sprintf("%s-%04d", prefix, i)
			select {
			case <-w.Wait("quiet", name):
			case <-time.After(10 * time.Minute):
				return nil, start, start, fmt.Errorf("quiet Certificate %s never Ready", name)
			}
			at, _ := w.ReadyAt("quiet", name)
			ds = append(ds, at.Sub(start))
			if at.After(last) {
				last = at
			}
		}
		return ds, start, last, nil
	}
	idle, _, _, err := quietRun("idle")
	if err != nil {
		return nil, err
	}
	if _, err := burst("flood", "flood", flood); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the backlog is queued before the quiet tenant asks
	loaded, from, to, err := quietRun("loaded")
	if err != nil {
		return nil, err
	}
	floodTokens := 0
	for i := range flood {
		if at, ok := w.ReadyAt("flood", fmt.Sprintf("flood-%04d", i)); ok && at.After(from) && !at.After(to) {
			floodTokens++
		}
	}
	r := []Result{
		{Case: "fairness: quiet namespace's 10, alone", N: 10, MedianMS: benchutil.MS(benchutil.Quantile(idle, 0.5)), P99MS: benchutil.MS(benchutil.Quantile(idle, 0.99))},
		{Case: fmt.Sprintf("fairness: quiet namespace's 10, beside a backlog of %d (--issuance-rate %d)", flood, fairnessRate), N: 10,
			MedianMS: benchutil.MS(benchutil.Quantile(loaded, 0.5)), P99MS: benchutil.MS(benchutil.Quantile(loaded, 0.99))},
	}
	benchutil.Logf("fairness (--issuance-reserve %.2f): quiet p50/p99 alone %.0f/%.0f ms, beside the backlog %.0f/%.0f ms (p99 ratio %.2f, goal ≤ 2); while the quiet 10 waited (%.1fs) the flood got %d issuances",
		reserve, r[0].MedianMS, r[0].P99MS, r[1].MedianMS, r[1].P99MS, r[1].P99MS/r[0].P99MS, to.Sub(from).Seconds(), floodTokens)
	return r, nil
}
