package flood

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
)

// neighbourBound is how soon the neighbour must be Ready.
const neighbourBound = 30 * time.Second

// floodSize is CERTHUB_FLOOD_CERTIFICATES, 1,000 when unset.
func floodSize(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CERTHUB_FLOOD_CERTIFICATES")
	if v == "" {
		return 1000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CERTHUB_FLOOD_CERTIFICATES=%q: want a positive count", v)
	}
	return n
}

// neighbourIssues creates a Certificate in c and returns how long it took
// to become Ready.
func neighbourIssues(t *testing.T, c client.Client, ns, name string) time.Duration {
	t.Helper()
	fixture.EnsureNamespace(t, c, ns)
	start := time.Now()
	crt := fixture.Certificate(ns, name, issuerName)
	if err := c.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	return time.Since(start)
}

// Issue 56, bounded work per input: one namespace of one cluster holds N
// Certificates, all due at once, against an issuance budget of 5 a second
// (N = 30,000 in the long form: 100 minutes of issuance). Admission costs
// O(log n) and a tenant's waiting list is bounded (internal/budget), the
// workers take clusters in turn (internal/fairqueue), so a neighbour in
// another cluster is Ready within neighbourBound while the flood waits,
// measured beside a baseline taken before the flood.
func TestThirtyThousandWaitingStallNoNeighbour(t *testing.T) {
	n := floodSize(t)
	flooded, healthy := env.Bed.Downstreams[0], env.Bed.Downstreams[1]
	baseline := neighbourIssues(t, healthy.Client, "neighbour", "baseline")

	cfg := rest.CopyConfig(flooded.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the test's own creates are not what is measured
	c, err := client.New(cfg, client.Options{Scheme: flooded.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "flood"
	fixture.EnsureNamespace(t, c, ns)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := c.Create(context.Background(), fixture.Certificate(ns, fmt.Sprintf("c%05d", i), issuerName)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d Certificates created in one namespace in %s", n, time.Since(start).Round(time.Millisecond))
	// The flood waits: the budget holds it back. The neighbour is measured
	// while the hub's first pass over the flood runs (each Certificate's
	// first reconcile writes its status: Issuing, RateLimited, at the
	// cluster's write rate), and again once the whole flood has waited.
	waited := func(want float64, within time.Duration) float64 {
		t.Helper()
		var v float64
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, within, true, func(context.Context) (bool, error) {
			v, _ = fixture.Gauge(t, "certhub_certificate_budget_waits_total", map[string]string{"cluster": flooded.Name})
			return v >= want, nil
		})
		if err != nil {
			t.Fatalf("after %s, %.0f of the flood had waited for the issuance budget, want %.0f", within, v, want)
		}
		return v
	}
	firstPass := waited(float64(min(n/2, 1000)), 5*time.Minute)
	during := neighbourIssues(t, healthy.Client, "neighbour", "during")
	t.Logf("neighbour create→Ready: %s before the flood; %s during the hub's first pass over %d Certificates in one namespace (%.0f had waited; bound %s)",
		baseline.Round(time.Millisecond), during.Round(time.Millisecond), n, firstPass, neighbourBound)
	// At most 50 status writes a second in the flooded cluster: n/50 s.
	all := waited(float64(n)*0.95, time.Duration(n/50+300)*time.Second)
	after := neighbourIssues(t, healthy.Client, "neighbour", "after")
	t.Logf("neighbour create→Ready: %s once %.0f of %d had waited (every Certificate of the namespace waiting or issued at %d/s)",
		after.Round(time.Millisecond), all, n, issuanceRate)
	for what, took := range map[string]time.Duration{"during the first pass": during, "with the whole flood waiting": after} {
		if took > neighbourBound {
			t.Errorf("the neighbour took %s %s, bound %s", took, what, neighbourBound)
		}
	}
}
