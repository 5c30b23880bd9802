package adversarial

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// tcpProxy forwards to upstream; every read from upstream is held for
// delay (delay < 0: connections are accepted and never answered).
type tcpProxy struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, upstream string, delay time.Duration) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.track(c)
			if delay < 0 {
				continue // accept, read nothing, answer nothing
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.track(up)
			p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			p.wg.Go(func() {
				buf := make([]byte, 32*1024)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			})
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *tcpProxy) url() string { return "https://" + p.l.Addr().String() }

// registerVia registers cp's API server as cluster name, reached at server
// whose certificate ca signs (nil: cp's own CA, for TCP proxies).
func registerVia(t *testing.T, cp *testbed.ControlPlane, name, server string, ca []byte) {
	t.Helper()
	ctx := context.Background()
	token, err := bed.ServiceAccountToken(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if ca == nil {
		ca = cp.Config.CAData
	}
	cc := inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: ca}}
	s, err := inventory.NewSecret(bed.ArgoNamespace(), name, name, server, cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), s) })
}

// Item 2: a downstream API server behind a TCP proxy that accepts and never
// answers, and one behind a proxy that answers slowly (every response chunk
// held 300 ms) with 20 Certificates to issue. A healthy neighbour's
// create→Ready latency is measured before (baseline, 3 times) and meanwhile
// (3 times), and printed; the only assertion on time is the tier's 30 s
// bound. Clusters take turns in the shared queue (certsync/fairqueue.go), so
// the neighbour waits for a worker to finish one slow reconcile, not for the
// slow cluster's backlog.
func TestHungAndSlowClustersStarveNobody(t *testing.T) {
	spare := bed.Downstreams[2] // registered only through the proxies
	upstream, err := url.Parse(spare.Server())
	if err != nil {
		t.Fatal(err)
	}
	healthy := bed.Downstreams[0].Client
	var before []time.Duration
	for i := range 3 {
		before = append(before, neighbourIssues(t, healthy, fmt.Sprintf("slow-baseline-%d", i), "web", "nothing (baseline)"))
	}

	hung := startProxy(t, upstream.Host, -1)
	slow := startProxy(t, upstream.Host, 300*time.Millisecond)
	registerVia(t, spare, "adv-hung", hung.url(), nil)
	registerVia(t, spare, "adv-slow", slow.url(), nil)

	// Work for the slow cluster: created directly on its API server.
	fixture.EnsureNamespace(t, spare.Client, "slow-tenant")
	for i := range 20 {
		if err := spare.Client.Create(context.Background(), fixture.Certificate("slow-tenant", fmt.Sprintf("c%02d", i), issuerName)); err != nil {
			t.Fatal(err)
		}
	}
	// The hub is inside the slow cluster's backlog once its first Certificate is Ready.
	fixture.WaitReady(t, spare.Client, client.ObjectKey{Namespace: "slow-tenant", Name: "c00"})
	var during []time.Duration
	for i := range 3 {
		during = append(during, neighbourIssues(t, healthy, fmt.Sprintf("slow-during-%d", i), "web", "a hung and a slow cluster"))
	}
	t.Logf("neighbour create→Ready: baseline %s; next to a hung and a slow cluster %s (ratio of the medians %.1f×)",
		roundAll(before), roundAll(during), float64(median(during))/float64(median(before)))

	// The hung one is reported, naming the timeout, and serves nothing.
	e := fixture.WaitEvent(t, bed.Hub.Client, bed.ArgoNamespace(), "adv-hung", inventory.ReasonClusterUnreachable, "adv-hung")
	t.Logf("adv-hung: %s", e.Note)
}

// Item 2, a cluster that stalls mid-work: its API server (an HTTP proxy in
// front of a real one) serves reads but holds every Certificate and Secret
// write until the hub's request timeout. With 12 Certificates to issue there,
// every free worker would take one and hang; one cluster occupies at most
// half the workers (certsync/fairqueue.go), so the proxy never holds more
// than 2 of the 4 at once, and a neighbour issues meanwhile.
func TestClusterStallingWritesHoldsHalfTheWorkers(t *testing.T) {
	spare := bed.Downstreams[2] // registered only through proxies
	var mu sync.Mutex
	held, most := 0, 0
	release := make(chan struct{})
	stall := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet || !strings.Contains(r.URL.Path, "/certificates") && !strings.Contains(r.URL.Path, "/secrets") {
			return false
		}
		mu.Lock()
		held++
		most = max(most, held)
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-release:
		}
		mu.Lock()
		held--
		mu.Unlock()
		http.Error(w, "stalled", http.StatusServiceUnavailable)
		return true
	}
	url, ca := startHTTPProxy(t, spare, nil, stall)
	t.Cleanup(func() { close(release) }) // before the proxy closes (cleanups run last first)

	fixture.EnsureNamespace(t, spare.Client, "stall-tenant")
	for i := range 12 {
		if err := spare.Client.Create(context.Background(), fixture.Certificate("stall-tenant", fmt.Sprintf("c%02d", i), issuerName)); err != nil {
			t.Fatal(err)
		}
	}
	registerVia(t, spare, "adv-stall", url, ca)
	// The hub is inside the backlog once the proxy holds its writes.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return held >= 1, nil
	})
	if err != nil {
		t.Fatal("the hub never wrote to the stalling cluster")
	}
	var during []time.Duration
	for i := range 3 {
		during = append(during, neighbourIssues(t, bed.Downstreams[0].Client, fmt.Sprintf("stall-during-%d", i), "web", "a cluster holding its writes"))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("neighbour create→Ready next to a stalling cluster: %s; writes the stalling cluster held at once: at most %d", roundAll(during), most)
	if most > 2 {
		t.Errorf("the stalling cluster held %d workers at once, want at most half of 4", most)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
