package certsync

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
)

// The loop guard stops a Certificate that is issued again and again for the
// same spec. Whatever the cause — a comparison bug, a second writer fighting
// over the Secret, a CA that cuts every certificate short of its renewal
// time — each issuance costs a signature, a Secret write and, with ACME, a
// share of the account's rate limits. It is issuer-agnostic: it runs after
// the trigger chain decided to issue, before any issuer is asked.
//
//	trigger says issue ─▶ DoesNotExist, ManuallyTriggered, new generation? ─yes─▶ issue, count = 1
//	                                   │ no
//	                      backing off (Ready=False/IssuanceLoopDetected)? ─yes─▶ wait, or one try when due
//	                                   │ no
//	                      count < MaxIssuances within Window? ─yes─▶ issue, count+1
//	                                   │ no
//	                      trip: Ready=False, Warning Event, metric, back-off
//
// The count travels with the certificate: IssuancesAnnotation on the Secret
// is written by the same apply as each issuance (no extra write), so a
// replica that takes the cluster over continues it. The back-off lives in the
// status (lastFailureTime, failedIssuanceAttempts) as cert-manager keeps it.

// Defaults for the loop guard's Options.
const (
	// DefaultLoopMaxIssuances is how many issuances one generation may get within DefaultLoopWindow.
	DefaultLoopMaxIssuances = 5
	// DefaultLoopWindow is the window the issuances are counted in.
	DefaultLoopWindow = time.Hour
	// DefaultLoopBackoff is the first pause after the guard trips; it doubles on each trip.
	DefaultLoopBackoff = 5 * time.Minute
	// DefaultLoopMaxBackoff caps the pause.
	DefaultLoopMaxBackoff = time.Hour
)

// loopRecord is the issuance count kept in IssuancesAnnotation:
// "generation=G,count=N,since=RFC3339,trips=T".
type loopRecord struct {
	generation int64
	count      int
	since      time.Time
	trips      int
}

func (l loopRecord) String() string {
	return fmt.Sprintf("generation=%d,count=%d,since=%s,trips=%d", l.generation, l.count, l.since.UTC().Format(time.RFC3339), l.trips)
}

// parseLoopRecord reads IssuancesAnnotation; ok is false when it is absent or malformed.
func parseLoopRecord(s *corev1.Secret) (rec loopRecord, ok bool) {
	if s == nil {
		return rec, false
	}
	v, found := s.Annotations[hubapi.IssuancesAnnotation]
	if !found {
		return rec, false
	}
	seen := 0
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "generation":
			rec.generation, err = strconv.ParseInt(val, 10, 64)
		case "count":
			rec.count, err = strconv.Atoi(val)
		case "since":
			rec.since, err = time.Parse(time.RFC3339, val)
		case "trips":
			rec.trips, err = strconv.Atoi(val)
		default:
			continue
		}
		if err != nil {
			return loopRecord{}, false
		}
		seen++
	}
	return rec, seen == 4 && rec.count >= 0 && rec.trips >= 0
}

// loopGuard holds the guard's settings (from Options, defaults applied).
type loopGuard struct {
	max                 int
	window              time.Duration
	backoff, maxBackoff time.Duration
}

// guardDecision is what the guard says about one intended issuance.
type guardDecision struct {
	// allow: issue, and write record with it.
	allow  bool
	record loopRecord
	// Otherwise: tripped is true when this decision tripped the guard (an
	// Event and a metric are due); attempts is failedIssuanceAttempts; retry
	// is when the next attempt is due; count and since describe the loop.
	tripped  bool
	attempts int
	retry    time.Time
	count    int
	since    time.Time
}

// delay is cert-manager's failure back-off: backoff·2^(attempts-1), capped.
func (g loopGuard) delay(attempts int) time.Duration {
	d := time.Duration(float64(g.backoff) * math.Pow(2, float64(max(attempts, 1)-1)))
	if d <= 0 || d > g.maxBackoff {
		return g.maxBackoff
	}
	return d
}

// decide runs the guard for an issuance triggered by reason, with secret the
// current Secret (nil when absent).
func (g loopGuard) decide(crt *cmapi.Certificate, secret *corev1.Secret, reason string, now time.Time) guardDecision {
	fresh := loopRecord{generation: crt.Generation, count: 1, since: now}
	rec, ok := parseLoopRecord(secret)
	if reason == reasons.DoesNotExist || reason == reasons.ManuallyTriggered || !ok || rec.generation != crt.Generation {
		return guardDecision{allow: true, record: fresh}
	}
	if ready := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionReady); ready != nil &&
		ready.Reason == reasons.IssuanceLoop && ready.ObservedGeneration == crt.Generation && crt.Status.LastFailureTime != nil {
		attempts := 1
		if a := crt.Status.FailedIssuanceAttempts; a != nil && *a > 0 {
			attempts = *a
		}
		due := crt.Status.LastFailureTime.Add(g.delay(attempts))
		if now.Before(due) {
			return guardDecision{attempts: attempts, retry: due, count: rec.count, since: rec.since}
		}
		// One try; if the loop goes on, the next trigger within the window trips again, with a longer pause.
		return guardDecision{allow: true, record: loopRecord{generation: crt.Generation, count: g.max, since: now, trips: attempts}}
	}
	if now.Sub(rec.since) >= g.window {
		return guardDecision{allow: true, record: fresh}
	}
	if rec.count < g.max {
		rec.count++
		return guardDecision{allow: true, record: rec}
	}
	attempts := rec.trips + 1
	return guardDecision{tripped: true, attempts: attempts, retry: now.Add(g.delay(attempts)), count: rec.count, since: rec.since}
}

// loopMessage is the Ready=False message of a Certificate the guard stopped.
func loopMessage(d guardDecision, generation int64, reason, message string, now time.Time) string {
	return fmt.Sprintf("Certificate was issued %d times in %s for generation %d without a spec change, Secret deletion or manual trigger; "+
		"the trigger that kept firing: %s (%s). Issuance is paused until %s (attempt %d; back-off doubles up to the cap). "+
		"Change the spec, delete the Secret or run `cmctl renew` to retry now",
		d.count, now.Sub(d.since).Round(time.Millisecond), generation, reason, message, d.retry.UTC().Format(time.RFC3339), d.attempts)
}
