package inventory

import (
	"context"
	"errors"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// fakeGate wants the clusters in want; it records registrations.
type fakeGate struct {
	mu         sync.Mutex
	want       map[multicluster.ClusterName]bool
	registered map[multicluster.ClusterName]bool
	notify     func(multicluster.ClusterName)
}

func (g *fakeGate) Register(n multicluster.ClusterName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.registered[n] = true
}

func (g *fakeGate) Unregister(n multicluster.ClusterName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.registered, n)
}

func (g *fakeGate) Wanted(n multicluster.ClusterName) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.want[n]
}

func (g *fakeGate) OnWantedChanged(fn func(multicluster.ClusterName)) { g.notify = fn }

func (g *fakeGate) set(n multicluster.ClusterName, want bool) {
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
	gate := &fakeGate{want: map[multicluster.ClusterName]bool{}, registered: map[multicluster.ClusterName]bool{}}
	h.p.opts.Gate = gate
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
