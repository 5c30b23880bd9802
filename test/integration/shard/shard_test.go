package shard

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const ns = "sharded"

func certificate(name string) *cmapi.Certificate {
	return fixture.Certificate(ns, name, issuerName)
}

// waitAllReady waits until every Certificate in every cluster's test namespace is Ready.
func waitAllReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	waitAllReadyIn(t, ns, timeout)
}

// waitAllReadyIn waits until every Certificate in namespace of every cluster is Ready.
func waitAllReadyIn(t testing.TB, ns string, timeout time.Duration) {
	t.Helper()
	var notReady []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, cp := range bed.Downstreams {
			list := &cmapi.CertificateList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return false, nil
			}
			for _, c := range list.Items {
				if !fixture.IsReady(&c) {
					notReady = append(notReady, cp.Name+"/"+c.Name)
				}
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		t.Fatalf("Certificates not Ready after %s: %v", timeout, notReady)
	}
}

// probe creates one Certificate in each cluster and returns how long until all were Ready.
func probe(t testing.TB, clusters []*testbed.ControlPlane, tag string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	keys := map[*testbed.ControlPlane]client.ObjectKey{}
	for _, cp := range clusters {
		c := certificate(fmt.Sprintf("%s-%d", tag, time.Now().UnixNano()))
		if err := cp.Client.Create(ctx, c); err != nil {
			t.Fatalf("create probe in %s: %v", cp.Name, err)
		}
		keys[cp] = client.ObjectKeyFromObject(c)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for cp, k := range keys {
			c := &cmapi.Certificate{}
			if err := cp.Client.Get(ctx, k, c); err != nil || !fixture.IsReady(c) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("probe Certificates %s never became Ready", tag)
	}
	return time.Since(start)
}

// prepare creates the test namespace in every cluster and starts the writer
// audit and a fleet configuration for the test.
func prepare(t testing.TB) (*fleet.Auditor, fleet.Config) {
	t.Helper()
	for _, cp := range bed.Downstreams {
		if err := client.IgnoreAlreadyExists(cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})); err != nil {
			t.Fatal(err)
		}
	}
	return fleet.StartAuditor(t, bed.Downstreams), fleet.Config{Binary: certhubBinary, Kubeconfig: hubKubeconfig,
		HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace()}
}

// trickle creates a Certificate "<prefix>-NNNN" every interval, round robin
// over the clusters, until the returned stop is called (stop waits for it).
func trickle(prefix string, every time.Duration) (stop func()) {
	return trickleIn(ns, prefix, every)
}

// trickleIn is trickle into namespace.
func trickleIn(ns, prefix string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			cp := bed.Downstreams[i%len(bed.Downstreams)]
			_ = cp.Client.Create(ctx, fixture.Certificate(ns, fmt.Sprintf("%s-%04d", prefix, i), issuerName))
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// fenceHolders returns, per cluster, the holder of its fence Lease ("" when released).
func fenceHolders(ctx context.Context) (map[string]string, error) {
	fences, err := fleet.FenceHolders(ctx, bed.Hub.Client, bed.HubNamespace())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, cp := range bed.Downstreams {
		out[cp.Name] = fences.Of(cp.Name).Holder
	}
	return out, nil
}

func clustersHeldBy(t testing.TB, id string) []*testbed.ControlPlane {
	t.Helper()
	holders, err := fenceHolders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*testbed.ControlPlane
	for _, cp := range bed.Downstreams {
		if holders[cp.Name] == id {
			out = append(out, cp)
		}
	}
	return out
}

// busiest returns the running replica that holds the most fences.
func busiest(t testing.TB, rs map[string]*fleet.Replica) *fleet.Replica {
	t.Helper()
	ids := make([]string, 0, len(rs))
	for id := range rs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var best *fleet.Replica
	n := -1
	for _, id := range ids {
		if k := len(clustersHeldBy(t, id)); k > n {
			best, n = rs[id], k
		}
	}
	return best
}

// waitConverged waits until every cluster's fence is held by one of ids.
func waitConverged(t testing.TB, ids map[string]*fleet.Replica) map[string]string {
	t.Helper()
	var holders map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if holders, err = fenceHolders(ctx); err != nil {
			return false, nil
		}
		for _, cp := range bed.Downstreams {
			if ids[holders[cp.Name]] == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("fences never converged on running replicas: %v", holders)
	}
	return holders
}

func TestShardedReplicas(tt *testing.T) {
	t := fleet.RecordFailures(tt) // the reasons again after the replicas' logs
	ctx := context.Background()
	audit, replicas := prepare(t)
	leaseDuration := fleet.FastTimings.LeaseDuration

	var mu sync.Mutex
	running := map[string]*fleet.Replica{}
	killedAt := map[string]time.Time{}
	liveSet := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for id := range running {
			out[id] = true
		}
		for id, at := range killedAt {
			if time.Since(at) < leaseDuration+2*time.Second {
				out[id] = true // its fences may stand until they expire
			}
		}
		return out
	}
	snapshot := func() map[string]*fleet.Replica {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]*fleet.Replica{}
		for k, v := range running {
			out[k] = v
		}
		return out
	}
	for i := range 3 {
		r := replicas.Start(t, fmt.Sprintf("replica-%d", i))
		mu.Lock()
		running[r.ID] = r
		mu.Unlock()
	}
	for _, r := range snapshot() {
		if err := r.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sampler := fleet.SampleOwnership(bed.Hub.Client, bed.HubNamespace(), liveSet)
	holders := waitConverged(t, snapshot())
	t.Logf("initial owners: %v", holders)

	// A steady trickle of new Certificates across all clusters for the whole run.
	stopLoad := trickle("load", 150*time.Millisecond)
	waitAllReady(t, 60*time.Second)

	// SIGKILL: the victim's clusters must be served again once its fences
	// expire, i.e. within the lease duration (+ 2 s for the retry and the write).
	victim := busiest(t, snapshot())
	lost := clustersHeldBy(t, victim.ID)
	mu.Lock()
	delete(running, victim.ID)
	killedAt[victim.ID] = time.Now()
	mu.Unlock()
	_ = victim.Stop(syscall.SIGKILL) // exits with "signal: killed"
	took := probe(t, lost, "after-kill")
	t.Logf("SIGKILL of %s (held %d clusters): its clusters served again after %s", victim.ID, len(lost), took.Round(10*time.Millisecond))
	if took > leaseDuration+2*time.Second {
		t.Errorf("failover after SIGKILL took %s, want <= lease duration + 2s = %s", took, leaseDuration+2*time.Second)
	}

	// The killed replica comes back under the same identity and gets its share back.
	back := replicas.Start(t, victim.ID)
	mu.Lock()
	running[back.ID] = back
	mu.Unlock()
	if err := back.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return len(clustersHeldBy(t, back.ID)) > 0, nil
	})
	if err != nil {
		t.Fatalf("restarted %s never got clusters back", back.ID)
	}
	waitConverged(t, snapshot())

	// SIGTERM: the replica hands its clusters over before it exits.
	leaving := busiest(t, snapshot())
	handed := clustersHeldBy(t, leaving.ID)
	start := time.Now()
	if err := leaving.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("%s exited with %v after SIGTERM, want a clean exit", leaving.ID, err)
	}
	exited := time.Since(start)
	// Only now is it gone: until it exits it is running and may hold fences.
	mu.Lock()
	delete(running, leaving.ID)
	mu.Unlock()
	took = probe(t, handed, "after-term") + exited
	t.Logf("SIGTERM of %s (held %d clusters): exited after %s, clusters served again %s after the signal",
		leaving.ID, len(handed), exited.Round(10*time.Millisecond), took.Round(10*time.Millisecond))
	if took > 2*time.Second+exited {
		t.Errorf("handoff after SIGTERM took %s after exit, want <= 2s", took-exited)
	}

	stopLoad()
	waitAllReady(t, 60*time.Second)
	samples := sampler.Finish()
	for _, b := range fleet.HeldByStopped(samples) {
		t.Errorf("ownership sample: %s", b)
	}
	writes := audit.Check(t)
	t.Logf("ownership samples: %d; Secret writes audited: %d; writers per cluster: %s", len(samples), writes, audit.Summary())
	if writes == 0 {
		t.Fatal("the audit saw no writes")
	}
}

// Three replicas with --issuance-rate=4 (certificates per second for the
// whole hub; each replica admits its share, by the clusters it owns) issue
// 96 new Certificates over the six clusters within the budget: in every
// window of Ready times, no more than the rate allows over it plus the
// buckets' first second of tokens and a slack for issuance latency (three
// replicas each admitting the whole rate would issue 3× as many); and the
// held-back ones say so (Issuing=True, reason RateLimited).
func TestIssuanceRateAcrossReplicas(tt *testing.T) {
	t := fleet.RecordFailures(tt) // the reasons again after the replicas' logs
	const rate, perCluster, ns = 4.0, 16, "budget"
	ctx := context.Background()
	_, replicas := prepare(t)
	replicas.Args = []string{"--issuance-rate", fmt.Sprint(rate)}
	running := map[string]*fleet.Replica{}
	for i := range 3 {
		r := replicas.Start(t, fmt.Sprintf("budget-%d", i))
		running[r.ID] = r
	}
	for _, r := range running {
		if err := r.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(t, running)
	type key struct {
		cp   *testbed.ControlPlane
		name string
	}
	var keys []key
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, ns)
		for i := range perCluster {
			crt := fixture.Certificate(ns, fmt.Sprintf("b%02d", i), issuerName)
			if err := cp.Client.Create(ctx, crt); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key{cp, crt.Name})
		}
	}
	readyAt := map[key]time.Time{}
	rateLimited := 0
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, k := range keys {
			if _, done := readyAt[k]; done {
				continue
			}
			crt := &cmapi.Certificate{}
			if err := k.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: k.name}, crt); err != nil {
				continue
			}
			if fixture.IsReady(crt) {
				readyAt[k] = time.Now()
			} else if c := fixture.Condition(crt, cmapi.CertificateConditionIssuing); c != nil && c.Reason == "RateLimited" {
				rateLimited++
			}
		}
		return len(readyAt) == len(keys), nil
	})
	if err != nil {
		t.Fatalf("%d of %d Certificates Ready", len(readyAt), len(keys))
	}
	times := make([]time.Time, 0, len(readyAt))
	for _, at := range readyAt {
		times = append(times, at)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	span := times[len(times)-1].Sub(times[0])
	measured := float64(len(times)-1) / span.Seconds()
	t.Logf("%d Certificates Ready over %s: %.2f/s with --issuance-rate=%v (3 replicas); RateLimited seen %d times while polling",
		len(times), span.Round(10*time.Millisecond), measured, rate, rateLimited)
	const slack = 2 * time.Second // Ready is observed a variable time after admission
windows:
	for i := range times {
		for j := i; j < len(times); j++ {
			window := times[j].Sub(times[i])
			if allowed := int(rate*(window+slack).Seconds() + rate); j-i+1 > allowed {
				t.Errorf("%d Certificates Ready within %s; --issuance-rate=%v allows %d (with a second of burst and %s of slack)", j-i+1, window.Round(10*time.Millisecond), rate, allowed, slack)
				break windows // one report is enough
			}
		}
	}
	if rateLimited == 0 {
		t.Error("no Certificate ever showed Issuing=True, reason RateLimited")
	}
	for _, r := range running {
		if err := r.Stop(syscall.SIGTERM); err != nil {
			t.Errorf("%s: %v", r.ID, err)
		}
	}
}
