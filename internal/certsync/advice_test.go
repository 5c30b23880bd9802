package certsync

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/issuers"
)

// fakeAdvisor answers RenewalTime with fixed values, relative to the
// harness clock when set through at/recheck offsets.
type fakeAdvisor struct {
	at, recheck time.Time
	ok          bool
	status      *cmapi.CertificateACMEARIStatus
	asked       int
}

func (f *fakeAdvisor) RenewalTime(context.Context, string, string, string, cmmeta.IssuerReference, *x509.Certificate) issuers.RenewalAdvice {
	f.asked++
	if !f.ok {
		return issuers.RenewalAdvice{Recheck: f.recheck}
	}
	return issuers.RenewalAdvice{At: f.at, Recheck: f.recheck, Status: f.status}
}

// The CA's renewal time (ARI) moves an issued certificate's renewal time
// earlier, never later; once it has passed the certificate is renewed;
// the Certificate is reconciled again when the answer goes stale.
func TestRenewalAdvice(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name string
		// at and recheck are offsets from the clock after the first issuance;
		// 0 recheck means none.
		at, recheck time.Duration
		ok          bool
		rev         int           // revision after the reconcile under test
		renewal     time.Duration // status.renewalTime, from the issuance (-1: the spec's, 60 days)
		requeue     time.Duration // 0: not checked
	}{
		{name: "no advice: the spec's renewal time", ok: false, rev: 1, renewal: -1},
		{name: "a window ahead, earlier than the spec's", at: 10 * day, recheck: 6 * time.Hour, ok: true, rev: 1, renewal: 10 * day, requeue: 6 * time.Hour},
		{name: "a window later than the spec's does not postpone it", at: 80 * day, ok: true, rev: 1, renewal: -1},
		{name: "a window that has passed: renewed now", at: -time.Hour, ok: true, rev: 2},
		{name: "recheck after the renewal time: requeued at the renewal time", at: 10 * day, recheck: 20 * day, ok: true, rev: 1, renewal: 10 * day, requeue: 10 * day},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newReconcilerHarness(t, nil, testCertificate())
			adv := &fakeAdvisor{}
			h.r.opts.RenewalAdvice = adv
			h.reconcile("web") // first issuance; nothing to ask about yet
			issued := h.clk.Now()
			adv.ok = tt.ok
			adv.at = issued.Add(tt.at)
			if tt.recheck != 0 {
				adv.recheck = issued.Add(tt.recheck)
			}
			res := h.reconcile("web")
			crt := h.certificate("web")
			if adv.asked == 0 {
				t.Fatal("the advisor was never asked")
			}
			if rev(crt) != tt.rev {
				t.Fatalf("revision %d, want %d", rev(crt), tt.rev)
			}
			if tt.rev == 2 {
				return
			}
			want := issued.Add(60 * day)
			if tt.renewal >= 0 {
				want = issued.Add(tt.renewal)
			}
			if rt := crt.Status.RenewalTime; rt == nil || rt.Sub(want).Abs() > time.Second {
				t.Errorf("status.renewalTime %v, want %v", rt, want)
			}
			if c := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionReady); c == nil || c.Status != cmmeta.ConditionTrue {
				t.Errorf("Ready %+v", c)
			}
			if tt.requeue != 0 && (res.RequeueAfter-tt.requeue).Abs() > time.Second {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.requeue)
			}
		})
	}
}

// status.acme.ari is the CA's last answer about the current certificate,
// as cert-manager 1.21 fills it; one a user wrote is replaced and decides
// nothing (no renewal), and it is cleared when the CA says nothing.
func TestACMEStatusIsTheCAsAnswer(t *testing.T) {
	const day = 24 * time.Hour
	h := newReconcilerHarness(t, nil, testCertificate())
	adv := &fakeAdvisor{}
	h.r.opts.RenewalAdvice = adv
	h.reconcile("web")
	issued := h.clk.Now()
	sec := func(d time.Duration) *metav1.Time {
		return &metav1.Time{Time: issued.Add(d).UTC().Truncate(time.Second)}
	}
	ari := &cmapi.CertificateACMEARIStatus{SuggestedWindow: &cmapi.ACMERenewalWindow{Start: sec(50 * day), End: sec(52 * day)},
		ExplanationURL: "https://ca.example/why", LastChecked: sec(0), NextCheck: sec(6 * time.Hour)}
	adv.ok, adv.at, adv.status = true, issued.Add(51*day), ari

	h.reconcile("web")
	crt := h.certificate("web")
	if crt.Status.ACME == nil || !apiequality.Semantic.DeepEqual(crt.Status.ACME.ARI, ari) {
		t.Fatalf("status.acme %+v; want the CA's answer %+v", crt.Status.ACME, ari)
	}

	// A user writes a window that has passed: nothing renews, it is replaced.
	crt.Status.ACME.ARI = &cmapi.CertificateACMEARIStatus{SuggestedWindow: &cmapi.ACMERenewalWindow{Start: sec(-2 * day), End: sec(-day)}}
	if err := h.c.Status().Update(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	h.reconcile("web")
	crt = h.certificate("web")
	if rev(crt) != 1 {
		t.Fatalf("revision %d: a window written into the status renewed the certificate", rev(crt))
	}
	if crt.Status.ACME == nil || !apiequality.Semantic.DeepEqual(crt.Status.ACME.ARI, ari) {
		t.Errorf("status.acme %+v; want the CA's answer back", crt.Status.ACME)
	}

	adv.ok, adv.status = false, nil
	h.reconcile("web")
	if crt = h.certificate("web"); crt.Status.ACME != nil {
		t.Errorf("status.acme %+v; want none when the CA says nothing", crt.Status.ACME)
	}
}
