package migration

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
)

const (
	certificates = 50 // cert-manager issued them all
	sameCA       = 35 // moved to the hub ClusterIssuer with cert-manager's key pair; the rest to another CA
)

// A cluster that runs cert-manager moves onto the hub and back:
//
//  1. cert-manager issues 50 Certificates with its CA Issuer; 35 are then
//     pointed at a hub ClusterIssuer holding the same CA key pair, 15 at
//     the hub's own CA;
//  2. observed: the plan says Adopt for the 35, Reissue for the 15, and
//     the hub writes nothing (counted by a recording proxy);
//  3. switched to issue while cert-manager runs: ClusterConflict (report,
//     Event on the cluster Secret), nothing written;
//  4. cert-manager stopped: every Certificate Ready from the hub, the 35
//     with their serials unchanged, the 15 re-issued by the hub's CA
//     through the issuance budget;
//  5. switched off and cert-manager started again: it re-issues nothing,
//     every Certificate Ready, and the hub writes nothing.
func TestMigrateFromCertManagerAndBack(t *testing.T) {
	ctx := context.Background()
	cp := bed.Downstreams[0]
	cm := startCertManager(t, cp)
	crts := issueWithCertManager(t, cp, "web", certificates, cmmeta.IssuerReference{Name: cmIssuer, Kind: cmapi.IssuerKind, Group: "cert-manager.io"})
	before := serials(t, cp, crts)

	proxy, err := cp.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	const cluster = "legacy"
	reg, err := bed.RegisterThrough(ctx, cp, cluster, proxy, map[string]string{hubapi.ModeLabel: hubapi.ModeObserve})
	if err != nil {
		t.Fatal(err)
	}
	// The ApplicationSet points the Certificates at the hub's issuers.
	for i, crt := range crts {
		ref := cmmeta.IssuerReference{Name: sameIssuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
		if i >= sameCA {
			ref.Name = otherIssuer
		}
		cur := &cmapi.Certificate{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crt), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.IssuerRef = ref
		if err := cp.Client.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		crts[i] = cur
	}

	// 2. Observe: the plan, no write.
	r := waitReport(t, cluster, "a plan of every Certificate", func(r writegate.Report) bool {
		return r.Counts[writegate.ActionAdopt] == sameCA && r.Counts[writegate.ActionReissue] == certificates-sameCA
	})
	if r.Mode != writegate.Observe || r.Writes || len(r.Plan) != certificates {
		t.Errorf("report: mode %s, writes %t, %d rows; want observe, no writes, %d rows", r.Mode, r.Writes, len(r.Plan), certificates)
	}
	for _, v := range r.Plan {
		want := writegate.ActionAdopt
		if v.Name >= crts[sameCA].Name {
			want = writegate.ActionReissue
		}
		if v.Action != want || !v.Adopting {
			t.Errorf("plan row %s/%s: %s (adopting %t, %s: %s); want %s, adopting", v.Namespace, v.Name, v.Action, v.Adopting, v.Reason, v.Message, want)
		}
	}
	if w := proxy.Writes(); len(w) > 0 {
		t.Fatalf("observe mode wrote %d times downstream:\n%s", len(w), writesOf(w))
	}

	// 3. Issue while cert-manager runs: ClusterConflict, nothing written.
	setMode(t, reg, hubapi.ModeIssue)
	r = waitReport(t, cluster, "ClusterConflict", func(r writegate.Report) bool { return r.Mode == writegate.Issue && r.Conflict })
	t.Logf("conflict: %s", r.Message)
	fixture.WaitEvent(t, bed.Hub.Client, reg.Namespace, reg.Name, writegate.ReasonClusterConflict, "cert-manager")
	if w := proxy.Writes(); len(w) > 0 {
		t.Fatalf("issue mode wrote %d times while cert-manager runs:\n%s", len(w), writesOf(w))
	}

	// 4. cert-manager stops: the hub takes every Certificate over.
	start := time.Now()
	cm.stop()
	waitTakenOver(t, cp, crts)
	took := time.Since(start)
	after := serials(t, cp, crts)
	var reissued []*x509.Certificate
	for i, crt := range crts {
		c, _ := leaf(t, cp, crt)
		if i >= sameCA {
			reissued = append(reissued, c)
		}
		switch {
		case i < sameCA && after[crt.Name] != before[crt.Name]:
			t.Errorf("%s: re-issued (serial %s → %s); the same CA signed it, it must be kept", crt.Name, before[crt.Name], after[crt.Name])
		case i >= sameCA && (after[crt.Name] == before[crt.Name] || c.CheckSignatureFrom(otherCA(t)) != nil):
			t.Errorf("%s: not re-issued by %s (serial %s → %s)", crt.Name, otherIssuer, before[crt.Name], after[crt.Name])
		}
	}
	if waits, _ := fixture.Gauge(t, "certhub_certificate_budget_waits_total", map[string]string{"cluster": cluster}); waits == 0 {
		t.Errorf("no re-issue waited for the issuance budget (--issuance-rate %d)", issuanceRate)
	}
	expectWithinRate(t, reissued, issuanceRate)
	writes := proxy.Writes()
	t.Logf("taken over in %s: %d kept, %d re-issued, %d downstream writes (%.2f per Certificate)",
		took.Round(time.Millisecond), sameCA, certificates-sameCA, len(writes), float64(len(writes))/certificates)

	// 5. Back to cert-manager: off, then cert-manager again.
	setMode(t, reg, hubapi.ModeOff)
	waitReport(t, cluster, "mode off", func(r writegate.Report) bool { return r.Mode == writegate.Off && !r.Writes })
	proxy.Reset()
	handed := serials(t, cp, crts)
	reqs := requests(t, cp)
	startCertManager(t, cp)
	// cert-manager looks at every Certificate as soon as its informers
	// sync; give it time to act on any of them, then nothing may change.
	quietUntil := time.Now().Add(15 * time.Second)
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, false, func(context.Context) (bool, error) {
		if made := newRequests(t, cp, reqs, requests(t, cp)); made != "" {
			t.Fatalf("cert-manager asked again after the rollback:\n%s", made)
		}
		return time.Now().After(quietUntil), nil
	})
	if got := serials(t, cp, crts); len(got) != len(handed) {
		t.Fatal("Secrets lost")
	} else {
		for name, s := range handed {
			if got[name] != s {
				t.Errorf("%s: re-issued by cert-manager after the rollback (serial %s → %s)", name, s, got[name])
			}
		}
	}
	expectAllReady(t, cp, crts)
	if w := proxy.Writes(); len(w) > 0 {
		t.Errorf("mode off wrote %d times downstream:\n%s", len(w), writesOf(w))
	}
}

// otherCA is the hub's own CA (the suite's ClusterIssuer).
func otherCA(t *testing.T) *x509.Certificate {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(env.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
