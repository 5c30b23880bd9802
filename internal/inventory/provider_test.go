package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// fakeCluster stands in for a connected cluster; only its identity matters here.
type fakeCluster struct {
	cluster.Cluster
	server, hash string
}

// fakeAware records engagements and their contexts.
type fakeAware struct {
	mu      sync.Mutex
	engaged []engagement
}

type engagement struct {
	name multicluster.ClusterName
	cl   cluster.Cluster
	ctx  context.Context
}

func (a *fakeAware) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.engaged = append(a.engaged, engagement{name, cl, ctx})
	return nil
}

// live lists the engagements whose context is still running.
func (a *fakeAware) live() []engagement {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []engagement
	for _, e := range a.engaged {
		if e.ctx.Err() == nil {
			out = append(out, e)
		}
	}
	return out
}

func (a *fakeAware) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.engaged)
}

type providerHarness struct {
	t     *testing.T
	p     *Provider
	hub   client.Client
	rec   *events.FakeRecorder
	aware *fakeAware
	reg   *prometheus.Registry
	// connect, when set, replaces the fake connection (to block or fail).
	connect func(ctx context.Context, c *Cluster) (cluster.Cluster, error)
	dials   int
	mu      sync.Mutex
}

func newProviderHarness(t *testing.T, selector string, objs ...client.Object) *providerHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := Options{Namespace: "argocd", Scheme: runtime.NewScheme(), Registerer: reg}
	if selector != "" {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		opts.Selector = sel
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &providerHarness{t: t, p: p, rec: events.NewFakeRecorder(100), aware: &fakeAware{}, reg: reg,
		hub: fake.NewClientBuilder().WithObjects(objs...).Build()}
	p.hub, p.recorder = h.hub, h.rec
	p.connect = func(ctx context.Context, _ logr.Logger, c *Cluster) (cluster.Cluster, error) {
		h.mu.Lock()
		h.dials++
		connect := h.connect
		h.mu.Unlock()
		if connect != nil {
			return connect(ctx, c)
		}
		return &fakeCluster{server: c.Server, hash: c.Hash}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p.ctx, p.aware = ctx, h.aware
	close(p.started)
	return h
}

func (h *providerHarness) reconcile(name string) error {
	h.t.Helper()
	_, err := h.p.reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "argocd", Name: name}})
	return err
}

// events drains the recorded events.
func (h *providerHarness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (h *providerHarness) gauge(name string, lbls ...string) float64 {
	h.t.Helper()
	switch name {
	case "reachable":
		return testutil.ToFloat64(h.p.metrics.reachable.WithLabelValues(lbls...))
	default:
		return testutil.ToFloat64(h.p.metrics.invalid.WithLabelValues(lbls...))
	}
}

func registration(name, cluster, server, token string, extraLabels ...string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd",
		Labels: map[string]string{SecretTypeLabel: SecretTypeCluster}},
		Data: map[string][]byte{"name": []byte(cluster), "server": []byte(server), "config": []byte(`{"bearerToken":"` + token + `"}`)}}
	for i := 0; i+1 < len(extraLabels); i += 2 {
		s.Labels[extraLabels[i]] = extraLabels[i+1]
	}
	return s
}

func hasEvent(evs []string, fragment string) bool {
	for _, e := range evs {
		if strings.Contains(e, fragment) {
			return true
		}
	}
	return false
}

// Add, rotate, no-op, delete: the life of one registration.
func TestProviderLifecycle(t *testing.T) {
	s := registration("cluster-east", "east", "https://east.example.com", "t1")
	h := newProviderHarness(t, "", s)
	ctx := context.Background()

	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	live := h.aware.live()
	if len(live) != 1 || live[0].name != "east" {
		t.Fatalf("engaged %+v, want east", live)
	}
	if cl, err := h.p.Get(ctx, "east"); err != nil || cl != live[0].cl {
		t.Fatalf("Get(east) = %v, %v", cl, err)
	}
	if names := h.p.ClusterNames(); len(names) != 1 || names[0] != "east" {
		t.Errorf("ClusterNames %v", names)
	}
	if !hasEvent(h.events(), "Normal "+ReasonClusterConnected) || h.gauge("reachable", "east") != 1 {
		t.Errorf("no ClusterConnected event or reachable gauge")
	}

	// Unchanged: nothing is dialled again.
	if err := h.reconcile("cluster-east"); err != nil || h.dials != 1 {
		t.Fatalf("an unchanged Secret was dialled again (%d dials, err %v)", h.dials, err)
	}

	// Credential rotation: the old connection ends, the new one is engaged.
	s.Data["config"] = []byte(`{"bearerToken":"t2"}`)
	if err := h.hub.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	old := live[0]
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if old.ctx.Err() == nil {
		t.Errorf("the old connection was not stopped on rotation")
	}
	live = h.aware.live()
	if len(live) != 1 || live[0].cl == old.cl {
		t.Fatalf("after rotation engaged %+v", live)
	}

	// The label is removed: disengaged, with an Event saying nothing was deleted.
	delete(s.Labels, SecretTypeLabel)
	if err := h.hub.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if len(h.aware.live()) != 0 {
		t.Fatalf("still engaged after the label went")
	}
	if !hasEvent(h.events(), ReasonClusterDisengaged) {
		t.Errorf("no %s event", ReasonClusterDisengaged)
	}
	if _, err := h.p.Get(ctx, "east"); !errors.Is(err, multicluster.ErrClusterNotFound) {
		t.Errorf("Get after disengage: %v", err)
	}

	// Deleted: nothing left, no error.
	if err := h.hub.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
}

// An invalid Secret is reported (Event, metric) and keeps any running
// connection; fixing it heals without a restart.
func TestProviderInvalidSecretKeepsConnection(t *testing.T) {
	s := registration("cluster-east", "east", "https://east.example.com", "t1")
	h := newProviderHarness(t, "", s)
	ctx := context.Background()
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	h.events()
	s.Data["config"] = []byte(`{"bearerToken": `)
	if err := h.hub.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := h.reconcile("cluster-east"); err != nil {
		t.Fatal(err)
	}
	if !hasEvent(h.events(), "Warning "+ReasonInvalidClusterSecret+" invalid cluster Secret field config") ||
		h.gauge("invalid", "argocd/cluster-east", ReasonInvalidClusterSecret) != 1 {
		t.Errorf("an invalid Secret was not reported")
	}
	if len(h.aware.live()) != 1 {
		t.Errorf("the running connection was dropped for an invalid edit")
	}
}

// An unreachable cluster is reported and retried (the error goes back to
// the workqueue's back-off); it is not engaged, its name not kept.
func TestProviderUnreachable(t *testing.T) {
	h := newProviderHarness(t, "", registration("cluster-east", "east", "https://east.example.com", "t1"))
	h.connect = func(context.Context, *Cluster) (cluster.Cluster, error) { return nil, errors.New("connection refused") }
	if err := h.reconcile("cluster-east"); err == nil {
		t.Fatal("an unreachable cluster returned no error to retry with")
	}
	if !hasEvent(h.events(), "Warning "+ReasonClusterUnreachable) || h.gauge("reachable", "east") != 0 || len(h.aware.live()) != 0 {
		t.Errorf("unreachable cluster not reported or engaged anyway")
	}
	h.connect = nil
	if err := h.reconcile("cluster-east"); err != nil || len(h.aware.live()) != 1 {
		t.Fatalf("the retry did not engage: %v", err)
	}
}

// Two Secrets naming one cluster: the second is refused with
// DuplicateClusterName, also while the first is still connecting (it used
// to be checked, unlocked, then engaged for up to ConnectTimeout, so both
// engaged and the last one won).
func TestProviderDuplicateNameWhileConnecting(t *testing.T) {
	h := newProviderHarness(t, "",
		registration("cluster-a", "east", "https://a.example.com", "t"),
		registration("cluster-b", "east", "https://b.example.com", "t"))
	entered, release := make(chan struct{}), make(chan struct{})
	h.connect = func(_ context.Context, c *Cluster) (cluster.Cluster, error) {
		if c.Server == "https://a.example.com" {
			close(entered)
			<-release // a slow API server
		}
		return &fakeCluster{server: c.Server}, nil
	}
	done := make(chan error, 1)
	go func() { done <- h.reconcile("cluster-a") }()
	<-entered
	if err := h.reconcile("cluster-b"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	live := h.aware.live()
	if fc, ok := live[0].cl.(*fakeCluster); len(live) != 1 || !ok || fc.server != "https://a.example.com" {
		t.Fatalf("engaged %d clusters for one name (want only cluster-a's)", len(live))
	}
	if !hasEvent(h.events(), "Warning "+ReasonDuplicateClusterName) || h.gauge("invalid", "argocd/cluster-b", ReasonDuplicateClusterName) != 1 {
		t.Errorf("the duplicate was not reported")
	}
	// The first one goes away: the second may now serve the name.
	if _, ok := h.p.remove("argocd/cluster-a"); !ok {
		t.Fatal("cluster-a was not registered")
	}
	if err := h.reconcile("cluster-b"); err != nil || len(h.aware.live()) != 1 {
		t.Fatalf("cluster-b not engaged after cluster-a went: %v", err)
	}
}

// A cluster whose Secret is deleted while it connects is not engaged.
func TestProviderRemovedWhileConnecting(t *testing.T) {
	s := registration("cluster-a", "east", "https://a.example.com", "t")
	h := newProviderHarness(t, "", s)
	entered, release := make(chan struct{}), make(chan struct{})
	h.connect = func(context.Context, *Cluster) (cluster.Cluster, error) {
		close(entered)
		<-release
		return &fakeCluster{}, nil
	}
	done := make(chan error, 1)
	go func() { done <- h.reconcile("cluster-a") }()
	<-entered
	if err := h.hub.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if err := h.reconcile("cluster-a"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(h.aware.live()); n != 0 {
		t.Fatalf("%d engaged after the Secret was deleted mid-connect", n)
	}
}

// --cluster-selector: only matching Secrets are served.
func TestProviderSelector(t *testing.T) {
	h := newProviderHarness(t, "certhub.io/enabled=true",
		registration("in", "in", "https://in.example.com", "t", "certhub.io/enabled", "true"),
		registration("out", "out", "https://out.example.com", "t"))
	for _, n := range []string{"in", "out"} {
		if err := h.reconcile(n); err != nil {
			t.Fatal(err)
		}
	}
	if live := h.aware.live(); len(live) != 1 || live[0].name != "in" {
		t.Fatalf("engaged %+v, want only the selected one", live)
	}
}

const kubeconfigTmpl = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: SERVER}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// --kubeconfig-dir: a.yaml and a.yml both name cluster "a"; the first one
// serves it and the other is reported, scan after scan (it used to flap:
// each scan disengaged one and engaged the other). Removing a file
// disengages its cluster; a broken file is reported and skipped.
func TestProviderKubeconfigDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Replace(kubeconfigTmpl, "SERVER", server, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "https://a1.example.com")
	write("a.yml", "https://a2.example.com")
	write("b.yaml", "https://b.example.com")
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newProviderHarness(t, "")
	failed := map[string]string{}
	for range 3 {
		h.p.scanDir(dir, failed)
	}
	if n := h.aware.count(); n != 2 {
		t.Fatalf("%d engagements over 3 scans, want 2 (a once, b once)", n)
	}
	if h.gauge("invalid", "file:"+filepath.Join(dir, "a.yml"), ReasonDuplicateClusterName) != 1 ||
		h.gauge("invalid", "file:"+filepath.Join(dir, "broken.yaml"), ReasonInvalidClusterSecret) != 1 {
		t.Errorf("duplicate or broken file not reported")
	}
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.p.scanDir(dir, failed)
	live := h.aware.live()
	if len(live) != 1 || live[0].name != "a" {
		t.Fatalf("after removing b.yaml engaged %+v", live)
	}
	// A changed file re-engages.
	write("a.yaml", "https://a3.example.com")
	h.p.scanDir(dir, failed)
	if live = h.aware.live(); len(live) != 1 || live[0].cl.(*fakeCluster).server != "https://a3.example.com" { //nolint:forcetypeassert // only fakeClusters are engaged here
		t.Fatalf("a changed kubeconfig was not re-engaged: %+v", live)
	}
}
