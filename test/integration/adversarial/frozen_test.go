package adversarial

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/shard"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// Item 6: a replica frozen mid-work (SIGSTOP, as a long GC pause or a
// stalled VM would) loses its cluster to the other replica, which takes it
// over and writes; thawed (SIGCONT), it writes nothing more under its old
// fence: each of its writes carried the deadline of its ownership, long
// past. The writer audit (every managed Secret version, by fence transition)
// shows no write of the frozen replica after the takeover. The neighbour —
// a cluster the in-process replica holds throughout — issues meanwhile.
func TestFrozenWriterWritesNothingAfterTakeover(t *testing.T) {
	ctx := context.Background()
	victim, neighbour := bed.Downstreams[0], bed.Downstreams[1]
	id := frozenIdentity(t, victim.Name, neighbour.Name)
	audit := fleet.StartAuditor(t, []*testbed.ControlPlane{victim})
	const ns = "frozen-writer"
	fixture.EnsureNamespace(t, victim.Client, ns)

	r := fleet.Config{Binary: env.Binary, Kubeconfig: env.Kubeconfig, HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace()}.Start(t, id)
	if err := r.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitHolder(t, victim.Name, id)
	probeReady(t, victim, ns, "before-freeze")

	// Writes all the time into the frozen replica's cluster, so it is likely mid-reconcile.
	stopLoad := trickleInto(victim, ns, 100*time.Millisecond)
	defer stopLoad()
	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = r.Signal(syscall.SIGCONT)
		}
	}()
	stopped := time.Now()
	neighbourIssues(t, neighbour.Client, "frozen-neighbour", "web", "a replica frozen while holding the next cluster's fence")
	took := probeReady(t, victim, ns, "while-frozen") // served again: taken over and written by replica-0
	t.Logf("%s frozen holding %s; replica-0 served it again %s after the freeze (lease duration %s)",
		id, victim.Name, time.Since(stopped).Round(10*time.Millisecond), fleet.FastTimings.LeaseDuration)
	if took > neighbourBound {
		t.Errorf("the frozen replica's cluster was served again after %s, bound %s", took, neighbourBound)
	}
	if err := r.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	// Thawed, it notices its fence is gone, rejoins, and gets the cluster
	// back under a new fence transition; everything is served again.
	waitHolder(t, victim.Name, id)
	probeReady(t, victim, ns, "after-thaw")
	stopLoad()
	if err := r.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("%s: %v", id, err)
	}
	waitHolder(t, victim.Name, "replica-0")
	waitNamespaceReady(t, victim.Client, ns)

	writes := audit.Check(t) // a write under an old transition after a newer one fails here
	t.Logf("Secret writes audited in %s: %d; writers: %s", victim.Name, writes, audit.Summary())
	if writes == 0 {
		t.Fatal("the audit saw no writes")
	}
}

// frozenIdentity picks a replica identity that rendezvous hashing gives
// victim's fence and not neighbour's, next to the in-process replica-0 (both
// with the default --shard-buckets).
func frozenIdentity(t *testing.T, victim, neighbour string) string {
	t.Helper()
	for i := range 100 {
		id := fmt.Sprintf("frozen-%d", i)
		peers := []shard.Peer{{ID: "replica-0"}, {ID: id}}
		if shard.Assign(shard.FenceKey(victim, shard.DefaultBuckets), peers) == id && shard.Assign(shard.FenceKey(neighbour, shard.DefaultBuckets), peers) == "replica-0" {
			return id
		}
	}
	t.Fatal("no identity found")
	return ""
}

// waitHolder waits until cluster's fence is held by id.
func waitHolder(t *testing.T, cluster, id string) {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		fences, err := fleet.FenceHolders(ctx, bed.Hub.Client, bed.HubNamespace())
		holder = fences.Of(cluster).Holder
		return err == nil && holder == id, nil
	})
	if err != nil {
		t.Fatalf("the fence of %s is held by %q, want %s", cluster, holder, id)
	}
}

// probeReady creates a Certificate in cp and returns how long until it was Ready.
func probeReady(t *testing.T, cp *testbed.ControlPlane, ns, tag string) time.Duration {
	t.Helper()
	start := time.Now()
	crt := fixture.Certificate(ns, fmt.Sprintf("%s-%d", tag, start.UnixNano()), issuerName)
	if err := cp.Client.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
	return time.Since(start)
}

// trickleInto creates a Certificate in cp every interval until stopped (stop waits; calling it twice is fine).
func trickleInto(cp *testbed.ControlPlane, ns string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			_ = cp.Client.Create(ctx, fixture.Certificate(ns, fmt.Sprintf("load-%04d", i), issuerName))
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// waitNamespaceReady waits until every Certificate in ns is Ready.
func waitNamespaceReady(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var notReady []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &cmapi.CertificateList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		notReady = notReady[:0]
		for i := range list.Items {
			if !fixture.IsReady(&list.Items[i]) {
				notReady = append(notReady, list.Items[i].Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		t.Fatalf("not Ready in %s: %v", ns, notReady)
	}
}
