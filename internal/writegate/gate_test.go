package writegate_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const hubNamespace = "certhub"

// bed is one gate over one downstream cluster "c1" (a fake client), its
// Argo CD Secret's labels, and the hub (another fake client).
type bed struct {
	gate     *writegate.Gate
	clock    *clocktesting.FakeClock
	down     client.Client
	hub      client.Client
	recorder *events.FakeRecorder
	reg      *prometheus.Registry

	mu       sync.Mutex
	labels   map[string]string
	owned    bool
	answers  []bool // if set, the next Owns answers, before owned
	notified []multicluster.ClusterName
}

func newBed(t *testing.T, labels map[string]string, downstream ...client.Object) *bed {
	t.Helper()
	s := testbed.Scheme()
	b := &bed{
		clock:    clocktesting.NewFakeClock(now),
		down:     fake.NewClientBuilder().WithScheme(s).WithObjects(downstream...).WithReturnManagedFields().Build(),
		hub:      fake.NewClientBuilder().WithScheme(s).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "cluster-c1"}}).Build(),
		recorder: events.NewFakeRecorder(10),
		reg:      prometheus.NewRegistry(),
		labels:   labels,
		owned:    true,
	}
	g, err := writegate.New(writegate.WithClock(writegate.Options{
		Fence:  b,
		Labels: func(multicluster.ClusterName) map[string]string { b.mu.Lock(); defer b.mu.Unlock(); return b.labels },
		Clusters: func() []multicluster.ClusterName {
			return []multicluster.ClusterName{"c1"}
		},
		GetCluster: func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) {
			return fixture.NewFakeCluster(b.down), nil
		},
		Secret: func(multicluster.ClusterName) (types.NamespacedName, bool) {
			return types.NamespacedName{Namespace: "argocd", Name: "cluster-c1"}, true
		},
		Hub: b.hub, Namespace: hubNamespace, Recorder: b.recorder, Registerer: b.reg,
	}, b.clock))
	if err != nil {
		t.Fatal(err)
	}
	g.Subscribe(func(n multicluster.ClusterName) { b.mu.Lock(); defer b.mu.Unlock(); b.notified = append(b.notified, n) })
	b.gate = g
	return b
}

// Owns and BeginWrite make the bed the gate's inner fence.
func (b *bed) Owns(multicluster.ClusterName) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.answers) > 0 {
		a := b.answers[0]
		b.answers = b.answers[1:]
		return "replica-0/1", a
	}
	return "replica-0/1", b.owned
}

func (b *bed) BeginWrite(n multicluster.ClusterName) (string, time.Time, func(), bool) {
	s, ok := b.Owns(n)
	return s, time.Time{}, func() {}, ok
}

var _ fence.Fence = (*bed)(nil)

func (b *bed) setMode(m string) {
	b.mu.Lock()
	b.labels = map[string]string{"certhub.io/mode": m}
	b.mu.Unlock()
	b.gate.LabelsChanged("c1")
}

func (b *bed) notifications() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.notified)
}

func (b *bed) report(t *testing.T) (writegate.Report, bool) {
	t.Helper()
	rs, err := writegate.ReadReports(context.Background(), b.hub, hubNamespace)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := rs["c1"]
	return r, ok
}

func TestGateWrites(t *testing.T) {
	held := fixture.CertManagerLease("cm-1", now, 60)
	for name, tc := range map[string]struct {
		mode       string // "" : no label
		downstream []client.Object
		// before the first look, after it
		before, after bool
		conflict      bool
		report        bool // a report is published (not the plain issue case)
	}{
		"issue, no cert-manager: writes once looked at": {after: true},
		"issue, cert-manager's Lease held: conflict":    {mode: "issue", downstream: []client.Object{held}, conflict: true, report: true},
		"force-issue writes without looking":            {mode: "force-issue", downstream: []client.Object{held}, before: true, after: true, conflict: true, report: true},
		"observe never writes":                          {mode: "observe", report: true},
		"off never writes, nor looks":                   {mode: "off", downstream: []client.Object{held}, report: true},
		"a typo observes":                               {mode: "isue", report: true},
	} {
		t.Run(name, func(t *testing.T) {
			labels := map[string]string{}
			if tc.mode != "" {
				labels["certhub.io/mode"] = tc.mode
			}
			b := newBed(t, labels, tc.downstream...)
			if got := b.gate.Writes("c1"); got != tc.before {
				t.Errorf("before any look: Writes = %t; want %t", got, tc.before)
			}
			b.gate.Pass(context.Background())
			if got := b.gate.Writes("c1"); got != tc.after {
				t.Errorf("after a look: Writes = %t (%s); want %t", got, b.gate.String("c1"), tc.after)
			}
			if _, ok := b.gate.Owns("c1"); ok != tc.after {
				t.Errorf("Owns = %t; want %t (the inner fence owns it)", ok, tc.after)
			}
			r, ok := b.report(t)
			if ok != tc.report {
				t.Fatalf("report published %t (%+v); want %t", ok, r, tc.report)
			}
			if ok && (r.Conflict != tc.conflict || r.Writes != tc.after || r.By != "replica-0") {
				t.Errorf("report: conflict %t, writes %t, by %q; want conflict %t, writes %t, by replica-0", r.Conflict, r.Writes, r.By, tc.conflict, tc.after)
			}
			if tc.mode == "isue" && (r.Mode != writegate.Observe || r.InvalidMode != "isue") {
				t.Errorf("report of a typo: mode %s, invalid %q; want observe, invalid \"isue\"", r.Mode, r.InvalidMode)
			}
			if got := len(b.recorder.Events); (got > 0) != tc.conflict {
				t.Errorf("%d Events; want one only on a conflict", got)
			}
			if tc.conflict {
				if ev := <-b.recorder.Events; !strings.Contains(ev, writegate.ReasonClusterConflict) || !strings.Contains(ev, "cm-1") {
					t.Errorf("Event %q; want ClusterConflict naming the Lease's holder", ev)
				}
			}
			// One series, 1, on a conflict; none otherwise.
			series, want := 0, 0.0
			if tc.conflict {
				series, want = 1, 1
			}
			got, _ := fixture.GaugeIn(t, b.reg, "certhub_cluster_conflict", map[string]string{"cluster": "c1"})
			if n := testutil.CollectAndCount(b.reg, "certhub_cluster_conflict"); n != series || got != want {
				t.Errorf("certhub_cluster_conflict: %d series, %g; want %d, %g", n, got, series, want)
			}
		})
	}
}

// A conflict ends when cert-manager's Lease expires; a second Event is
// only for a new conflict; subscribers hear every change of answer.
func TestGateConflictEnds(t *testing.T) {
	b := newBed(t, map[string]string{"certhub.io/mode": "issue"}, fixture.CertManagerLease("cm-1", now, 60))
	ctx := context.Background()
	b.gate.Pass(ctx)
	if b.gate.Writes("c1") {
		t.Fatal("writes while cert-manager holds its Lease")
	}
	b.clock.Step(30 * time.Second)
	b.gate.Pass(ctx)
	if b.gate.Writes("c1") || len(b.recorder.Events) != 1 {
		t.Fatalf("30 s later: writes %t, %d Events; want still the one conflict", b.gate.Writes("c1"), len(b.recorder.Events))
	}
	heard := b.notifications()
	b.clock.Step(31 * time.Second) // past the Lease's 60 s
	b.gate.Pass(ctx)
	if !b.gate.Writes("c1") {
		t.Fatalf("the Lease expired and nothing else writes, yet no writes: %s", b.gate.String("c1"))
	}
	// Subscribers are called on their own goroutines.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return b.notifications() > heard, nil
	}); err != nil {
		t.Error("subscribers were not told the cluster may be written")
	}
	if _, ok := b.report(t); ok {
		t.Error("a plain issue cluster the hub writes in keeps a report")
	}
	if got := testutil.CollectAndCount(b.reg, "certhub_cluster_mode"); got != 1 {
		t.Errorf("%d certhub_cluster_mode series; want 1", got)
	}
	// The operator starts cert-manager again without switching off: a new conflict.
	lease := fixture.CertManagerLease("", now, 60)
	if err := b.down.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec = fixture.CertManagerLease("cm-2", b.clock.Now(), 60).Spec
	if err := b.down.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	b.clock.Step(time.Second)
	b.gate.Pass(ctx)
	if b.gate.Writes("c1") || len(b.recorder.Events) != 2 {
		t.Errorf("cert-manager back: writes %t, %d Events; want no writes, a second Event", b.gate.Writes("c1"), len(b.recorder.Events))
	}
}

// A mode change looks at the cluster again at once: switched to issue
// after cert-manager stopped, the cluster is written without waiting for
// the next Interval's look (the last one saw cert-manager running).
func TestGateModeChangeLooksAgain(t *testing.T) {
	b := newBed(t, map[string]string{"certhub.io/mode": "observe"}, fixture.CertManagerLease("cm-1", now, 60))
	ctx := context.Background()
	b.gate.Pass(ctx)
	if r, _ := b.report(t); !r.Conflict {
		t.Fatalf("observe with cert-manager's Lease held: report %+v; want the conflict shown", r)
	}
	// cert-manager stops (releases its Lease); the operator switches to issue.
	lease := fixture.CertManagerLease("", now, 60)
	if err := b.down.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec.HolderIdentity = nil
	if err := b.down.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	b.clock.Step(time.Second)
	b.gate.KickPass(ctx) // a pass looks only at new clusters…
	if b.gate.Writes("c1") {
		t.Fatal("wrote in observe")
	}
	b.setMode("issue")
	b.gate.KickPass(ctx) // …and at those whose mode changed
	if !b.gate.Writes("c1") {
		t.Errorf("switched to issue with cert-manager gone, yet no writes: %s", b.gate.String("c1"))
	}
}

// The plan of a cluster the hub does not write in is published sorted
// and counted; a Certificate forgotten leaves it; switching to issue (and
// writing) drops the plan.
func TestGatePlan(t *testing.T) {
	b := newBed(t, map[string]string{"certhub.io/mode": "observe"})
	ctx := context.Background()
	for _, v := range []writegate.Verdict{
		{Namespace: "shop", Name: "web-2", Action: writegate.ActionReissue, Adopting: true, Reason: "IncorrectIssuer"},
		{Namespace: "shop", Name: "web-1", Action: writegate.ActionAdopt, Adopting: true},
		{Namespace: "admin", Name: "x", Action: writegate.ActionRefuse, Reason: "PolicyDenied"},
		{Namespace: "shop", Name: "gone", Action: writegate.ActionIssue},
	} {
		b.gate.Plan("c1", v)
	}
	b.gate.Forget("c1", "shop", "gone")
	b.gate.Pass(ctx)
	r, ok := b.report(t)
	if !ok {
		t.Fatal("no report")
	}
	var rows []string
	for _, v := range r.Plan {
		rows = append(rows, v.Namespace+"/"+v.Name+"="+string(v.Action))
	}
	if got, want := strings.Join(rows, " "), "admin/x=Refuse shop/web-1=Adopt shop/web-2=Reissue"; got != want {
		t.Errorf("plan %q; want %q", got, want)
	}
	if r.Counts[writegate.ActionAdopt] != 1 || r.Counts[writegate.ActionReissue] != 1 || r.Counts[writegate.ActionRefuse] != 1 || r.Counts[writegate.ActionIssue] != 0 {
		t.Errorf("counts %v", r.Counts)
	}
	if got, _ := fixture.GaugeIn(t, b.reg, "certhub_migration_plan_certificates", map[string]string{"cluster": "c1", "action": "Adopt"}); got != 1 {
		t.Errorf("certhub_migration_plan_certificates{action=Adopt} = %g; want 1", got)
	}

	b.setMode("issue")
	b.gate.Pass(ctx)
	if !b.gate.Writes("c1") {
		t.Fatalf("issue with no cert-manager does not write: %s", b.gate.String("c1"))
	}
	if r, ok := b.report(t); ok {
		t.Errorf("the plan outlived the switch to issue: %+v", r)
	}
	if got := testutil.CollectAndCount(b.reg, "certhub_migration_plan_certificates"); got != 0 {
		t.Errorf("%d plan series after the switch; want 0", got)
	}
}

// A cluster acquired while a pass runs (the pass saw it unowned) keeps the
// plan rows certsync recorded as soon as it owned it: they are not
// recorded again.
func TestGateKeepsThePlanOfAClusterJustAcquired(t *testing.T) {
	b := newBed(t, map[string]string{"certhub.io/mode": "observe"})
	ctx := context.Background()
	b.gate.Plan("c1", writegate.Verdict{Namespace: "shop", Name: "web", Action: writegate.ActionAdopt, Adopting: true})
	b.mu.Lock()
	b.answers = []bool{false} // the pass's view: not yet owned
	b.mu.Unlock()
	b.gate.Pass(ctx)
	b.gate.Pass(ctx) // owned now: reports
	r, ok := b.report(t)
	if !ok || r.Counts[writegate.ActionAdopt] != 1 {
		t.Errorf("report %+v (published %t); want the row planned before the pass", r, ok)
	}
}

// A cluster this replica stops owning is not written, not looked at, and
// its series go.
func TestGateFollowsOwnership(t *testing.T) {
	b := newBed(t, nil)
	ctx := context.Background()
	b.gate.Pass(ctx)
	if !b.gate.Writes("c1") {
		t.Fatal("no writes in an owned quiet cluster")
	}
	b.mu.Lock()
	b.owned = false
	b.mu.Unlock()
	b.gate.Pass(ctx)
	if _, ok := b.gate.Owns("c1"); ok {
		t.Error("owns a cluster the fence gave away")
	}
	if b.gate.String("c1") != "not looked at" {
		t.Errorf("state kept for a cluster not owned: %s", b.gate.String("c1"))
	}
	if got := testutil.CollectAndCount(b.reg, "certhub_cluster_mode"); got != 0 {
		t.Errorf("%d certhub_cluster_mode series for a cluster not owned; want 0", got)
	}
}

// Writers ask the gate while its loop looks and reports (go test -race
// checks the locking).
func TestGateConcurrentUse(t *testing.T) {
	b := newBed(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			b.gate.Pass(ctx)
			b.gate.KickPass(ctx)
		}
	})
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				b.gate.Writes("c1")
				_, _, done, _ := b.gate.BeginWrite("c1")
				done()
				b.gate.Plan("c1", writegate.Verdict{Namespace: "shop", Name: fmt.Sprintf("w-%d-%d", i, j), Action: writegate.ActionKeep})
				if j%10 == 0 {
					b.setMode("issue")
				}
			}
		})
	}
	wg.Wait()
	b.gate.Pass(ctx)
	if !b.gate.Writes("c1") {
		t.Errorf("a quiet cluster in issue is not written after the passes: %s", b.gate.String("c1"))
	}
}

// In mode external cert-manager is expected: the hub signs the cluster's
// requests (RequestFence) but writes nothing else, does not look for
// cert-manager, and publishes no report. In issue, requests are signed
// where the hub writes: not while cert-manager is active.
func TestGateRequestFence(t *testing.T) {
	held := fixture.CertManagerLease("cm-1", now, 60)
	for _, tc := range []struct {
		mode          string
		signs, writes bool
	}{
		{mode: "external", signs: true},
		{mode: "issue"},
		{mode: "force-issue", signs: true, writes: true},
		{mode: "observe"},
		{mode: "off"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			b := newBed(t, map[string]string{"certhub.io/mode": tc.mode}, held)
			ctx := context.Background()
			b.gate.Pass(ctx)
			if _, ok := b.gate.RequestFence().Owns("c1"); ok != tc.signs {
				t.Errorf("RequestFence().Owns = %t; want %t", ok, tc.signs)
			}
			if _, _, done, ok := b.gate.RequestFence().BeginWrite("c1"); ok != tc.signs {
				t.Errorf("RequestFence().BeginWrite = %t; want %t", ok, tc.signs)
			} else {
				done()
			}
			if got := b.gate.Writes("c1"); got != tc.writes {
				t.Errorf("Writes = %t; want %t", got, tc.writes)
			}
			if tc.mode == "external" {
				if r, ok := b.report(t); ok {
					t.Errorf("a report for an external cluster: %+v", r)
				}
				if len(b.recorder.Events) > 0 {
					t.Error("a ClusterConflict Event in mode external, where cert-manager belongs")
				}
			}
		})
	}
}

// A tenant writing its own Certificate as "cert-manager-*" holds back
// status writes in its namespace only, for as long as it keeps writing:
// the cluster stays written (no ClusterConflict, no Event), every other
// namespace's status too, and the hold ends one quiet look later.
func TestGateFieldManagerHoldsItsNamespaceOnly(t *testing.T) {
	spoofed := fixture.Certificate("tenant", "mine", "ca")
	fixture.WrittenBy(spoofed, "cert-manager-certificates-issuing", now.Add(-time.Second))
	b := newBed(t, map[string]string{"certhub.io/mode": "issue"}, spoofed)
	ctx := context.Background()
	b.gate.Pass(ctx)
	if !b.gate.Writes("c1") || len(b.recorder.Events) != 0 {
		t.Fatalf("writes %t, %d Events: a tenant's field-manager name stopped the cluster (%s)", b.gate.Writes("c1"), len(b.recorder.Events), b.gate.String("c1"))
	}
	if why := b.gate.HoldsStatus("c1", "tenant"); !strings.Contains(why, "Certificate tenant/mine") {
		t.Errorf("HoldsStatus(tenant) = %q; want it held, naming the Certificate", why)
	}
	if why := b.gate.HoldsStatus("c1", "neighbour"); why != "" {
		t.Errorf("HoldsStatus(neighbour) = %q; want nothing held", why)
	}
	heard := b.notifications()
	b.clock.Step(time.Minute) // no write since the last look
	b.gate.Pass(ctx)
	if why := b.gate.HoldsStatus("c1", "tenant"); why != "" {
		t.Errorf("a quiet look later, HoldsStatus(tenant) = %q; want released", why)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return b.notifications() > heard, nil
	}); err != nil {
		t.Error("subscribers were not told the namespace is written again")
	}
	b.setMode("force-issue")
	fixture.WrittenBy(spoofed, "cert-manager-certificates-issuing", b.clock.Now())
	if err := b.down.Update(ctx, spoofed); err != nil {
		t.Fatal(err)
	}
	b.gate.Pass(ctx)
	if why := b.gate.HoldsStatus("c1", "tenant"); why != "" {
		t.Errorf("force-issue: HoldsStatus(tenant) = %q; want nothing held", why)
	}
}
