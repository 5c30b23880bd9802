package inventory

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// fakeConnector wants the clusters in want; it records registrations.
type fakeConnector struct {
	mu         sync.Mutex
	want       map[multicluster.ClusterName]bool
	registered map[multicluster.ClusterName]bool
	notify     func(multicluster.ClusterName)
	// synced counts RegistrationsSynced calls; registeredAtSync is how many
	// were registered at the last one.
	synced, registeredAtSync int
}

func (g *fakeConnector) Register(n multicluster.ClusterName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.registered[n] = true
}

func (g *fakeConnector) Unregister(n multicluster.ClusterName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.registered, n)
}

func (g *fakeConnector) Wanted(n multicluster.ClusterName) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.want[n]
}

func (g *fakeConnector) OnWantedChanged(fn func(multicluster.ClusterName)) { g.notify = fn }

func (g *fakeConnector) RegistrationsSynced() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.synced++
	g.registeredAtSync = len(g.registered)
}

func (g *fakeConnector) set(n multicluster.ClusterName, want bool) {
	g.mu.Lock()
	g.want[n] = want
	g.mu.Unlock()
	g.notify(n)
}

// With a gate, every valid registration is registered (and its labels
// known), but only the clusters the gate wants are connected; the gate
// changing its mind wakes the Secret's reconcile, which connects or
// disconnects. A failed connection keeps the registration.
func TestProviderConnectsOnlyWhatTheGateWants(t *testing.T) {
	h := newProviderHarness(t, "", registration("cluster-east", "east", "https://east.example.com", "t1", "env", "prod"))
	gate := &fakeConnector{want: map[multicluster.ClusterName]bool{}, registered: map[multicluster.ClusterName]bool{}}
	h.p.opts.Connect = gate
	gate.OnWantedChanged(h.p.wake)
	ctx := context.Background()

	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if !gate.registered["east"] || h.dials != 0 || len(h.aware.live()) != 0 {
		t.Fatalf("unwanted: registered %v, %d dials, %d engaged; want registered, not dialled", gate.registered, h.dials, len(h.aware.live()))
	}
	if _, err := h.p.Get(ctx, "east"); !errors.Is(err, multicluster.ErrClusterNotFound) {
		t.Errorf("Get of an unconnected cluster: %v", err)
	}
	if l := h.p.Clusters()["east"]; l["env"] != "prod" || h.p.ClusterLabels("east")["env"] != "prod" {
		t.Errorf("labels of an unconnected registration not known: %v", h.p.Clusters())
	}

	// Wanted: the Secret is queued again, and its reconcile connects.
	gate.set("east", true)
	select {
	case ev := <-h.p.wakeups:
		if ev.Object.GetName() != "cluster-east" || ev.Object.GetNamespace() != "argocd" {
			t.Fatalf("woke %s/%s", ev.Object.GetNamespace(), ev.Object.GetName())
		}
	default:
		t.Fatal("the gate's change did not wake the Secret")
	}
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	live := h.aware.live()
	if h.dials != 1 || len(live) != 1 {
		t.Fatalf("wanted: %d dials, %d engaged", h.dials, len(live))
	}

	// No longer wanted: disconnected, still registered.
	gate.set("east", false)
	<-h.p.wakeups
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if live[0].ctx.Err() == nil || !gate.registered["east"] {
		t.Fatalf("unwanted again: connection ctx %v, registered %v", live[0].ctx.Err(), gate.registered)
	}

	// Wanted but unreachable: the error is returned (retried with back-off),
	// the registration stays, and the next attempt connects.
	h.connect = func(context.Context, *Cluster) (cluster.Cluster, error) { return nil, errors.New("connection refused") }
	gate.set("east", true)
	<-h.p.wakeups
	if err := h.reconcile("cluster-east"); err == nil {
		t.Fatal("an unreachable cluster gave no error")
	}
	if !gate.registered["east"] || h.p.ClusterLabels("east") == nil {
		t.Errorf("an unreachable cluster lost its registration")
	}
	h.connect = nil
	if err := h.reconcile("cluster-east"); err != nil || len(h.aware.live()) != 1 {
		t.Fatalf("retry: %v, %d engaged", err, len(h.aware.live()))
	}

	// Deleted: unregistered.
	if err := h.hub.Delete(ctx, registration("cluster-east", "east", "", "")); err != nil {
		t.Fatal(err)
	}
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if gate.registered["east"] || len(h.aware.live()) != 0 {
		t.Errorf("deleted: registered %v, %d engaged", gate.registered, len(h.aware.live()))
	}
}

// The gate hears RegistrationsSynced once every cluster Secret listed at
// the start has been reconciled once — registered, found invalid or found
// gone — and not before: Secrets without the label are not waited for.
func TestProviderTellsTheGateWhenTheFirstPassIsDone(t *testing.T) {
	bad := registration("cluster-bad", "bad", "https://bad.example.com", "t3")
	bad.Data["config"] = []byte(`{"bearerToken": `)
	other := registration("not-a-cluster", "x", "https://x.example.com", "t4")
	delete(other.Labels, SecretTypeLabel)
	gone := registration("cluster-gone", "gone", "https://gone.example.com", "t5")
	h := newProviderHarness(t, "",
		registration("cluster-east", "east", "https://east.example.com", "t1"),
		registration("cluster-west", "west", "https://west.example.com", "t2"),
		bad, other, gone)
	gate := &fakeConnector{want: map[multicluster.ClusterName]bool{}, registered: map[multicluster.ClusterName]bool{}}
	h.p.opts.Connect, h.p.handled = gate, map[string]bool{} // as New does with a gate
	listed := make(chan struct{})
	var once sync.Once
	h.p.log = funcr.New(func(_, args string) {
		if strings.Contains(args, `"secrets"=4`) {
			once.Do(func() { close(listed) })
		}
	}, funcr.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var startErr error
	finished := make(chan struct{})
	go func() {
		startErr = initialSync{h.p}.Start(ctx)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	synced := func() (int, int) {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		return gate.synced, gate.registeredAtSync
	}

	<-listed // the four labelled Secrets are pending
	if err := h.hub.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cluster-east", "cluster-bad", "cluster-gone"} {
		if err := h.reconcile(name); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := synced(); n != 0 {
		t.Fatalf("RegistrationsSynced called with cluster-west not yet reconciled")
	}
	if err := h.reconcile("cluster-west"); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, _ := synced()
		return n == 1, nil
	}); err != nil {
		t.Fatalf("RegistrationsSynced not called after the last reconcile: %v", err)
	}
	if _, at := synced(); at != 2 {
		t.Errorf("%d clusters registered when the gate was told, want 2 (east, west)", at)
	}
	<-finished
	if startErr != nil {
		t.Errorf("initialSync: %v", startErr)
	}
	if h.p.handled != nil {
		t.Errorf("the first pass's record is kept after it: %d sources", len(h.p.handled))
	}
}
