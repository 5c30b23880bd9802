package acme

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
)

// Three replica processes share one ClusterIssuer's budget (2 new orders,
// one more every 10 s) in front of a CA that also answers one new order
// 429 with Retry-After. Six Certificates in two clusters: the new orders
// reaching the CA never exceed what the budget allows at any moment,
// waiting Certificates show Issuing=True/RateLimited, the 429'd order is
// retried, and all six end Ready with one order each.
func TestACMEBudgetIsSharedByReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 2)
	ca, kubeconfig := bed.CA, bed.Kubeconfig
	proxy, err := ca.StartProxy(func(attempt int) (time.Duration, bool) { return 3 * time.Second, attempt == 2 })
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	const capacity, refill = 2, 10 * time.Second
	hub, ns := bed.Hub.Client, bed.HubNamespace()
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", proxy.DirectoryURL, proxy.ServerCA, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"), func(ci *cmapi.ClusterIssuer) {
			ci.Annotations = map[string]string{hubapi.ACMELimitsAnnotation: fmt.Sprintf("orders=%d/%s", capacity, capacity*refill)}
		})); err != nil {
		t.Fatal(err)
	}
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: kubeconfig, HubNamespace: ns, ArgoNamespace: bed.ArgoNamespace(),
		Args: []string{"--acme-dns01-recursive-nameservers", ca.Nameserver, "--acme-dns01-recursive-nameservers-only"}}
	for _, id := range []string{"hub-a", "hub-b", "hub-c"} {
		cfg.Start(t, id)
	}
	fixture.WaitClusterIssuer(t, hub, "pebble", "registered", fixture.IssuerReadyWith(cmmeta.ConditionTrue, acme.ReasonAccountRegistered))

	type placed struct {
		c   client.Client
		crt *cmapi.Certificate
	}
	var crts []placed
	for i := range 6 {
		c := bed.Downstreams[i%2].Client
		fixture.EnsureNamespace(t, c, "shop")
		name := fmt.Sprintf("site-%d", i)
		crts = append(crts, placed{c, fixture.Certificate("shop", name, "pebble", fixture.WithNames("", name+"."+ca.Zone))})
	}
	// Watch for RateLimited while they issue (on keys taken before Create
	// writes the server's answer into the objects).
	keys := make([]client.ObjectKey, len(crts))
	for i, p := range crts {
		keys[i] = client.ObjectKeyFromObject(p.crt)
	}
	var mu sync.Mutex
	rateLimited := map[string]string{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			for i, p := range crts {
				got := &cmapi.Certificate{}
				if err := p.c.Get(watchCtx, keys[i], got); err == nil {
					if c := fixture.Condition(got, cmapi.CertificateConditionIssuing); c != nil && c.Reason == acme.ReasonRateLimited {
						mu.Lock()
						rateLimited[got.Name] = c.Message
						mu.Unlock()
					}
				}
			}
			time.Sleep(100 * time.Millisecond) // sampling, not waiting for a condition
		}
	}()
	for _, p := range crts {
		if err := p.c.Create(ctx, p.crt); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range crts {
		fixture.WaitReady(t, p.c, client.ObjectKeyFromObject(p.crt))
	}
	stopWatch()
	<-watched

	orders := proxy.Orders()
	if len(orders) != len(crts) {
		t.Errorf("%d new orders reached the CA for %d Certificates, want one each", len(orders), len(crts))
	}
	if proxy.Limited() != 1 {
		t.Errorf("the proxy answered %d new orders 429, want 1", proxy.Limited())
	}
	// A token bucket admits at most capacity + L/refill in any window of
	// length L; the orders reach the CA up to a few seconds after their
	// draw (the 429 pause, a step), hence the slack. Three replicas each
	// with a bucket of its own would send 6 at once.
	const slack = 4 * time.Second
	for i := range orders {
		for j := i; j < len(orders); j++ {
			allowed := capacity + int((orders[j].Sub(orders[i])+slack)/refill)
			if j-i+1 > allowed {
				t.Errorf("orders %d..%d reached the CA within %s; the budget allows %d in that time", i+1, j+1, orders[j].Sub(orders[i]).Round(100*time.Millisecond), allowed)
			}
		}
	}
	for i, at := range orders {
		t.Logf("order %d at +%s", i+1, at.Sub(orders[0]).Round(100*time.Millisecond))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rateLimited) == 0 {
		t.Error("no Certificate showed Issuing=True/RateLimited while waiting for the budget")
	}
	for name, msg := range rateLimited {
		t.Logf("%s waited: %s", name, msg)
	}

	// `certhub status` shows what is left of the budget.
	out, err := exec.CommandContext(ctx, certhubBinary, "status", "--kubeconfig", kubeconfig, "--namespace", ns,
		"--cluster-secret-namespace", bed.ArgoNamespace()).CombinedOutput()
	if err != nil {
		t.Fatalf("certhub status: %v\n%s", err, out)
	}
	if want := "ACME budget of ClusterIssuer pebble: orders "; !strings.Contains(string(out), want) || !strings.Contains(string(out), fmt.Sprintf("/%d (+1 per %s)", capacity, refill)) {
		t.Errorf("certhub status says nothing of the budget:\n%s", out)
	}
}
