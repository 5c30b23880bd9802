package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/test/fixture"
)

// owns is a fence that owns the clusters listed.
type owns map[multicluster.ClusterName]bool

func (o owns) Owns(name multicluster.ClusterName) (string, bool) { return "replica-1/3", o[name] }
func (o owns) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "", time.Time{}, nil, false
}

var _ fence.Fence = owns{}

// newTestDiscoverer is a Discoverer on a fake hub client and clock, with
// clusters' records set directly.
func newTestDiscoverer(t *testing.T, f fence.Fence, now time.Time, opts func(*Options)) (*Discoverer, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	hub := fake.NewClientBuilder().Build()
	clk := clocktesting.NewFakeClock(now)
	o := Options{Namespace: "certhub", Hub: hub, Fence: f, Registerer: prometheus.NewRegistry(), clock: clk}
	if opts != nil {
		opts(&o)
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d, hub, clk
}

// addCluster gives d an engaged cluster holding records.
func addCluster(d *Discoverer, name multicluster.ClusterName, records ...Record) *clusterState {
	st := &clusterState{records: map[types.NamespacedName]Record{}, refs: map[types.NamespacedName][]types.NamespacedName{},
		typed: map[types.NamespacedName]string{}, synced: true}
	for _, r := range records {
		st.records[types.NamespacedName{Namespace: r.Namespace, Name: r.Secret}] = r
	}
	d.mu.Lock()
	d.clusters[name] = st
	d.mu.Unlock()
	return st
}

func record(t *testing.T, name string, notAfter time.Time, opts ...fixture.TLSSecretOption) Record {
	return inspect(fixture.TLSSecret(t, "apps", name, append(opts, fixture.WithValidity(notAfter.Add(-24*time.Hour), notAfter))...))
}

// The owner writes a report sorted by expiry, rewrites it only when it
// changed (an expiry passing is a change), and a replica that does not own
// the cluster writes none.
func TestReportIsWrittenByTheOwnerWhenChanged(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d, hub, clk := newTestDiscoverer(t, owns{"east": true}, now, nil)
	east := addCluster(d, "east", record(t, "late", now.Add(90*24*time.Hour)), record(t, "soon", now.Add(time.Hour)),
		record(t, "weak", now.Add(30*24*time.Hour), fixture.WithRSAKey(1024)))
	west := addCluster(d, "west", record(t, "other", now.Add(time.Hour)))
	for name, st := range map[multicluster.ClusterName]*clusterState{"east": east, "west": west} {
		if err := d.report(ctx, name, st); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportName("west")}, cm); err == nil {
		t.Error("a replica that does not own west wrote its report")
	}
	reports, err := ReadReports(ctx, hub, "certhub", now)
	if err != nil {
		t.Fatal(err)
	}
	r := reports["east"]
	var order []string
	for _, c := range r.Certificates {
		order = append(order, c.Secret)
	}
	if !slices.Equal(order, []string{"soon", "weak", "late"}) || r.Total != 3 || r.Counts[ManagedByNone] != 3 || r.Problems[ProblemWeakKey] != 1 || r.By != "replica-1" {
		t.Fatalf("report: order %v, %+v", order, r)
	}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: "certhub", Name: ReportName("east")}, cm); err != nil {
		t.Fatal(err)
	}
	rv := cm.ResourceVersion
	if err := d.report(ctx, "east", east); err != nil {
		t.Fatal(err)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil || cm.ResourceVersion != rv {
		t.Fatalf("an unchanged report was written again (%v)", err)
	}
	clk.Step(2 * time.Hour)
	if err := d.report(ctx, "east", east); err != nil {
		t.Fatal(err)
	}
	if reports, err = ReadReports(ctx, hub, "certhub", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := reports["east"]; got.Problems[ProblemExpired] != 1 || !slices.Equal(got.Certificates[0].Problems, []Problem{ProblemExpired}) {
		t.Fatalf("after the soonest expired: %+v", got)
	}
}

// A report read later than it was written says Expired for what expired
// since (the owner writes only changes).
func TestReadReportsRecomputesExpiry(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d, hub, _ := newTestDiscoverer(t, nil, now, nil)
	st := addCluster(d, "east", record(t, "weak", now.Add(time.Hour), fixture.WithRSAKey(1024)))
	if err := d.report(ctx, "east", st); err != nil {
		t.Fatal(err)
	}
	reports, err := ReadReports(ctx, hub, "certhub", now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := reports["east"].Certificates[0].Problems; !slices.Equal(got, []Problem{ProblemWeakKey, ProblemExpired}) {
		t.Fatalf("problems %v, want WeakKey and Expired", got)
	}
}

// A report keeps the soonest MaxReportEntries and counts the rest; one too
// big for an object is halved until it fits.
func TestReportIsBounded(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var records []Record
	for i := range 10 {
		records = append(records, Record{Namespace: "apps", Secret: fmt.Sprintf("s%d", i), NotAfter: now.Add(time.Duration(10-i) * time.Hour), Managed: ManagedByNone})
	}
	r := reportOf("east", slices.Clone(records), true, 4)
	if r.Total != 10 || r.Truncated != 6 || len(r.Certificates) != 4 || r.Certificates[0].Secret != "s9" || r.Counts[ManagedByNone] != 10 {
		t.Fatalf("report %+v", r)
	}
	big := Record{Namespace: "apps", Subject: strings.Repeat("x", 100<<10)}
	for i := range 20 {
		big.Secret = fmt.Sprintf("big%d", i)
		records = append(records, big)
	}
	raw, err := reportOf("east", records, true, 1000).encode()
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(raw) > maxReportBytes || got.Truncated == 0 || got.Truncated+len(got.Certificates) != 30 {
		t.Fatalf("encoded %d bytes, %d kept, %d truncated", len(raw), len(got.Certificates), got.Truncated)
	}
}

// The expiry series are capped over every cluster, soonest first, and the
// rest are counted; counts by managed and problem cover everything.
func TestMetricsAreBounded(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	d, _, _ := newTestDiscoverer(t, nil, now, func(o *Options) { o.MaxSeries, o.Registerer = 2, reg })
	addCluster(d, "east", record(t, "late", now.Add(90*24*time.Hour)), record(t, "soon", now.Add(time.Hour)))
	addCluster(d, "west", record(t, "mid", now.Add(24*time.Hour), fixture.WithRSAKey(1024)))
	want := `
# HELP certhub_discovered_certificate_expiration_timestamp_seconds The notAfter of a TLS certificate found in a downstream Secret that certhub did not write, as a Unix time; managed is cert-manager or none.
# TYPE certhub_discovered_certificate_expiration_timestamp_seconds gauge
certhub_discovered_certificate_expiration_timestamp_seconds{cluster="east",managed="none",namespace="apps",secret="soon"} %d
certhub_discovered_certificate_expiration_timestamp_seconds{cluster="west",managed="none",namespace="apps",secret="mid"} %d
# HELP certhub_discovered_series_dropped Discovered certificates left out of certhub_discovered_certificate_expiration_timestamp_seconds by --discovery-max-series (the latest to expire).
# TYPE certhub_discovered_series_dropped gauge
certhub_discovered_series_dropped 1
# HELP certhub_discovered_certificate_problems Discovered certificates with a problem: Expired, ExpiredServed (an Ingress names it), WeakKey (RSA < 2048), SHA1Signature, Unparseable.
# TYPE certhub_discovered_certificate_problems gauge
certhub_discovered_certificate_problems{cluster="west",problem="WeakKey"} 1
`
	want = fmt.Sprintf(want, now.Add(time.Hour).Unix(), now.Add(24*time.Hour).Unix())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricExpiration, MetricDropped, MetricProblems); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(d.metrics, MetricCertificates); n != 2 {
		t.Errorf("%d series of %s, want one per cluster (only managed=none has certificates)", n, MetricCertificates)
	}
}

// Ingress references mark records Served; a Secret of another type that an
// Ingress names is read, and forgotten when no Ingress names it any more.
func TestIngressReferences(t *testing.T) {
	d, _, _ := newTestDiscoverer(t, nil, time.Now(), nil)
	typed := record(t, "typed", time.Now().Add(time.Hour))
	st := addCluster(d, "east", typed)
	st.typed[types.NamespacedName{Namespace: "apps", Name: "typed"}] = ""
	opaque := types.NamespacedName{Namespace: "apps", Name: "opaque"}
	w := &watch{d: d, name: "east", st: st, queue: newQueue()}
	defer w.queue.ShutDown()
	ing := types.NamespacedName{Namespace: "apps", Name: "web"}
	w.setRefs(ing, []types.NamespacedName{{Namespace: "apps", Name: "typed"}, opaque})
	if !st.records[types.NamespacedName{Namespace: "apps", Name: "typed"}].Served {
		t.Error("the typed Secret an Ingress names is not Served")
	}
	if w.queue.Len() != 1 {
		t.Fatalf("queued %d reads, want the opaque Secret's", w.queue.Len())
	}
	st.records[opaque] = Record{Namespace: "apps", Secret: "opaque", Served: true}
	w.setRefs(ing, nil)
	if _, ok := st.records[opaque]; ok {
		t.Error("the opaque Secret no Ingress names is still recorded")
	}
	if r, ok := st.records[types.NamespacedName{Namespace: "apps", Name: "typed"}]; !ok || r.Served {
		t.Errorf("the typed Secret after its Ingress went: %+v, %v", r, ok)
	}
}
