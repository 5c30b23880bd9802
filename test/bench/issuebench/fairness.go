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
// backlog of flood Certificates waits for the same --issuance-rate. Each
// way runs rounds times (one quiet 10 at a time, a second apart so the
// budget refills as it would between a tenant's deploys), and the rounds'
// latencies are pooled: one round's p99 is its slowest of 10, which moves
// by ±50 % from round to round on this machine. It reports the quiet
// tenant's create→Ready p50/p99 both ways, their ratio (goal ≤ 2), each
// round's p99, and the issuances each tenant got while the quiet one
// waited (its tokens).
//
// Each tenant is watched in its own namespace, as its users would: one
// watch of both would deliver the quiet tenant's Ready behind every event
// of the flood's before it (the API server sends a watch's events in
// order), and time the bench's own queue, not the hub.
func fairness(ctx context.Context, cp *testbed.ControlPlane, flood, rounds int) ([]Result, error) {
	watchers := map[string]*benchutil.ReadyWatcher{}
	for _, ns := range []string{"quiet", "flood"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
		w, err := benchutil.WatchReady(ctx, cp.Config, ns)
		if err != nil {
			return nil, err
		}
		watchers[ns] = w
	}
	w := watchers["quiet"]
	burst := func(ns, prefix string, n int) (time.Time, error) {
		start := time.Now()
		return start, benchutil.CreateInBatches(n, func(i int) error {
			return cp.Client.Create(ctx, cert(ns, fmt.Sprintf("%s-%04d", prefix, i), cmapi.ECDSAKeyAlgorithm, 256))
		})
	}
	// quietRounds creates the quiet 10 rounds times, each when the last is
	// Ready and a second has passed, and returns every latency and each
	// round's p99, and the span from the first create to the last Ready.
	quietRounds := func(prefix string) (all []time.Duration, p99s []float64, from, to time.Time, err error) {
		for r := range rounds {
			if r > 0 {
				time.Sleep(time.Second) // the budget refills between rounds
			}
			start, err := burst("quiet", fmt.Sprintf("%s%d", prefix, r), 10)
			if err != nil {
				return nil, nil, from, to, err
			}
			if r == 0 {
				from = start
			}
			var ds []time.Duration
			for i := range 10 {
				name := fmt.Sprintf("%s%d-%04d", prefix, r, i)
				select {
				case <-w.Wait("quiet", name):
				case <-time.After(10 * time.Minute):
					return nil, nil, from, to, fmt.Errorf("quiet Certificate %s never Ready", name)
				}
				at, _ := w.ReadyAt("quiet", name)
				ds = append(ds, at.Sub(start))
				if at.After(to) {
					to = at
				}
			}
			all = append(all, ds...)
			p99s = append(p99s, benchutil.MS(benchutil.Quantile(ds, 0.99)))
		}
		return all, p99s, from, to, nil
	}
	idle, idleP99s, _, _, err := quietRounds("idle")
	if err != nil {
		return nil, err
	}
	if _, err := burst("flood", "flood", flood); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the backlog is queued before the quiet tenant asks
	loaded, loadedP99s, from, to, err := quietRounds("loaded")
	if err != nil {
		return nil, err
	}
	floodTokens := 0
	for i := range flood {
		if at, ok := watchers["flood"].ReadyAt("flood", fmt.Sprintf("flood-%04d", i)); ok && at.After(from) && !at.After(to) {
			floodTokens++
		}
	}
	n := 10 * rounds
	r := []Result{
		{Case: fmt.Sprintf("fairness: quiet namespace's 10, alone (%d rounds)", rounds), N: n, MedianMS: benchutil.MS(benchutil.Quantile(idle, 0.5)), P99MS: benchutil.MS(benchutil.Quantile(idle, 0.99))},
		{Case: fmt.Sprintf("fairness: quiet namespace's 10, beside a backlog of %d (--issuance-rate %d, %d rounds)", flood, fairnessRate, rounds), N: n,
			MedianMS: benchutil.MS(benchutil.Quantile(loaded, 0.5)), P99MS: benchutil.MS(benchutil.Quantile(loaded, 0.99)),
			Tokens: map[string]int{"quiet": n, "flood": floodTokens}},
	}
	benchutil.Logf("fairness (--issuance-reserve %.2f, %d rounds of 10): quiet p50/p99 alone %.0f/%.0f ms, beside the backlog %.0f/%.0f ms (p99 ratio %.2f, goal ≤ 2); rounds' p99 alone %.0f, beside %.0f ms; tokens used while the quiet %d waited (%.1fs): quiet %[10]d, flood %[12]d",
		reserve, rounds, r[0].MedianMS, r[0].P99MS, r[1].MedianMS, r[1].P99MS, r[1].P99MS/r[0].P99MS, idleP99s, loadedP99s, n, to.Sub(from).Seconds(), floodTokens)
	return r, nil
}
