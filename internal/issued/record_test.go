package issued

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const ns = "certhub-system"

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// started is a Record whose writer runs, without the informer (the test
// feeds the index from the ConfigMaps it lists).
func started(t *testing.T, c client.Client, writer string, mutate func(*Options)) (*Record, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	o := Options{Client: c, Cache: nopCache{}, Namespace: ns, Writer: writer, Clock: clk}
	if mutate != nil {
		mutate(&o)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.resume(ctx); err != nil {
		t.Fatal(err)
	}
	go r.writeLoop(ctx)
	return r, clk
}

func entry(cluster, name, serial string, recorded time.Time) Entry {
	return Entry{Serial: serial, Issuer: ClusterIssuer("ca"), Cluster: cluster, Namespace: "shop", Kind: KindCertificate, Name: name,
		NotBefore: t0, NotAfter: t0.Add(90 * 24 * time.Hour), Why: "DoesNotExist", RecordedAt: recorded}
}

func listed(t *testing.T, c client.Client) ([]corev1.ConfigMap, []Entry) {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	es, bad := Entries(list.Items)
	if len(bad) > 0 {
		t.Fatalf("undecodable entries: %v", bad)
	}
	return list.Items, es
}

func TestAddStoresEachSerialOnce(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	r, _ := started(t, c, "hub-0", nil)
	ctx := context.Background()
	e := entry("c1", "web", "1A", t0)
	for range 3 {
		if err := r.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// Another replica signing the same request (deterministic serial) stores it in its own chunk.
	r2, _ := started(t, c, "hub-1", nil)
	if err := r2.Add(ctx, e); err != nil {
		t.Fatal(err)
	}
	cms, es := listed(t, c)
	if len(cms) != 2 || len(es) != 1 {
		t.Fatalf("got %d ConfigMaps and %d entries, want 2 and 1: %+v", len(cms), len(es), es)
	}
	if got, ok := r.Lookup(ClusterIssuer("ca"), "1A"); !ok || got.Name != "web" {
		t.Fatalf("Lookup = %+v, %v", got, ok)
	}
}

func TestChunksRollOverAndResume(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	limit := func(o *Options) { o.MaxChunkBytes = 4 << 10 }
	r, _ := started(t, c, "hub-0", limit)
	ctx := context.Background()
	for i := range 40 {
		if err := r.Add(ctx, entry("c1", fmt.Sprintf("crt-%d", i), fmt.Sprintf("%X", 1000+i), t0)); err != nil {
			t.Fatal(err)
		}
	}
	cms, es := listed(t, c)
	if len(es) != 40 {
		t.Fatalf("%d entries, want 40", len(es))
	}
	total := 0
	for _, cm := range cms {
		total += size(&cm)
	}
	if len(cms) < 2 || len(cms) < total/(4<<10) {
		t.Fatalf("%d chunks hold %d bytes at 4 KiB each", len(cms), total)
	}
	for _, cm := range cms {
		if n := size(&cm); n > 4<<10 {
			t.Errorf("chunk %s holds %d bytes, over its 4 KiB bound", cm.Name, n)
		}
	}
	// A restarted replica of the same name appends to its last chunk.
	r2, _ := started(t, c, "hub-0", limit)
	if err := r2.Add(ctx, entry("c1", "after-restart", "FFFF", t0)); err != nil {
		t.Fatal(err)
	}
	cms2, es2 := listed(t, c)
	if len(es2) != 41 || len(cms2) > len(cms)+1 {
		t.Fatalf("after restart: %d entries in %d chunks (before: %d chunks), want 41 in at most one more", len(es2), len(cms2), len(cms))
	}
}

func TestFullRecordRefusesToRecord(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	r, _ := started(t, c, "hub-0", func(o *Options) { o.MaxEntries = 2 })
	ctx := context.Background()
	for i := range 2 {
		if err := r.Add(ctx, entry("c1", "w", fmt.Sprintf("%X", i+1), t0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add(ctx, entry("c1", "w", "3", t0)); !errors.Is(err, ErrFull) {
		t.Fatalf("third Add = %v, want ErrFull", err)
	}
}

func TestPruneRemovesExpiredEntriesOfEveryWriter(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	r, clk := started(t, c, "hub-0", nil)
	gone, _ := started(t, c, "hub-gone", nil)
	ctx := context.Background()
	short := entry("c1", "short", "1", t0)
	short.NotAfter = t0.Add(time.Hour)
	if err := r.Add(ctx, short); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(ctx, entry("c1", "long", "2", t0)); err != nil {
		t.Fatal(err)
	}
	orphan := entry("c2", "orphan", "3", t0)
	orphan.NotAfter = t0.Add(time.Hour)
	if err := gone.Add(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(2 * time.Hour)) // expired, but within RetainAfterExpiry
	if n, err := r.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune within retention = %d, %v; want 0", n, err)
	}
	clk.SetTime(t0.Add(time.Hour + DefaultRetainAfterExpiry + time.Second))
	if n, err := r.Prune(ctx); err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2", n, err)
	}
	cms, es := listed(t, c)
	if len(es) != 1 || es[0].Name != "long" || len(cms) != 1 {
		t.Fatalf("after prune: %d chunks, entries %+v; want hub-0's one chunk with long", len(cms), es)
	}
	// The writer's chunk changed under it: its next Add merges, losing nothing.
	if err := r.Add(ctx, entry("c1", "next", "4", t0)); err != nil {
		t.Fatal(err)
	}
	if _, es := listed(t, c); len(es) != 2 {
		t.Fatalf("after a prune and an Add: %d entries, want 2", len(es))
	}
}

func TestUndelivered(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	with := func(e Entry, replaces string) Entry { e.Replaces = replaces; return e }
	cases := []struct {
		name    string
		entries []Entry
		want    []string
	}{
		{"a renewal chain is all delivered", []Entry{entry("c", "w", "1", at(0)), with(entry("c", "w", "2", at(1)), "1"), with(entry("c", "w", "3", at(2)), "2")}, nil},
		{"two first issuances: the earlier never left", []Entry{entry("c", "w", "1", at(0)), entry("c", "w", "2", at(1))}, []string{"1"}},
		{"two renewals of one serial: the earlier never left", []Entry{entry("c", "w", "1", at(0)), with(entry("c", "w", "2", at(1)), "1"), with(entry("c", "w", "3", at(2)), "1")}, []string{"2"}},
		{"other Certificates are apart", []Entry{entry("c", "w", "1", at(0)), entry("c", "x", "2", at(1)), entry("d", "w", "3", at(2))}, nil},
		{"requests never replace", []Entry{{Serial: "1", Kind: KindCertificateRequest, RecordedAt: at(0)}, {Serial: "2", Kind: KindCertificateRequest, RecordedAt: at(1)}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Undelivered(tc.entries)
			if len(got) != len(tc.want) {
				t.Fatalf("Undelivered = %v, want serials %v", got, tc.want)
			}
			for _, s := range tc.want {
				if !got[Key(ClusterIssuer("ca"), s)] {
					t.Fatalf("Undelivered = %v, want serial %s in it", got, s)
				}
			}
		})
	}
}

func TestIndexKeepsALocalEntryUntilAChunkShowsIt(t *testing.T) {
	x := newIndex()
	e := entry("c1", "web", "1", t0)
	x.remember([]*Entry{&e})
	s, _ := e.encode()
	x.apply("chunk-a", map[string]string{"other": mustEncode(t, entry("c1", "x", "2", t0))}) // an older view of the chunk
	if _, ok := x.lookup(e.Key()); !ok {
		t.Fatal("an entry this replica stored vanished on an older view of its chunk")
	}
	x.apply("chunk-a", map[string]string{e.Key(): s})
	x.apply("chunk-a", nil)
	if _, ok := x.lookup(e.Key()); ok {
		t.Fatal("an entry pruned from its only chunk is still looked up")
	}
	if n := len(x.object(Object{Cluster: "c1", Kind: KindCertificate, Namespace: "shop", Name: "web"})); n != 0 {
		t.Fatalf("%d entries left by object", n)
	}
}

func mustEncode(t *testing.T, e Entry) string {
	t.Helper()
	s, err := e.encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenHeadStartsARebuildOnce(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	r, clk := started(t, c, "hub-0", func(o *Options) { o.RebuildWindow = time.Hour })
	ctx := context.Background()
	if err := r.openHead(ctx); err != nil {
		t.Fatal(err)
	}
	if !r.Rebuilding() {
		t.Fatal("a record without a head is not rebuilding")
	}
	clk.Step(2 * time.Hour)
	r2, _ := started(t, c, "hub-1", nil)
	r2.opts.Clock = clk
	if err := r2.openHead(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Rebuilding() || r2.Rebuilding() {
		t.Fatal("still rebuilding after the head's window, or a second replica opened another window")
	}
	head := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: HeadName}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(head), head); err != nil || head.Labels[RecordLabel] != RecordHead {
		t.Fatalf("head: %v %v", err, head.Labels)
	}
}

// One certificate delivered to several objects (a shared ACME order) is
// recorded once per object, and each object finds its own entry.
func TestPerObjectEntriesAreOnePerDelivery(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	r, _ := started(t, c, "hub-0", nil)
	ctx := context.Background()
	for _, cluster := range []string{"c1", "c2", "c3"} {
		e := entry(cluster, "web", "AB", t0)
		e.PerObject = true
		for range 2 { // fetched again: still one entry per delivery
			if err := r.Add(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, es := listed(t, c); len(es) != 3 {
		t.Fatalf("%d entries, want one per delivery (3)", len(es))
	}
	for _, cluster := range []string{"c1", "c2", "c3"} {
		o := Object{Cluster: cluster, Kind: KindCertificate, Namespace: "shop", Name: "web"}
		if got, ok := r.LookupFor(ClusterIssuer("ca"), "AB", o); !ok || got.Object() != o {
			t.Errorf("LookupFor %s = %+v, %v; want its own entry", cluster, got.Object(), ok)
		}
	}
}
