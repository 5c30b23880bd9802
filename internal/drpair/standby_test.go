package drpair

import (
	"context"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

var now = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func leaf(t *testing.T, notBefore, notAfter time.Time, names ...string) *corev1.Secret {
	t.Helper()
	return fixture.TLSSecret(t, "shop", "web-tls", fixture.WithDNSNames(names...), fixture.WithValidity(notBefore, notAfter),
		fixture.WithSecretLabel(hubapi.ManagedByLabel, hubapi.ManagedByValue))
}

// The standby's certificate stands in for the primary's when it is for the
// same names, valid now, and does not expire first — or, when it does, is
// not due for renewal yet (the two renew at their own times).
func TestCheck(t *testing.T) {
	primary := Entry{Issued: true, NotAfter: now.Add(60 * 24 * time.Hour), Names: []string{"cn:web.example.com", "dns:web.example.com"}}
	day := 24 * time.Hour
	cases := []struct {
		name   string
		secret *corev1.Secret
		want   string
	}{
		{"same names, valid, expires after the primary", leaf(t, now.Add(-day), now.Add(89*day), "web.example.com"), ""},
		{"expires first, not due for renewal (a third of its life left is cert-manager's default)", leaf(t, now.Add(-day), now.Add(40*day), "web.example.com"), ""},
		{"expires first and due for renewal", leaf(t, now.Add(-80*day), now.Add(10*day), "web.example.com"), ReasonExpiresFirst},
		{"other names", leaf(t, now.Add(-day), now.Add(89*day), "web.example.com", "extra.example.com"), ReasonNamesDiffer},
		{"expired", leaf(t, now.Add(-90*day), now.Add(-time.Minute), "web.example.com"), ReasonNotValid},
		{"not valid yet", leaf(t, now.Add(time.Hour), now.Add(89*day), "web.example.com"), ReasonNotValid},
		{"no certificate", &corev1.Secret{}, ReasonNotIssued},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, msg := check(primary, &cmapi.CertificateSpec{}, leafOf(tc.secret), now); got != tc.want {
				t.Errorf("check = %q (%s), want %q", got, msg, tc.want)
			}
		})
	}
}

// fakeCluster serves a fake client as a downstream cluster.
type fakeCluster struct {
	cluster.Cluster
	c client.Client
}

func (f fakeCluster) GetClient() client.Client    { return f.c }
func (f fakeCluster) GetAPIReader() client.Reader { return f.c }

// denyWrites is a fence that owns every cluster and lets none be written
// (a standby in observe mode).
type denyWrites struct{}

func (denyWrites) Owns(multicluster.ClusterName) (string, bool) { return "hub-0/1", true }
func (denyWrites) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "", time.Time{}, func() {}, false
}

type pairBed struct {
	t                     *testing.T
	hub, primary, standby client.Client
	pairs                 *Pairs
	clk                   *clocktesting.FakeClock
}

func newPairBed(t *testing.T, writes fence.Fence, selector string, primaryObjs, standbyObjs []client.Object) *pairBed {
	t.Helper()
	scheme := testbed.Scheme()
	reg := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "cluster-dr"}}
	if selector != "" {
		reg.Annotations = map[string]string{hubapi.StandbySelectorAnnotation: selector}
	}
	b := &pairBed{t: t, clk: clocktesting.NewFakeClock(now),
		hub:     fake.NewClientBuilder().WithScheme(scheme).WithObjects(reg).Build(),
		primary: fake.NewClientBuilder().WithScheme(scheme).WithObjects(primaryObjs...).Build(),
		standby: fake.NewClientBuilder().WithScheme(scheme).WithObjects(standbyObjs...).Build()}
	var err error
	b.pairs, err = New(Options{Namespace: "certhub", Hub: b.hub, Registerer: prometheus.NewRegistry(), Fence: fence.Static{Identity: "hub-0"}, WriteFence: writes,
		Clusters: func() map[multicluster.ClusterName]map[string]string {
			return map[multicluster.ClusterName]map[string]string{"prod": nil, "dr": {hubapi.StandbyForLabel: "prod"}}
		},
		Registration: func(name multicluster.ClusterName) (types.NamespacedName, bool) {
			return types.NamespacedName{Namespace: "argocd", Name: "cluster-" + string(name)}, name == "dr"
		}})
	if err != nil {
		t.Fatal(err)
	}
	b.pairs.opts.clock = b.clk
	ctx := context.Background()
	_ = b.pairs.Engage(ctx, "prod", fakeCluster{c: b.primary})
	_ = b.pairs.Engage(ctx, "dr", fakeCluster{c: b.standby})
	return b
}

func (b *pairBed) pass() *Status {
	b.t.Helper()
	if err := b.pairs.pass(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	st, err := ReadStatuses(context.Background(), b.hub, "certhub")
	if err != nil {
		b.t.Fatal(err)
	}
	return st["dr"]
}

func readyCertificate(ns, name string, labels map[string]string, dnsNames ...string) *cmapi.Certificate {
	crt := fixture.Certificate(ns, name, "ca", fixture.WithNames(dnsNames[0], dnsNames...))
	crt.Labels = labels
	crt.Generation = 1
	crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, ObservedGeneration: 1}}
	return crt
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func (b *pairBed) certificate(c client.Client, ns, name string) *cmapi.Certificate {
	b.t.Helper()
	crt := &cmapi.Certificate{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, crt); err != nil {
		return nil
	}
	return crt
}

// One pair through its life, on fake clients and a fake clock: the
// primary's Ready Certificates are created in the standby (marked), one
// not Ready is not, one whose namespace the standby lacks is reported,
// the standby's own Certificate of the same name is checked and never
// written; once the standby's Secret holds a certificate for the same
// names the pair is ready; a Certificate deleted in the primary is deleted
// in the standby only if the mirror made it.
func TestPairLifecycle(t *testing.T) {
	ctx := context.Background()
	web := readyCertificate("shop", "web", map[string]string{"tier": "front"}, "web.example.com")
	pending := fixture.Certificate("shop", "pending", "ca", fixture.WithNames("", "pending.example.com"))
	elsewhere := readyCertificate("billing", "api", nil, "api.example.com")
	own := readyCertificate("shop", "own", nil, "own.example.com")
	b := newPairBed(t, nil, "", []client.Object{web, pending, elsewhere, own,
		leaf(t, now.Add(-time.Hour), now.Add(90*24*time.Hour), "web.example.com"),
		withName(leaf(t, now.Add(-time.Hour), now.Add(90*24*time.Hour), "api.example.com"), "billing", "api-tls"),
		withName(leaf(t, now.Add(-time.Hour), now.Add(90*24*time.Hour), "own.example.com"), "shop", "own-tls"),
	}, []client.Object{namespace("shop"), fixture.Certificate("shop", "own", "ca", fixture.WithNames("", "own.example.com"))})

	st := b.pass()
	got := b.certificate(b.standby, "shop", "web")
	if got == nil || got.Labels[hubapi.StandbyMirrorLabel] != "true" || got.Labels["tier"] != "front" || got.Annotations[hubapi.StandbyOfAnnotation] != "prod" ||
		got.Spec.SecretName != web.Spec.SecretName || got.Spec.DNSNames[0] != "web.example.com" {
		t.Fatalf("the primary's Ready Certificate in the standby: %+v", got)
	}
	if b.certificate(b.standby, "shop", "pending") != nil {
		t.Error("a Certificate not Ready in the primary was created in the standby")
	}
	if o := b.certificate(b.standby, "shop", "own"); o.Labels[hubapi.StandbyMirrorLabel] != "" || o.Annotations[hubapi.StandbyOfAnnotation] != "" {
		t.Errorf("the standby's own Certificate was written: %+v", o)
	}
	want := map[string]int{ReasonMissing: 1, ReasonNotIssuedInPrimary: 1, ReasonNamespaceMissing: 1, ReasonNotIssued: 1}
	if st == nil || st.Ready || st.Selected != 4 || st.ReadyCertificates != 0 || !equalCounts(st.Reasons, want) {
		t.Fatalf("status after the first pass: %+v, want reasons %v", st, want)
	}

	// The hub issues in the standby (certsync's part, here by hand).
	for _, s := range []*corev1.Secret{leaf(t, now, now.Add(90*24*time.Hour), "web.example.com"), withName(leaf(t, now, now.Add(90*24*time.Hour), "own.example.com"), "shop", "own-tls")} {
		if err := b.standby.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	st = b.pass()
	if want := map[string]int{ReasonNotIssuedInPrimary: 1, ReasonNamespaceMissing: 1}; st.Ready || st.ReadyCertificates != 2 || !equalCounts(st.Reasons, want) {
		t.Fatalf("status once issued: %+v, want 2 ready and reasons %v", st, want)
	}

	// Deleted in the primary: the mirror's copy goes, the standby's own stays.
	for _, crt := range []*cmapi.Certificate{web, own} {
		if err := b.primary.Delete(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	b.clk.Step(time.Minute)
	b.pass()
	if b.certificate(b.standby, "shop", "web") != nil {
		t.Error("a Certificate the mirror created stayed after its primary's was deleted")
	}
	if b.certificate(b.standby, "shop", "own") == nil {
		t.Error("the standby's own Certificate was deleted")
	}
}

// What must never delete or write: the standby in observe mode is only
// reported; a primary whose source is gone (lost, deregistered) or
// empty deletes nothing; a selector that does not parse selects none.
func TestPairNeverDeletesForWantOfASource(t *testing.T) {
	web := readyCertificate("shop", "web", nil, "web.example.com")
	mirrored := readyCertificate("shop", "old", nil, "old.example.com")
	mirrored.Labels = map[string]string{hubapi.StandbyMirrorLabel: "true"}
	mirrored.Annotations = map[string]string{hubapi.StandbyOfAnnotation: "prod"}
	cases := []struct {
		name       string
		writes     fence.Fence
		selector   string
		primary    []client.Object
		dropSource bool
		wantReason string
	}{
		{"observe mode writes nothing", denyWrites{}, "", []client.Object{web, leaf(t, now.Add(-time.Hour), now.Add(time.Hour), "web.example.com")}, false, ReasonMissing},
		{"the primary lost: its source gone", nil, "", []client.Object{web}, true, ReasonPrimaryNotSeen},
		{"an empty primary", nil, "", nil, false, ""},
		{"a selector that does not parse", nil, "tier in (", []client.Object{web, leaf(t, now.Add(-time.Hour), now.Add(time.Hour), "web.example.com")}, false, "InvalidSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newPairBed(t, tc.writes, tc.selector, tc.primary, []client.Object{namespace("shop"), mirrored.DeepCopy()})
			if tc.dropSource {
				b.pairs.Forget("prod") // the primary unreachable: no source is written
			}
			st := b.pass()
			if b.certificate(b.standby, "shop", "old") == nil {
				t.Error("a mirrored Certificate was deleted")
			}
			if tc.writes != nil && b.certificate(b.standby, "shop", "web") != nil {
				t.Error("a standby in observe mode was written")
			}
			if tc.wantReason != "" && (st.Ready || !hasProblem(st, tc.wantReason)) {
				t.Errorf("status %+v, want a %s problem", st, tc.wantReason)
			}
		})
	}
}

func withName(s *corev1.Secret, ns, name string) *corev1.Secret {
	s.Namespace, s.Name = ns, name
	return s
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func hasProblem(st *Status, reason string) bool {
	for _, p := range st.Problems {
		if p.Reason == reason {
			return true
		}
	}
	return false
}
