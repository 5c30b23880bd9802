package certsync

import (
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
)

func TestLoopGuardDecide(t *testing.T) {
	g := loopGuard{max: 5, window: time.Hour, backoff: 5 * time.Minute, maxBackoff: time.Hour}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	secret := func(rec string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{hubapi.IssuancesAnnotation: rec}}}
	}
	rec := func(gen int64, count int, since time.Time, trips int) string {
		return loopRecord{generation: gen, count: count, since: since, trips: trips}.String()
	}
	// paused is a Certificate the guard stopped at failedAt, after attempts trips.
	paused := func(failedAt time.Time, attempts int) func(*cmapi.Certificate) {
		return func(c *cmapi.Certificate) {
			c.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse,
				Reason: reasons.IssuanceLoop, ObservedGeneration: c.Generation}}
			c.Status.LastFailureTime = &metav1.Time{Time: failedAt}
			c.Status.FailedIssuanceAttempts = ptr.To(attempts)
		}
	}
	tests := []struct {
		name    string
		crt     func(*cmapi.Certificate)
		secret  *corev1.Secret
		reason  string
		want    guardDecision
		wantRec string // when allowed
	}{
		{name: "first issuance", secret: nil, reason: reasons.DoesNotExist,
			want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "second issuance counts on", secret: secret(rec(3, 1, now.Add(-time.Minute), 0)), reason: reasons.IncorrectCertificate,
			want: guardDecision{allow: true}, wantRec: rec(3, 2, now.Add(-time.Minute), 0)},
		{name: "the last allowed one", secret: secret(rec(3, 4, now.Add(-time.Minute), 0)), reason: reasons.KeyMismatch,
			want: guardDecision{allow: true}, wantRec: rec(3, 5, now.Add(-time.Minute), 0)},
		{name: "one more trips", secret: secret(rec(3, 5, now.Add(-time.Minute), 0)), reason: reasons.KeyMismatch,
			want: guardDecision{tripped: true, attempts: 1, retry: now.Add(5 * time.Minute), count: 5, since: now.Add(-time.Minute)}},
		{name: "a second trip doubles the pause", secret: secret(rec(3, 5, now.Add(-time.Minute), 1)), reason: reasons.Renewing,
			want: guardDecision{tripped: true, attempts: 2, retry: now.Add(10 * time.Minute), count: 5, since: now.Add(-time.Minute)}},
		{name: "the pause is capped at an hour", secret: secret(rec(3, 5, now.Add(-time.Minute), 9)), reason: reasons.Renewing,
			want: guardDecision{tripped: true, attempts: 10, retry: now.Add(time.Hour), count: 5, since: now.Add(-time.Minute)}},
		{name: "a quiet window starts the count again", secret: secret(rec(3, 5, now.Add(-time.Hour), 2)), reason: reasons.Renewing,
			want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "spec change starts the count again", secret: secret(rec(2, 5, now.Add(-time.Minute), 1)), reason: reasons.IncorrectCertificate,
			want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "Secret deleted starts the count again", secret: nil, reason: reasons.DoesNotExist, crt: paused(now.Add(-time.Minute), 1),
			want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "manual trigger starts the count again", secret: secret(rec(3, 5, now.Add(-time.Minute), 1)), reason: reasons.ManuallyTriggered,
			crt: paused(now.Add(-time.Minute), 1), want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "a malformed record starts the count again", secret: secret("count=lots"), reason: reasons.KeyMismatch,
			want: guardDecision{allow: true}, wantRec: rec(3, 1, now, 0)},
		{name: "paused: waits for the back-off", secret: secret(rec(3, 5, now.Add(-3*time.Minute), 0)), reason: reasons.KeyMismatch,
			crt:  paused(now.Add(-2*time.Minute), 1),
			want: guardDecision{attempts: 1, retry: now.Add(3 * time.Minute), count: 5, since: now.Add(-3 * time.Minute)}},
		{name: "paused twice: waits for the doubled back-off", secret: secret(rec(3, 5, now.Add(-8*time.Minute), 1)), reason: reasons.KeyMismatch,
			crt:  paused(now.Add(-7*time.Minute), 2),
			want: guardDecision{attempts: 2, retry: now.Add(3 * time.Minute), count: 5, since: now.Add(-8 * time.Minute)}},
		{name: "paused: one try when the back-off is over, at the limit", secret: secret(rec(3, 5, now.Add(-6*time.Minute), 0)), reason: reasons.KeyMismatch,
			crt: paused(now.Add(-5*time.Minute), 1), want: guardDecision{allow: true}, wantRec: rec(3, 5, now, 1)},
		{name: "paused for an older generation: not paused", secret: secret(rec(3, 1, now.Add(-time.Minute), 0)), reason: reasons.KeyMismatch,
			crt: func(c *cmapi.Certificate) {
				paused(now.Add(-time.Minute), 1)(c)
				c.Status.Conditions[0].ObservedGeneration = 2
			}, want: guardDecision{allow: true}, wantRec: rec(3, 2, now.Add(-time.Minute), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crt := testCertificate()
			crt.Generation = 3
			if tt.crt != nil {
				tt.crt(crt)
			}
			got := g.decide(crt, tt.secret, tt.reason, now)
			if tt.want.allow {
				if !got.allow || got.record.String() != tt.wantRec {
					t.Fatalf("decide = %+v (record %s), want allowed with record %s", got, got.record, tt.wantRec)
				}
				return
			}
			got.record = loopRecord{}
			if got != tt.want {
				t.Fatalf("decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A loop run through the guard on a fake clock: a Secret broken after every
// issuance gets exactly LoopMaxIssuances issuances, then one try per
// back-off, each pause twice the last, capped.
func TestLoopGuardStopsALoop(t *testing.T) {
	g := loopGuard{max: 5, window: time.Hour, backoff: 5 * time.Minute, maxBackoff: time.Hour}
	crt := testCertificate()
	crt.Generation = 1
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var s *corev1.Secret
	reason := reasons.DoesNotExist
	issued := 0
	var pauses []time.Duration
	for step := 0; step < 200 && len(pauses) < 6; step++ {
		d := g.decide(crt, s, reason, now)
		switch {
		case d.allow:
			issued++
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{hubapi.IssuancesAnnotation: d.record.String()}}}
			crt.Status.Conditions = nil // setReady after the issuance
			crt.Status.LastFailureTime, crt.Status.FailedIssuanceAttempts = nil, nil
			reason = reasons.KeyMismatch // the second writer breaks it again at once
			now = now.Add(time.Second)
		case d.tripped:
			pauses = append(pauses, d.retry.Sub(now))
			if len(pauses) == 1 && issued != 5 {
				t.Fatalf("the guard tripped after %d issuances, want 5", issued)
			}
			paused := d.attempts
			crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionFalse, Reason: reasons.IssuanceLoop, ObservedGeneration: 1}}
			crt.Status.LastFailureTime = &metav1.Time{Time: now}
			crt.Status.FailedIssuanceAttempts = &paused
		default:
			now = d.retry // the requeue fires when due
		}
	}
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour}
	if len(pauses) != len(want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
	for i := range want {
		if pauses[i] != want[i] {
			t.Fatalf("pauses %v, want %v", pauses, want)
		}
	}
	if issued != 5+5 {
		t.Errorf("%d issuances: want 5 before the first trip and one per back-off after it (10)", issued)
	}
}
